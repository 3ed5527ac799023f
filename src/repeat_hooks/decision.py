"""What the guard hands back: a refusal of one call, a stop of the turn, and the events it keeps."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .stop_reason import StopReason


class RefusalKind(str, Enum):
    """Which rule refused a call. Each kind has its own text (``messages.REFUSAL_MESSAGES``)."""

    REPEAT = "repeat"
    """The same call ran ``max_calls`` times with nothing since that could change its result."""
    FAILURE = "failure"
    """The same call failed the same way ``max_calls`` times, with nothing changed since."""
    CYCLE = "cycle"
    """The call would start the third pass of a cycle (A-B-A-B-...) whose second pass repeated the first."""
    FORBIDDEN = "forbidden"
    """The tool's limit is 0: it may not be called in a turn."""
    DUPLICATE_WRITE = "duplicate_write"
    """The call acts on the world (``destructive``, not idempotent) and the same call already succeeded
    with nothing else changed since: running it again would do it twice."""
    REJECTED = "rejected"
    """The same call was rejected before it ran (a human reviewer or a guardrail: ``withdraw_tool_call``)
    ``max_calls`` times, with nothing changed since: asking again would be rejected again."""
    OPAQUE = "opaque"
    """The call's result could not be compared (no stable form) and it already ran ``max_opaque_runs``
    times in this turn."""
    TURN_ENDED = "turn_ended"
    """The turn has already stopped: no call runs any more."""

    def __str__(self) -> str:
        return self.value


class Refusal(BaseModel):
    """``pre_tool_call`` refused the call: the tool must not run, and the model gets ``message`` instead."""

    model_config = ConfigDict(frozen=True)

    message: str
    """The text to hand the model as the call's result."""
    reason: StopReason
    """Why, as a stop reason: ``repeated_call``, or the reason the turn already stopped."""
    kind: RefusalKind = RefusalKind.REPEAT
    """Which rule refused it."""


class Stop(BaseModel):
    """``pre_llm_call`` ended the turn: make no more model calls; ``message`` is the final text for the caller."""

    model_config = ConfigDict(frozen=True)

    message: str
    """The final message the caller sees in place of an answer."""
    reason: StopReason
    """The one rule that ended the turn."""


class GuardEvent(BaseModel):
    """A refusal or a stop, kept in the state for whoever reads it later (no argument values)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["refusal", "stop"]
    reason: StopReason
    tool: str | None
    """The tool refused, or the tool that tripped the stop (``None`` for budgets)."""
    count: Annotated[float, Field(allow_inf_nan=False)]
    """What tripped: the call's number for its key, refusals, errors in a row, model calls, seconds or dollars."""
    limit: Annotated[float, Field(allow_inf_nan=False)]
    turn_id: str | None
    turn: int
    """The turn's number in this state: 1 for the first turn."""
    message: str | None = None
    """For a stop, its final message (a stop's text holds no argument values); ``None`` for a refusal."""
    refusal: RefusalKind | None = None
    """For a refusal, the rule that refused the call; ``None`` for a stop."""

    def as_stop(self) -> Stop | None:
        """The ``Stop`` this event recorded, or ``None`` for a refusal."""
        return None if self.kind != "stop" or self.message is None else Stop(message=self.message, reason=self.reason)
