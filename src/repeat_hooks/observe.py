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

Observers run in the hook call, on its thread (the event loop's, in async SDKs): keep them quick. Through
``RedisStore`` they hear a decision once its state is written, after the compare-and-set that kept it (an
attempt that lost to another writer is decided again, and only the kept one is heard); a store's writer
task runs them, in the context of the session's first waiting caller.

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
from .decision import GuardEvent, Refusal, Stop

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
    event: GuardEvent | None
    """The refusal's event (its count and limit), as kept in the state; ``None`` when allowed, or when the
    call was refused because the turn had already stopped (that stop has its event)."""
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
    event: GuardEvent | None
    """The stop's event (the tool that tripped it, its count and limit); ``None`` when the call may happen."""


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
        _FAILED.discard(id(observer))

    return remove


class _Held:
    """The observations a ``held()`` block keeps; ``open`` turns ``False`` when the block ends (a task the block
    started keeps the context, and tells its later observations as usual)."""

    __slots__ = ("kept", "open")

    def __init__(self) -> None:
        self.kept: list[Observation] = []
        self.open = True


_HELD: ContextVar[_Held | None] = ContextVar("repeat_hooks_held", default=None)
_FAILED: set[int] = set()
"""The ids of observers that raised already: their later failures are logged without a traceback."""


def tell(observation: Observation) -> None:
    """Hand ``observation`` to every observer (one that raises is logged and skipped: with its traceback the
    first time, in one line after), or keep it while a ``held()`` block is open in this context."""
    held = _HELD.get()
    if held is not None and held.open:
        held.kept.append(observation)
        return
    for observer in tuple(OBSERVERS):
        try:
            observer(observation)
        except Exception as error:
            if id(observer) in _FAILED:
                logger.error("repeat_hooks observer %r failed again (%r); the decision stands", observer, error)
            else:
                _FAILED.add(id(observer))
                logger.exception("repeat_hooks observer %r failed; the decision stands", observer)


@contextlib.contextmanager
def held() -> Iterator[list[Observation]]:
    """Hold the observations made in the block instead of telling them: for code that decides on a copy
    it may throw away. A store retrying a change after losing a race clears the list before each attempt and
    tells what the winning attempt held (``tell_all``) once it is committed; an adapter rebuilding a state
    from the SDK's history (decisions already told when first made) drops them."""
    held = _Held()
    token = _HELD.set(held)
    try:
        yield held.kept
    finally:
        held.open = False
        _HELD.reset(token)


def tell_all(observations: list[Observation]) -> None:
    """Tell ``observations``, in order (what a ``held()`` block kept)."""
    for observation in observations:
        tell(observation)


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
