"""``MemoryStore``: the in-process ``StateStore``, safe under asyncio tasks and threads, bounded by LRU."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from .. import observe
from ..state import GuardState

T = TypeVar("T")


class MemoryStore:
    """In-process store: safe under concurrent asyncio tasks and threads, bounded by LRU eviction.

    Keeps at most ``max_sessions`` states (seed 003's 1024 by default); the least recently used
    session is forgotten first, and a forgotten session that comes back counts from zero. Nothing else
    is removed (ended sessions stay until forgotten). ``evictions`` says how many were forgotten.
    Processes do not share it: use a shared store for that.
    """

    def __init__(self, max_sessions: int = 1024) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self.evictions = 0
        """Sessions forgotten so far to stay within ``max_sessions`` (for monitoring and warnings)."""
        self._states: OrderedDict[str, GuardState] = OrderedDict()
        self._lock = threading.Lock()

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        """See ``StateStore.update``. Runs ``change`` once, under a lock, on the stored state itself: with no copy
        to throw away, a ``change`` that raises part way keeps what it changed before (the policy's verbs check
        their input before they change anything; its observations are dropped)."""
        return self.update_now(key, change)

    def update_now(self, key: str, change: Callable[[GuardState], T]) -> T:
        """``update`` for synchronous callers: the same atomic read-modify-write, without awaiting."""
        with self._lock:
            states = self._states
            state = states.get(key)
            if state is None:
                state = states[key] = GuardState()
                if len(states) > self.max_sessions:
                    states.popitem(last=False)
                    self.evictions += 1
            else:
                states.move_to_end(key)
            if not observe.OBSERVERS:
                return change(state)
            with observe.publishing(state):
                return change(state)

    async def load(self, key: str) -> GuardState | None:
        """See ``StateStore.load``. Returns a copy: changing it changes nothing stored."""
        with self._lock:
            state = self._states.get(key)
            return None if state is None else state.model_copy(deep=True)

    def __len__(self) -> int:
        return len(self._states)

    def __bool__(self) -> bool:
        """A store is a store, empty or not (``store or default`` must not drop an empty one)."""
        return True
