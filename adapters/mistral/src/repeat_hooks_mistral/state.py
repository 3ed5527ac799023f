"""Where a guard class keeps its sessions' states (``store``, under ``{state_name}:{session_id}``), and reading a
turn's stop afterwards: rc11 drops the message a hook ends a turn with, so ``stop_of`` reads the store."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from mistralai.vibe.harness.app_server.session import SessionClient
from mistralai.vibe_agents.sdk.transport.results import RunResult

from repeat_hooks import GuardEvent, GuardSetupError, GuardState, MemoryStore, StateStore, Stop
from repeat_hooks.kit import GuardCore, GuardStopped

logger = logging.getLogger("repeat_hooks_mistral")

T = TypeVar("T")

DEFAULT_MAX_SESSIONS = 1024
"""Sessions the default in-process store keeps per guard class (least recently used forgotten first)."""


class Guard(Protocol):
    """A guard class, as the readers here use it (``RepeatGuardHook`` or a subclass)."""

    core: GuardCore
    store: StateStore

    def state_key(self, session_id: str) -> str: ...


class ClassStore(MemoryStore):
    """The in-process store a guard class gets when it names none (``DEFAULT_MAX_SESSIONS`` sessions); the first
    time it forgets one it logs a warning, since a session forgotten while still live counts from zero again."""

    def __init__(self, owner: str) -> None:
        super().__init__(max_sessions=DEFAULT_MAX_SESSIONS)
        self.owner = owner

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        evictions = self.evictions
        result = self.update_now(key, change)
        if evictions == 0 and self.evictions:
            message = "%s's in-process store has begun forgetting the least recently used of its %d sessions (one"
            message += " still live counts from zero again): set store = MemoryStore(max_sessions=...) or a shared one"
            logger.warning(message, self.owner, self.max_sessions)
        return result


async def stop_of(
    returned: SessionClient | RunResult[Any] | str | BaseException | None = None,
    /,
    *old: Any,
    guard: Guard | None = None,
    session: SessionClient | None = None,
    turn_id: str | None = None,
    session_id: str | None = None,
) -> Stop | None:
    """How ``guard`` ended a turn of ``returned`` (a session: its latest turn, or ``turn_id``; a ``RunResult`` with
    its ``session``: its turn; a session or ``request(...)`` conversation id), or ``None``; the ``RepeatGuardStopped``
    ``Guard.run`` raised: its stop. A turn this process ended because the store was down reads as
    ``StopReason.STORE_UNAVAILABLE``; other reads raise its error. Anything else: ``GuardSetupError``."""
    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    if session_id is not None:  # 0.2's keyword: read as 0.2's stop_of(Guard, session_id)
        returned, old, guard = guard or returned, (session_id, *old), None  # type: ignore[assignment]
    found, key, turn_id = _where("stop_of", returned, old, guard, session, turn_id)
    return await found.core.stop_of(key, turn_id)


async def read_state(returned: SessionClient | str, /, *old: Any, guard: Guard | None = None) -> GuardState | None:
    """The session's counters as ``guard`` last stored them (a copy), or ``None`` if it made no call."""
    found, key, _ = _where("read_state", returned, old, guard, None, None)
    return await found.store.load(key)


async def events_of(returned: SessionClient | str, /, *old: Any, guard: Guard | None = None) -> list[GuardEvent]:
    """The session's refusals and stops under ``guard``, oldest first (the last 64, across turns)."""
    found, key, _ = _where("events_of", returned, old, guard, None, None)
    state = await found.store.load(key)
    return [] if state is None else list(state.events)


def _where(
    verb: str, returned: Any, old: tuple[Any, ...], guard: Guard | None, session: Any, turn_id: str | None
) -> tuple[Guard, str, str | None]:
    """The guard, the store key and the turn a reader names; 0.2's ``verb(Guard, session_id[, turn_id])`` warns.
    ``GuardSetupError`` for what names no session, ``TypeError`` without a guard."""
    if isinstance(returned, type):
        warnings.warn(
            f"{verb}(Guard, session_id) is deprecated: use await {verb}(session, guard=Guard)",
            DeprecationWarning,
            stacklevel=3,
        )
        guard, returned = returned, old[0] if old else None  # type: ignore[assignment]
        turn_id = old[1] if len(old) > 1 else turn_id
    elif old:
        raise TypeError(f"{verb}() takes one positional argument, the session: await {verb}(session, guard=Guard)")
    if isinstance(returned, RunResult):
        if session is None:
            raise TypeError(f"{verb}(result) needs the result's session: await {verb}(result, guard=..., session=...)")
        turns = session.state.turns
        if turn_id is None and turns is not None and 0 < returned.turn_number <= len(turns.items):
            turn_id = turns.items[returned.turn_number - 1].id
        returned = session
    if isinstance(returned, SessionClient):
        returned = returned.session_id
    if not isinstance(returned, str):
        also = ", or a RepeatGuardStopped" if verb == "stop_of" else ""
        wants = f"{verb} takes a session (agent.create_session()), a RunResult with session=, a session id{also}"
        raise GuardSetupError(f"{wants}; got {type(returned).__name__}")
    if guard is None:
        raise TypeError(f"{verb}() needs the guard class: await {verb}(session, guard=ParcelGuard)")
    return guard, guard.state_key(returned), turn_id
