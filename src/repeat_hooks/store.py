"""Where a session's ``GuardState`` lives when it cannot live on the hook: the ``StateStore`` seam.

A store does one thing: an atomic read-modify-write of one session's state, by key. Adapters call the
policy's rules inside ``update``, so two hook calls of one session never interleave their counts,
whichever task, thread or process runs them.

A store takes no digest key: it keeps the JSON the policy wrote (digests, tool names, ids) and never makes a
digest itself. ``Policy(digest_key=...)`` keys the digests, and the state keeps the key's 4-byte fingerprint:
a worker whose policy has another key, or none, raises ``GuardSetupError`` naming ``digest_key`` on the first
update of a session whose state holds a digest, and writes nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

from .state import GuardState
from .store_errors import StateCorrupt, StoreContention, StoreUnavailable

__all__ = ["MemoryStore", "StateCorrupt", "StateStore", "StoreContention", "StoreUnavailable"]

T = TypeVar("T")


@runtime_checkable
class StateStore(Protocol):
    """An atomic read-modify-write of one session's ``GuardState``."""

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        """Apply ``change`` to the state under ``key`` (a new ``GuardState`` if none), save it, return its result.

        Atomic per key. ``change`` may run more than once (optimistic stores retry on conflict), and a
        store may apply several queued changes of one key in one write, in arrival order; so ``change``
        must be synchronous and depend on nothing but the state it is given (no awaiting, no I/O). The
        policy's rules qualify; their log lines may repeat when a change is retried.

        Raises ``StoreUnavailable`` when a shared store cannot decide; an exception raised by ``change``
        itself reaches the caller and nothing is written.
        """
        ...

    async def load(self, key: str) -> GuardState | None:
        """The state under ``key``, or ``None``: for reading, never for deciding."""
        ...


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
        """See ``StateStore.update``. Runs ``change`` once, under a lock, on the stored state itself."""
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
            return change(state)

    async def load(self, key: str) -> GuardState | None:
        """See ``StateStore.load``. Returns a copy: changing it changes nothing stored."""
        with self._lock:
            state = self._states.get(key)
            return None if state is None else state.model_copy(deep=True)

    def __len__(self) -> int:
        return len(self._states)
