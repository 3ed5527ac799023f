"""Observers: who hears what the guard decided, outside the policy (telemetry, digest recordings).

The policy stays pure: it decides the same with or without observers, tells nobody, and an observer cannot
change a decision. Each fresh decision or record on a listening state leaves one ``Observation``
(``repeat_hooks.observation``); whoever commits the state (the hook, a store's ``update``, an adapter) hands them
to every registered observer after the commit (``publishing``). A second delivery of the same call, outcome or
model call is not observed again. With no observer registered the cost is one truthiness check per hook call::

    from repeat_hooks.observe import add_observer

    def audit(seen: Observation) -> None:
        if isinstance(seen, ToolCallDecided) and seen.refusal is not None:
            print("refused", seen.call.name)

    remove = add_observer(audit)   # for the whole process, as OpenTelemetry instrumentations are
    ...
    remove()

An observer runs in the hook call, in process, and sees the call's arguments and the tool's result as
values (``ToolCall.arguments``, ``ToolResultRecorded.result``): whatever it writes or exports is its own
responsibility. The library's observers (``repeat_hooks.observe.otel``, ``repeat_hooks.offline.recording``) write
digests and tool names only. An observer that raises is logged and skipped: it never breaks the agent.

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
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

from ..call import as_text
from ..observation import (
    ModelCallDecided,
    ModelCallRecorded,
    Observation,
    Outage,
    ToolCallDecided,
    ToolResultRecorded,
    TurnStarted,
    Where,
)
from ..state import GuardState

__all__ = [
    "ModelCallDecided",
    "ModelCallRecorded",
    "Observation",
    "Observer",
    "Outage",
    "Scope",
    "ToolCallDecided",
    "ToolResultRecorded",
    "TurnStarted",
    "Where",
    "add_observer",
    "apply",
    "current_scope",
    "publishing",
    "scope",
]

logger = logging.getLogger("repeat_hooks")
if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
    logger.addHandler(logging.NullHandler())  # a library's: silent until the application configures logging
T = TypeVar("T")
P = ParamSpec("P")


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


_FAILED: set[int] = set()
"""The ids of observers that raised already: their later failures are logged without a traceback."""


def tell(observation: Observation) -> None:
    """Hand ``observation`` to every observer (one that raises is logged and skipped: with its traceback the
    first time, in one line after)."""
    for observer in tuple(OBSERVERS):
        try:
            observer(observation)
        except Exception as error:
            if id(observer) in _FAILED:
                logger.error("repeat_hooks observer %r failed again (%r); the decision stands", observer, error)
            else:
                _FAILED.add(id(observer))
                logger.exception("repeat_hooks observer %r failed; the decision stands", observer)


def tell_all(observations: list[Observation]) -> None:
    """Tell ``observations``, in order (what a state heard while it was listening)."""
    for observation in observations:
        tell(observation)


@contextlib.contextmanager
def publishing(state: GuardState) -> Iterator[None]:
    """Around a change of ``state`` that is committed when the block ends (the hook's own state, an in-process
    store's): the observations the policy leaves on it are told once the block ends without an exception, and
    dropped if it raises. With no observer registered, the block runs as it is.

    A store that commits later (``RedisStore``: after its compare-and-set) listens on the state it loaded
    (``state.listen()``) and tells what the committed attempt heard (``tell_all(state.heard())``)."""
    if not OBSERVERS:
        yield
        return
    state.listen()
    try:
        yield
    except BaseException:
        state.heard()
        raise
    tell_all(state.heard())


def apply(verb: Callable[Concatenate[GuardState, P], T], state: GuardState, /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``verb(state, *args, **kwargs)``: one verb of a policy on a state its caller commits at once (the hook's own,
    one an adapter keeps in the SDK's context), telling the observers what it decided, after it. With no observer
    registered, the verb runs as it is."""
    if not OBSERVERS:
        return verb(state, *args, **kwargs)
    with publishing(state):
        return verb(state, *args, **kwargs)


@contextlib.contextmanager
def held() -> Iterator[list[Observation]]:
    """Deprecated: the policy tells nobody, so there is nothing to hold (decide on a state that is not
    listening). Yields an empty list."""
    warnings.warn("repeat_hooks.observe.held is deprecated: the policy tells nobody any more", DeprecationWarning, 3)
    yield []


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


def scope(
    *, conversation_id: str | None = None, agent_name: str | None = None
) -> contextlib.AbstractContextManager[Scope]:
    """Within the block, observations and the guard's log lines belong to this conversation and agent (adapters
    wrap their hook calls).

    A field left ``None`` keeps the enclosing scope's value. Both are kept as text, as the guard keeps tool
    names and turn ids (``call.as_text``): an SDK's id that is an int or a UUID is its ``str`` (``42`` is
    ``"42"``, the same conversation), a lone surrogate is escaped, an id past 1,000 characters is shortened
    to a distinct one. So whatever an adapter passes, the recording, the log line and the span name it as
    text the reader takes (never refused: a scope is entered in the hook call, and must not fail it)."""
    return _Scoped(conversation_id, agent_name)


class _Scoped:
    """``scope(...)``'s context manager (a class, not a generator: adapters enter one on every hook call). The
    enclosing scope is the one current when it is entered."""

    __slots__ = ("agent_name", "conversation_id", "tokens")

    def __init__(self, conversation_id: str | None, agent_name: str | None) -> None:
        self.conversation_id = conversation_id
        self.agent_name = agent_name
        self.tokens: list[Token[Scope | None]] = []

    def __enter__(self) -> Scope:
        outer = _SCOPE.get() or _NO_SCOPE
        conversation_id, agent_name = self.conversation_id, self.agent_name
        inner = Scope(
            conversation_id=as_text(conversation_id) if conversation_id is not None else outer.conversation_id,
            agent_name=as_text(agent_name) if agent_name is not None else outer.agent_name,
        )
        self.tokens.append(_SCOPE.set(inner))
        return inner

    def __exit__(self, *exc_info: object) -> None:
        _SCOPE.reset(self.tokens.pop())


class _NamesTheConversation(logging.Filter):
    """Ends each of the guard's log lines with the conversation and agent of the hook call that logged it, where an
    adapter named them (``scope``), as `` [conversation=... agent=...]``, and sets them on the record
    (``conversation_id``, ``agent_name``) for structured logging. A record named already (by this filter, or by the
    caller's ``extra={"conversation_id": ...}``) is left as it is: never two suffixes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "conversation_id"):
            return True
        known = _SCOPE.get()
        if known is None or (known.conversation_id is None and known.agent_name is None):
            return True
        record.conversation_id, record.agent_name = known.conversation_id, known.agent_name
        if isinstance(record.msg, str) and isinstance(record.args, tuple):
            named = [
                (field, value)
                for field, value in (("conversation", known.conversation_id), ("agent", known.agent_name))
                if value is not None
            ]
            message = record.msg if record.args else record.msg.replace("%", "%%")  # no args: % was never a format
            record.msg = f"{message} [{' '.join(f'{field}=%s' for field, _ in named)}]"
            record.args = (*record.args, *(value for _, value in named))
        return True


logger.addFilter(_NamesTheConversation())
