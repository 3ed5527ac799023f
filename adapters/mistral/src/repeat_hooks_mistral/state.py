"""Where a guard class keeps its sessions' states, and how to read them afterwards: ``stop_of``.

The hook object holds nothing (rc11 rebuilds it per hook point and per activity, and refuses instance
attributes when deployed), so every guard class keeps one ``GuardState`` per session in its ``store``,
under ``{state_name}:{session_id}``. Each hook call is one atomic ``store.update``.

rc11 drops the message a hook ends a turn with (the turn comes back ``completed`` with empty text), so
the stop is read from the store: ``await stop_of(ParcelGuard, session_id)``. A turn the guard ended
because the store itself failed (``fail_closed = True``) cannot be written to that store: the process that
ended it keeps the stop in memory (``OUTAGES``, the last 1024 sessions) until the session's next hook call
that reaches the store, and ``stop_of`` reads it from there.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from repeat_hooks import GuardEvent, GuardState, MemoryStore, Stop

if TYPE_CHECKING:
    from .guard import RepeatGuardHook

logger = logging.getLogger("repeat_hooks_mistral")

T = TypeVar("T")

DEFAULT_MAX_SESSIONS = 1024
"""Sessions the default in-process store keeps per guard class (least recently used forgotten first)."""

STORE_DOWN_REFUSAL = (
    "Refused: the loop guard could not read this turn's calls, so no tool may run now. "
    "Do not call tools again: answer with what you know."
)
"""What the model reads for a tool call refused because the store failed (``fail_closed = True``)."""
STORE_DOWN_STOP = "I stopped: the loop guard could not read this turn's calls. Try again later."
"""The message of a turn ended because the store failed (``fail_closed = True``)."""


class ClassStore(MemoryStore):
    """The in-process store a guard class gets when it names none: shared by every instance of that class.

    Keeps ``DEFAULT_MAX_SESSIONS`` sessions; the first time it forgets one it logs a warning, since a
    session forgotten while it is still live starts its counts again from zero.
    """

    def __init__(self, owner: str) -> None:
        super().__init__(max_sessions=DEFAULT_MAX_SESSIONS)
        self.owner = owner

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        evictions = self.evictions
        result = self.update_now(key, change)
        if evictions == 0 and self.evictions:
            logger.warning(
                "repeat_hooks_mistral: %s's in-process store keeps %d sessions and has begun forgetting the "
                "least recently used; a live session it forgets counts from zero again. Set "
                "store = MemoryStore(max_sessions=...) on the class, or a shared store (RedisStore)",
                self.owner,
                self.max_sessions,
            )
        return result


class StoreDownStop(BaseModel):
    """A turn the guard ended because its store failed (``fail_closed = True``): what ``stop_of`` returns
    for it. Read like a ``Stop``: ``reason`` (``"store_unavailable"``) and ``message``."""

    model_config = ConfigDict(frozen=True)

    message: str = STORE_DOWN_STOP
    """The stop message (``STORE_DOWN_STOP``)."""
    reason: Literal["store_unavailable"] = "store_unavailable"
    """Always ``"store_unavailable"``."""
    turn_id: str | None = None
    """The turn it ended."""


class Outages:
    """The fail-closed stops of this process, by state key, not yet superseded by a working store call."""

    def __init__(self, max_sessions: int = 1024) -> None:
        self.max_sessions = max_sessions
        self._stops: OrderedDict[str, StoreDownStop] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, key: str, turn_id: str | None) -> None:
        """The turn ``turn_id`` of the session under ``key`` was ended because the store failed."""
        with self._lock:
            self._stops[key] = StoreDownStop(turn_id=turn_id)
            self._stops.move_to_end(key)
            if len(self._stops) > self.max_sessions:
                self._stops.popitem(last=False)

    def clear(self, key: str) -> None:
        """The store served the session again: its state says what happened from now on."""
        if self._stops:
            with self._lock:
                self._stops.pop(key, None)

    def stop(self, key: str, turn_id: str | None = None) -> StoreDownStop | None:
        """The fail-closed stop kept for ``key`` (for ``turn_id``, if given), or ``None``."""
        with self._lock:
            stop = self._stops.get(key)
        if stop is None or (turn_id is not None and stop.turn_id != turn_id):
            return None
        return stop


OUTAGES = Outages()
"""Every guard class's fail-closed stops in this process (keys hold the class's ``state_name``)."""


async def read_state(guard: type[RepeatGuardHook], session_id: str) -> GuardState | None:
    """The session's counters as ``guard`` last stored them (a copy, for reading), or ``None`` if it made no call.

    Raises ``StoreUnavailable`` (or the store's own error) when the store cannot be read.
    """
    return await guard.store.load(guard.state_key(session_id))


async def events_of(guard: type[RepeatGuardHook], session_id: str) -> list[GuardEvent]:
    """The session's refusals and stops under ``guard``, oldest first (the last 64, across turns)."""
    state = await read_state(guard, session_id)
    return [] if state is None else list(state.events)


async def stop_of(
    guard: type[RepeatGuardHook], session_id: str, turn_id: str | None = None
) -> Stop | StoreDownStop | None:
    """Why and with what message ``guard`` ended a turn of the session, or ``None`` if it did not.

    rc11 drops the message a hook ends a turn with, so a turn the guard ended comes back ``completed``
    with empty text: read the stop here (``guard.run(...)`` does, and puts the message in the result's
    text). Without ``turn_id``, the latest turn's; with it, that turn's (while its stop event is among
    the last 64 kept).

    A turn this process ended because the store failed (``fail_closed = True``) reads as a
    ``StoreDownStop`` (``reason == "store_unavailable"``, ``message == STORE_DOWN_STOP``) without
    touching the store, until the session's next hook call that reaches the store. Any other read
    while the store is down raises the store's error (``StoreUnavailable``): the guard cannot know.
    """
    down = OUTAGES.stop(guard.state_key(session_id), turn_id)
    if down is not None:
        return down
    state = await read_state(guard, session_id)
    if state is None:
        return None
    return state.turn.stop if turn_id is None else state.stop_of(turn_id)


__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "OUTAGES",
    "STORE_DOWN_REFUSAL",
    "STORE_DOWN_STOP",
    "ClassStore",
    "StoreDownStop",
    "events_of",
    "read_state",
    "stop_of",
]
