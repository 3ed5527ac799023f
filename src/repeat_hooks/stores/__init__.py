"""Where a conversation's ``GuardState`` lives when it cannot live on the hook: the ``StateStore`` seam, and the
stores: ``MemoryStore`` (one process, here), ``SQLiteStore`` (the processes of one host, in a file) and
``RedisStore`` (many processes and hosts, Redis Cluster too; needs ``pip install 'repeat-hooks[redis]'``). The
last two are imported when first asked for (``from repeat_hooks.stores import SQLiteStore``), so that importing
the seam loads neither ``sqlite3`` nor redis-py.

A store does one thing: an atomic read-modify-write of one session's state, by key. Adapters call the
policy's rules inside ``update``, so two hook calls of one session never interleave their counts,
whichever task, thread or process runs them.

A store takes no digest key: it keeps the JSON the policy wrote (digests, tool names, ids) and never makes a
digest itself. ``Policy(digest_key=...)`` keys the digests, and the state keeps the key's 4-byte fingerprint:
a worker whose policy has another key, or none, raises ``GuardSetupError`` naming ``digest_key`` on the first
update of a session whose state holds a digest, and writes nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..errors import StateCorrupt, StoreContention, StoreUnavailable
from ..state import GuardState
from .memory import MemoryStore

if TYPE_CHECKING:
    from .redis import RedisStore as RedisStore
    from .sqlite import SQLiteStore as SQLiteStore

__all__ = ["MemoryStore", "StateCorrupt", "StateStore", "StoreContention", "StoreUnavailable"]

_LAZY = {"SQLiteStore": "repeat_hooks.stores.sqlite", "RedisStore": "repeat_hooks.stores.redis"}

T = TypeVar("T")


@runtime_checkable
class StateStore(Protocol):
    """An atomic read-modify-write of one session's ``GuardState``."""

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        """Apply ``change`` to the state under ``key`` (a new ``GuardState`` if none), save it, return its result.

        Atomic per key. ``change`` may run more than once (optimistic stores retry on conflict), and a
        store may apply several queued changes of one key in one write, in arrival order; so ``change``
        must be synchronous and depend on nothing but the state it is given (no awaiting, no I/O). The
        policy's rules qualify; their log lines may repeat when a change is retried. Once the change is
        committed, the store tells the observers what it decided (``repeat_hooks.observe``), once.

        Raises ``StoreUnavailable`` when a shared store cannot decide; an exception raised by ``change``
        itself reaches the caller and nothing is written.
        """
        ...

    async def load(self, key: str) -> GuardState | None:
        """The state under ``key``, or ``None``: for reading, never for deciding."""
        ...


def __getattr__(name: str) -> Any:
    """``SQLiteStore`` and ``RedisStore``, from their modules, the first time they are asked for."""
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'repeat_hooks.stores' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
