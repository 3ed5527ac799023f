"""What the guard hands back: a refusal of one call, a stop of the turn, and the events it keeps."""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from .stop_reason import StopReason


class Refusal(BaseModel):
    """``pre_tool_call`` refused the call: the tool must not run, and the model gets ``message`` instead."""

    model_config = ConfigDict(frozen=True)

    message: str
    """The text to hand the model as the call's result."""
    reason: StopReason
    """Why: ``repeated_call``, or the reason the turn already stopped."""


class Stop(BaseModel):
    """``pre_llm_call`` ended the turn: make no more model calls; ``message`` is the final text for the caller."""

    model_config = ConfigDict(frozen=True)

    message: str
    """The final message the caller sees in place of an answer."""
    reason: StopReason
    """The one rule that ended the turn."""


class GuardEvent(BaseModel):
    """A refusal or a stop, kept in the state for whoever reads it later (no argument values)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["refusal", "stop"]
    reason: StopReason
    tool: str | None
    """The tool refused, or the tool that tripped the stop (``None`` for budgets)."""
    count: float
    """What tripped: the call's number for its key, refusals, errors in a row, model calls, seconds or dollars."""
    limit: float
    turn_id: str | None
    turn: int
    """The turn's number in this state: 1 for the first turn."""
    message: str | None = None
    """For a stop, its final message (a stop's text holds no argument values); ``None`` for a refusal."""

    def as_stop(self) -> Stop | None:
        """The ``Stop`` this event recorded, or ``None`` for a refusal."""
        return None if self.kind != "stop" or self.message is None else Stop(message=self.message, reason=self.reason)


class Delivery(NamedTuple):
    """A decided delivery, remembered so that a second delivery of it is not counted again."""

    tool: str
    key: str
    number: int
    """The call's number for its key when it was decided."""
    refused: bool
    settled: bool
    """Its outcome was recorded (``post_tool_call``)."""
    why: str = ""
    """Which rule decided it: ``repeat``, ``failure``, ``cycle`` or ``forbidden`` (read for refused calls)."""


class Mark(NamedTuple):
    """What a call key's last run saw and returned, for ``count="progress"``."""

    changes: int
    """The state's ``changes`` when the count last continued or restarted: a different number now means
    that something which may have changed the result ran since."""
    outcome: str | None
    """A digest of the last run's outcome (ok or failed, and its result); ``None`` before any."""
    ok: bool | None
    """Whether the last run succeeded; ``None`` before any outcome."""
