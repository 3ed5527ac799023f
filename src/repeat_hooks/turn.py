"""One turn's counters: replaced whole when a new turn starts, so no per-turn count can outlive its turn."""

from __future__ import annotations

from typing import Annotated, NamedTuple

from pydantic import ConfigDict, Field

from .decision import Stop
from .whole import WholeModel

MAX_KEYS = 65_536
"""The most call keys a turn may hold, whatever ``Policy.max_keys`` says: a stored state with more is refused."""
MAX_RUNS = 128
"""The most runs kept for cycles (twice the longest ``Policy.max_cycle_period``)."""
MAX_COUNT = 2**53
"""The largest count a stored state may hold (JSON's exact integers)."""

Count = Annotated[int, Field(ge=-1, le=MAX_COUNT)]
Figure = Annotated[float, Field(ge=0, allow_inf_nan=False)]


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
    """The counters of the current turn. ``GuardState.start`` replaces it with a fresh one.

    Loading one checks every bound: counts are whole numbers up to ``MAX_COUNT``, figures finite, maps at
    most ``MAX_KEYS`` long, no unknown field.
    """

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """The turn's id, as the adapter gave it (``None`` for turns started without one)."""
    number: Count = 0
    """Which turn of the state this is: 1 for the first (0 before any)."""
    counts: dict[str, Count] = Field(default_factory=dict, max_length=MAX_KEYS)
    """Call key digest -> calls counted (oldest-used first; at most ``Policy.max_keys``)."""
    marks: dict[str, Mark] = Field(default_factory=dict, max_length=MAX_KEYS)
    """With ``count="progress"``: call key digest -> what its last run saw and returned (keys of ``counts``)."""
    changes: Count = 0
    """With ``count="progress"``: successful runs of calls that may change state."""
    runs: list[str] = Field(default_factory=list, max_length=MAX_RUNS)
    """With ``count="progress"``: the last runs (key and outcome digests), for cycles."""
    recent: list[str] = Field(default_factory=list, max_length=MAX_KEYS)
    """With ``window`` set: the keys of the last counted calls, oldest first."""
    refusals: Count = 0
    """Calls refused."""
    responses: Count = 0
    """Model calls let through by ``decide_model_call``; numbers the model's responses."""
    refused_responses: Count = 0
    """Model responses with at least one refused call (what ``max_refusals`` counts)."""
    batch: Count = -1
    """The response (``responses``) whose calls ``decide_tool_calls`` decided as a batch; -1 for none."""
    refused_in: Count = -1
    """The response (``responses``) in which the last refusal was counted; -1 for none."""
    last_refused: str | None = None
    """The tool refused last."""
    errors_in_a_row: Count = 0
    """Failed calls since the last success."""
    last_failed: str | None = None
    """The tool that failed last."""
    model_calls: Count = 0
    """Model calls recorded by ``record_model_call``."""
    model_seconds: Figure = 0.0
    """Model time recorded by ``record_model_call`` (recorded values, never a clock)."""
    cost_usd: Figure = 0.0
    """Cost recorded by ``record_model_call``."""
    stop: Stop | None = None
    """The turn's stop, once ``decide_model_call`` has ended it."""
