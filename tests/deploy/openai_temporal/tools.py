"""The agent's tool: ``track_parcel`` as a Temporal activity, made a tool with ``activity_as_tool``.

"Reached the tool" means: the activity body started in some worker. Each attempt appends one ledger
line *before* doing anything else, so an attempt whose worker is SIGKILLed mid-call is still on
record. Temporal retries that call (same activity id, attempt 2) in the surviving worker; the guard,
which runs in workflow code before the activity is scheduled, decided it once. So the test counts
*distinct calls* (activity ids) to compare with an uninterrupted run, and attempts separately.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio import activity

from . import scenario


class ParcelTools:
    """Activities bound to one worker's ledger and kill point."""

    def __init__(self, ledger: Path, kill_at: scenario.KillAt | None = None) -> None:
        self.ledger = ledger
        self.kill_at = kill_at

    @activity.defn
    async def track_parcel(self, parcel_id: str) -> str:
        """Return the tracking status of a parcel."""
        info = activity.info()
        record = {
            "kind": "tool",
            "workflow_id": info.workflow_id,
            "activity_id": info.activity_id,
            "attempt": info.attempt,
            "pid": os.getpid(),
            "parcel_id": parcel_id,
        }
        scenario.append(self.ledger, record)
        if self.kill_at is not None and self.kill_at.where == "tool" and info.attempt == 1:
            number = len(scenario.Ledger.load(self.ledger, info.workflow_id or "").tool_calls)
            if number == self.kill_at.number:
                await scenario.block_until_killed(self.ledger, record, f"tool:{number}")
        return scenario.tracking_status(parcel_id)
