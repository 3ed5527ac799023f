"""What the guard decides: a refusal of one call, a stop of the turn, their reasons, and the events it keeps.

A ``Refusal``'s reason is the rule that refused the call (a ``RefusalKind``); a ``Stop``'s reason is the rule
that ended the turn (a ``StopReason``). A ``GuardEvent`` keeps either, with its count and limit, in the state.
"""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StopReason(str, Enum):
    """Why a turn was ended. Every stop has exactly one."""

    REPEATED_CALL = "repeated_call"
    """``max_refusals=0``: the first refused call ends the turn."""
    IGNORED_REFUSALS = "ignored_refusals"
    """The model kept calling after ``max_refusals`` refusals."""
    TOO_MANY_ERRORS = "too_many_errors"
    """``max_errors_in_a_row`` tool calls failed in a row."""
    REPEATED_ANSWER = "repeated_answer"
    """The model gave the same text answer ``max_same_answers`` times in a row, nothing else happening between
    (a loop around the agent re-prompting it)."""
    MAX_STEPS = "max_steps"
    """The turn made ``max_model_calls`` model calls."""
    TIME = "time"
    """The turn's recorded model time went over ``max_model_seconds``."""
    COST = "cost"
    """The turn's recorded cost went over ``max_cost_usd``."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The guard could not read the conversation's state (its store failed) and fails closed (``fail="closed"``).
    An adapter's decision, never the policy's."""

    def __str__(self) -> str:
        return self.value


class RefusalKind(str, Enum):
    """Which rule refused a call: a ``Refusal``'s reason. Each kind has its own text (``messages``)."""

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
    UNKNOWN_WRITE = "unknown_write"
    """The call acts on the world and the same call was already let through with no outcome yet (it runs in this
    very batch, or the process running it died before telling): it may have happened, so another could do it
    twice."""
    REJECTED = "rejected"
    """The same call was rejected before it ran (a human reviewer or a guardrail: ``post_tool_rejected``)
    ``max_calls`` times, with nothing changed since: asking again would be rejected again."""
    OPAQUE = "opaque"
    """The call's result could not be compared (no stable form) and it already ran ``max_opaque_runs``
    times in this turn."""
    TURN_ENDED = "turn_ended"
    """The turn has already stopped: no call runs any more."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The guard could not read the conversation's state (its store failed) and fails closed (``fail="closed"``):
    an adapter's decision, never the policy's."""

    def __str__(self) -> str:
        return self.value


def _moved(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


class Refusal(BaseModel):
    """``pre_tool_call`` refused the call: the tool must not run, and the model gets ``message`` instead.

    A refusal saved by 0.2 (its rule in ``kind``, ``reason`` always ``"repeated_call"``) loads as the same
    refusal.
    """

    model_config = ConfigDict(frozen=True)

    message: str
    """The text to hand the model as the call's result."""
    reason: RefusalKind = RefusalKind.REPEAT
    """The rule that refused it."""

    @model_validator(mode="before")
    @classmethod
    def _from_0_2(cls, data: Any) -> Any:
        """0.2 kept the rule in ``kind`` and a stop reason in ``reason``: the rule is the reason now."""
        if isinstance(data, dict) and ("kind" in data or _names_a_stop(data.get("reason"))):
            data = dict(data)
            kind = data.pop("kind", None)
            reason = data.get("reason")
            if kind is not None:
                data["reason"] = kind
            elif _names_a_stop(reason):
                data["reason"] = RefusalKind.REPEAT if reason == StopReason.REPEATED_CALL else RefusalKind.TURN_ENDED
        return data

    @property
    def kind(self) -> RefusalKind:
        """Deprecated: the rule is ``reason``."""
        _moved("Refusal.kind", "Refusal.reason (the rule that refused the call)")
        return self.reason


_STOP_VALUES = frozenset({"repeated_call", "ignored_refusals", "too_many_errors", "max_steps", "time", "cost"})
"""The stop reasons of 0.2, which it kept in every refusal's ``reason``."""


def _names_a_stop(value: Any) -> bool:
    """``value`` is a ``StopReason`` or its text (what 0.2 kept in a refusal's ``reason``)."""
    return isinstance(value, str) and str.__str__(value) in _STOP_VALUES


class Stop(BaseModel):
    """``pre_llm_call`` ended the turn: make no more model calls; ``message`` is the final text for the caller."""

    model_config = ConfigDict(frozen=True)

    message: str
    """The final message the caller sees in place of an answer."""
    reason: StopReason
    """The one rule that ended the turn."""


class GuardEvent(BaseModel):
    """A refusal or a stop, kept in the state for whoever reads it later (no argument values).

    An event saved by 0.2 (a refusal's rule in ``refusal``) loads as the same event.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["refusal", "stop"]
    """What the guard did: refused a call, or stopped the turn."""
    reason: RefusalKind | StopReason
    """A refusal's rule (a ``RefusalKind``), or a stop's reason (a ``StopReason``)."""
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

    @model_validator(mode="before")
    @classmethod
    def _reason_by_kind(cls, data: Any) -> Any:
        """A refusal's reason read as a ``RefusalKind``, a stop's as a ``StopReason`` (their texts may be equal); 0.2
        kept a refusal's rule in ``refusal`` (and ``"repeated_call"`` in ``reason``)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        rule = data.pop("refusal", None)
        kind, reason = data.get("kind"), data.get("reason")
        if kind == "refusal" and (rule is not None or _names_a_stop(reason)):
            reason = rule if rule is not None else RefusalKind.REPEAT
        want = RefusalKind if kind == "refusal" else StopReason if kind == "stop" else None
        if want is not None and isinstance(reason, str) and not isinstance(reason, want):
            try:
                reason = want(str.__str__(reason))
            except ValueError:
                raise ValueError(f"a {kind} event's reason is a {want.__name__}, not {reason!r}") from None
        data["reason"] = reason
        return data

    @property
    def refusal(self) -> RefusalKind | None:
        """Deprecated: a refusal's rule is ``reason``."""
        _moved("GuardEvent.refusal", "GuardEvent.reason (a refusal's rule)")
        return self.reason if isinstance(self.reason, RefusalKind) else None

    def as_stop(self) -> Stop | None:
        """The ``Stop`` this event recorded, or ``None`` for a refusal."""
        if not isinstance(self.reason, StopReason) or self.message is None:
            return None
        return Stop(message=self.message, reason=self.reason)
