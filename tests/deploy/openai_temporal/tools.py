"""The agent's tool: ``track_parcel`` as a Temporal activity, made a tool with ``activity_as_tool``.

"Reached the tool" means: the activity body started in some worker. Each attempt appends one ledger
line *before* doing anything else, so an attempt whose worker is SIGKILLed mid-call is still on
record. Temporal retries that call (same activity id, attempt 2) in the surviving worker; the guard,
which runs in workflow code before the activity is scheduled, decided it once. So the test counts
*distinct calls* (activity ids) to compare with an uninterrupted run, and attempts separately.
"""

from __future__ import annotations

from pathlib import Path

from temporal_harness import KillAt, checkpoint, tracking_status
from temporalio import activity


class ParcelTools:
    """Activities bound to one worker's ledger and kill point."""

    def __init__(self, ledger: Path, kill_at: KillAt | None = None) -> None:
        self.ledger = ledger
        self.kill_at = kill_at

    @activity.defn
    async def track_parcel(self, parcel_id: str) -> str:
        """Return the tracking status of a parcel."""
        await checkpoint(self.ledger, self.kill_at, "tool", {"parcel_id": parcel_id})
        return tracking_status(parcel_id)
