"""One turn's counters: replaced whole when a new turn starts, so no per-turn count can outlive its turn."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import Field

from .decision import Stop
from .whole import WholeModel


class Mark(NamedTuple):
    """What a call key's last run saw and returned, for ``count="progress"``. Build it by keyword."""

    changes: int
    """The turn's ``changes`` when the count last continued or restarted: a different number now means
    that something which may have changed the result ran since."""
    outcome: str | None
    """A digest of the last run's outcome (ok or failed, and its result); ``None`` before any."""
    ok: bool | None
    """Whether the last run succeeded; ``None`` before any outcome."""
    opaque: int = 0
    """Runs in this turn whose result had no stable form (``Policy.max_opaque_runs`` caps them)."""


class Turn(WholeModel):
    """The counters of the current turn. ``GuardState.start`` replaces it with a fresh one."""

    id: str | None = None
    """The turn's id, as the adapter gave it (``None`` for turns started without one)."""
    number: int = 0
    """Which turn of the state this is: 1 for the first (0 before any)."""
    counts: dict[str, int] = Field(default_factory=dict)
    """Call key digest -> calls counted (oldest-used first; at most ``Policy.max_keys``)."""
    marks: dict[str, Mark] = Field(default_factory=dict)
    """With ``count="progress"``: call key digest -> what its last run saw and returned (keys of ``counts``)."""
    changes: int = 0
    """With ``count="progress"``: successful runs of calls that may change state."""
    runs: list[str] = Field(default_factory=list)
    """With ``count="progress"``: the last runs (key and outcome digests), for cycles."""
    recent: list[str] = Field(default_factory=list)
    """With ``window`` set: the keys of the last counted calls, oldest first."""
    refusals: int = 0
    """Calls refused."""
    responses: int = 0
    """Model calls let through by ``decide_model_call``; numbers the model's responses."""
    refused_responses: int = 0
    """Model responses with at least one refused call (what ``max_refusals`` counts)."""
    refused_in: int = -1
    """The response (``responses``) in which the last refusal was counted; -1 for none."""
    last_refused: str | None = None
    """The tool refused last."""
    errors_in_a_row: int = 0
    """Failed calls since the last success."""
    last_failed: str | None = None
    """The tool that failed last."""
    model_calls: int = 0
    """Model calls recorded by ``record_model_call``."""
    model_seconds: float = 0.0
    """Model time recorded by ``record_model_call`` (recorded values, never a clock)."""
    cost_usd: float = 0.0
    """Cost recorded by ``record_model_call``."""
    stop: Stop | None = None
    """The turn's stop, once ``decide_model_call`` has ended it."""
