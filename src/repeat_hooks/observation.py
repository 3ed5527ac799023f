"""What a decision or a record tells its observers: one record per fresh decision, made by the policy as data.

The policy makes these only for a state that is listening (``GuardState.listen``); whoever commits the state (the
hook, a store's ``update``, an adapter) hands them to the observers afterwards (``repeat_hooks.observe``). A
second delivery of a call, an outcome or a model call makes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .call import ToolCall
from .decision import GuardEvent, Refusal, Stop, StopReason


@dataclass(frozen=True, slots=True)
class Where:
    """Where in the conversation an observation falls."""

    turn_id: str | None
    """The turn's id as the adapter gave it (``None``: the adapter gives none)."""
    turn: int
    """The turn's number in this conversation's state: 1 for the first turn."""
    response: int
    """The model response the call belongs to, within the turn (calls of one response share it: a batch)."""


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A turn started: a user message (or a ``turn_id`` not seen before)."""

    where: Where


@dataclass(frozen=True, slots=True)
class ToolCallDecided:
    """A call decided afresh (a second delivery of it is not observed)."""

    where: Where
    call: ToolCall
    """The call as the model gave it (its own id, even when its batch told it apart by position)."""
    key: str
    """The call's digest, as the policy counts it (its settings applied: ``match``, ``ignore_arguments``)."""
    refusal: Refusal | None
    """``None``: the call may run; else the refusal the model gets instead of a result."""
    event: GuardEvent | None
    """The refusal's event (its count and limit), as kept in the state; ``None`` when allowed, or when the
    call was refused because the turn had already stopped (that stop has its event)."""
    model_seconds: float
    """The turn's average seconds per model call so far (0 before the first): what a refusal may save."""
    model_cost_usd: float
    """The turn's average cost per model call so far, in dollars (0 before the first)."""
    stopped: StopReason | None = None
    """The reason the turn had already stopped for, when it had (the call was refused: ``TURN_ENDED``)."""


@dataclass(frozen=True, slots=True)
class ToolResultRecorded:
    """A call's outcome recorded (a second delivery of it is not observed)."""

    where: Where
    call: ToolCall
    ok: bool
    result: Any
    """What the model reads as the result (a value: digest it before writing it anywhere)."""


@dataclass(frozen=True, slots=True)
class ModelCallDecided:
    """A model call let happen (``stop is None``) or the turn ended with ``stop``.

    Observed once per turn for its stop: the calls the adapter asks about after it are not observed again."""

    where: Where
    stop: Stop | None
    event: GuardEvent | None
    """The stop's event (the tool that tripped it, its count and limit); ``None`` when the call may happen."""


@dataclass(frozen=True, slots=True)
class ModelCallRecorded:
    """A model call counted, with its recorded seconds and cost."""

    where: Where
    seconds: float
    cost_usd: float


@dataclass(frozen=True, slots=True)
class Outage:
    """The guard could not reach a conversation's state (its store failed, or what was stored is no guard state):
    the adapter let the call or turn go on (``fail="open"``) or refused it (``"closed"``). No policy decided."""

    key: str
    """Where the state was looked for: the store key, or the SDK's place for it."""
    error: str
    """The error, as its type and message (a store's own text; never an argument or result value)."""
    fail: str
    """``"open"`` or ``"closed"``: what the adapter did about it."""
    conversation_id: str | None = None
    """The conversation, where the adapter knows it (its ``observe.scope`` or ``kit.request``)."""


Observation = TurnStarted | ToolCallDecided | ToolResultRecorded | ModelCallDecided | ModelCallRecorded | Outage
"""What an observer is handed."""
