"""Observers: who hears what the guard decided, outside the policy (telemetry, digest recordings).

The policy stays pure: it decides the same with or without observers, and an observer cannot change a
decision. After each fresh decision or record, the policy hands every registered observer one
``Observation``; a second delivery of the same call, outcome or model call is not observed again. With no
observer registered the cost is one truthiness check per hook call::

    from repeat_hooks.observe import add_observer

    def audit(seen: Observation) -> None:
        if isinstance(seen, ToolCallDecided) and seen.refusal is not None:
            print("refused", seen.call.name)

    remove = add_observer(audit)   # for the whole process, as OpenTelemetry instrumentations are
    ...
    remove()

An observer runs in the hook call, in process, and sees the call's arguments and the tool's result as
values (``ToolCall.arguments``, ``ToolResultRecorded.result``): whatever it writes or exports is its own
responsibility. The library's observers (``repeat_hooks.otel``, ``repeat_hooks.recording``) write digests
and tool names only. An observer that raises is logged and skipped: it never breaks the agent.

Adapters say which conversation and agent a hook call is for with ``scope(...)``; observers read it with
``current_scope()`` (the OpenTelemetry observer puts it on ``gen_ai.conversation.id`` / ``gen_ai.agent.name``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .call import ToolCall
from .decision import Refusal, Stop

logger = logging.getLogger("repeat_hooks")


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
    """``decide_tool_call`` decided a call afresh (a second delivery of it is not observed)."""

    where: Where
    call: ToolCall
    key: str
    """The call's digest, as the policy counts it (its settings applied: ``match``, ``ignore_arguments``)."""
    refusal: Refusal | None
    """``None``: the call may run; else the refusal the model gets instead of a result."""
    model_seconds: float
    """The turn's average seconds per model call so far (0 before the first): what a refusal may save."""
    model_cost_usd: float
    """The turn's average cost per model call so far, in dollars (0 before the first)."""


@dataclass(frozen=True, slots=True)
class ToolResultRecorded:
    """``record_tool_result`` recorded a call's outcome (a second delivery of it is not observed)."""

    where: Where
    call: ToolCall
    ok: bool
    result: Any
    """What the model reads as the result (a value: digest it before writing it anywhere)."""


@dataclass(frozen=True, slots=True)
class ModelCallDecided:
    """``decide_model_call`` let a model call happen (``stop is None``) or ended the turn with ``stop``.

    Observed once per turn for its stop: the calls the adapter asks about after it are not observed again."""

    where: Where
    stop: Stop | None


@dataclass(frozen=True, slots=True)
class ModelCallRecorded:
    """``record_model_call`` counted a model call, with its recorded seconds and cost."""

    where: Where
    seconds: float
    cost_usd: float


Observation = TurnStarted | ToolCallDecided | ToolResultRecorded | ModelCallDecided | ModelCallRecorded
"""What an observer is handed."""

Observer = Callable[[Observation], None]
"""A function of one ``Observation``; what it returns is ignored."""

OBSERVERS: list[Observer] = []
"""The registered observers, in the order they were added (``add_observer`` and its remover change it)."""


def add_observer(observer: Observer) -> Callable[[], None]:
    """Register ``observer`` for every guard in this process; returns the function that removes it.

    Adding the same observer twice raises ``ValueError`` (it would hear everything twice)."""
    if not callable(observer):
        raise TypeError(f"add_observer takes a function of one Observation, not {type(observer).__name__}")
    if any(other == observer for other in OBSERVERS):
        raise ValueError(f"{observer!r} is already observing: add it once (remove it with the function returned)")
    OBSERVERS.append(observer)

    def remove() -> None:
        """Stop ``observer`` hearing the guard; removing it twice is harmless."""
        OBSERVERS[:] = [other for other in OBSERVERS if other != observer]

    return remove


def tell(observation: Observation) -> None:
    """Hand ``observation`` to every observer; one that raises is logged and skipped."""
    for observer in tuple(OBSERVERS):
        try:
            observer(observation)
        except Exception:
            logger.exception("repeat_hooks observer %r failed; the decision stands", observer)


@dataclass(frozen=True, slots=True)
class Scope:
    """Which conversation and agent the hook calls in this context serve (set by adapters)."""

    conversation_id: str | None = None
    agent_name: str | None = None


_SCOPE: ContextVar[Scope | None] = ContextVar("repeat_hooks_scope", default=None)
_NO_SCOPE = Scope()


def current_scope() -> Scope:
    """The conversation and agent of the hook call running now (empty fields where the adapter set none)."""
    return _SCOPE.get() or _NO_SCOPE


@contextlib.contextmanager
def scope(*, conversation_id: str | None = None, agent_name: str | None = None) -> Iterator[Scope]:
    """Within the block, observations belong to this conversation and agent (adapters wrap their hook calls).

    A field left ``None`` keeps the enclosing scope's value."""
    outer = current_scope()
    inner = Scope(
        conversation_id=conversation_id if conversation_id is not None else outer.conversation_id,
        agent_name=agent_name if agent_name is not None else outer.agent_name,
    )
    token = _SCOPE.set(inner)
    try:
        yield inner
    finally:
        _SCOPE.reset(token)
