"""``SQLiteStore``: the embedded ``StateStore``, one SQLite file shared by the processes of one host.

For several processes on one machine (web workers, a coding CLI's hook processes) with nothing to run beside
them: the standard library's ``sqlite3``, one row per conversation. Each update is one transaction (``BEGIN
IMMEDIATE``: read, change, write, commit), so two processes never interleave their counts, a re-delivered hook
call counts once (the policy's delivery ids are in the state), and a process killed mid-update leaves the last
committed state (SQLite's journal). Conversations idle past ``ttl`` expire; past ``max_sessions`` the least
recently updated go first. Across hosts, use ``RedisStore``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .. import observe
from ..errors import StoreUnavailable
from ..state import GuardState, load_state

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS repeat_hooks_states (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    touched REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS repeat_hooks_states_touched ON repeat_hooks_states (touched);
"""
# The statements, named (module constants: the SQL is no function's logic, and its keywords are any case).
_WAL = "PRAGMA journal_mode=WAL"
_SYNCHRONOUS = "PRAGMA synchronous=NORMAL"  # WAL: a process killed loses nothing committed
_BEGIN = "BEGIN IMMEDIATE"  # the write lock first: read, decide and write under it
_SELECT = "SELECT state FROM repeat_hooks_states WHERE key = ?"
_UPSERT = (
    "INSERT INTO repeat_hooks_states (key, state, touched) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET state = excluded.state, touched = excluded.touched"
)
_EXPIRE = "DELETE FROM repeat_hooks_states WHERE touched < ?"
_EVICT = (
    "DELETE FROM repeat_hooks_states WHERE key IN "
    "(SELECT key FROM repeat_hooks_states ORDER BY touched DESC LIMIT -1 OFFSET ?)"
)
_COUNT = "SELECT COUNT(*) FROM repeat_hooks_states"
_COMMIT = "COMMIT"
_ROLLBACK = "ROLLBACK"


class SQLiteStore:
    """A ``StateStore`` in the SQLite file at ``path`` (made if missing), safe for many processes and threads.

    ``ttl``: seconds a conversation may go without an update before it is forgotten (default 30 days; ``None``:
    never). ``max_sessions``: conversations kept, the least recently updated forgotten first. ``timeout``: seconds
    an update waits for another process's transaction before it raises ``StoreUnavailable``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl: float | None = 30 * 86400,
        max_sessions: int = 100_000,
        timeout: float = 10.0,
    ) -> None:
        if ttl is not None and not ttl > 0:
            raise ValueError(f"SQLiteStore(ttl=...) must be seconds > 0 or None, got {ttl!r}")
        if max_sessions < 1:
            raise ValueError(f"SQLiteStore(max_sessions=...) must be at least 1, got {max_sessions}")
        if not timeout >= 0:
            raise ValueError(
                f"SQLiteStore(timeout=...) must be seconds >= 0 (how long to wait for a lock), got {timeout!r}"
            )
        self.path = Path(path)
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.timeout = timeout
        self._local = threading.local()
        self._pid = os.getpid()
        self._connect()  # fail at setup, not at the first hook call, on a path that cannot hold a database

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        """See ``StateStore.update``: one transaction, in a worker thread (the event loop never waits on a lock)."""
        import asyncio  # here: a synchronous caller (a hook command's process) never loads it

        return await asyncio.to_thread(self.update_now, key, change)

    def update_now(self, key: str, change: Callable[[GuardState], T]) -> T:
        """``update`` for synchronous callers: the same transaction, on this thread."""
        try:
            connection = self._connect()
            connection.execute(_BEGIN)
        except sqlite3.Error as error:
            raise StoreUnavailable(f"SQLiteStore {self.path}: {error}") from error
        try:
            row = connection.execute(_SELECT, (key,)).fetchone()
            state = load_state(row[0]) if row is not None else GuardState()
            if observe.OBSERVERS:
                state.listen()
            result = change(state)
            now = time.time()
            connection.execute(_UPSERT, (key, state.model_dump_json(), now))
            if row is None:
                self._bound(connection, now)
            connection.execute(_COMMIT)
        except BaseException as error:
            with contextlib.suppress(sqlite3.Error):
                connection.execute(_ROLLBACK)
            if isinstance(error, sqlite3.Error):
                raise StoreUnavailable(f"SQLiteStore {self.path}: {error}") from error
            raise
        observe.tell_all(state.heard())
        return result

    async def load(self, key: str) -> GuardState | None:
        """See ``StateStore.load``: the state as last committed, or ``None``."""
        try:
            row = self._connect().execute(_SELECT, (key,)).fetchone()
        except sqlite3.Error as error:
            raise StoreUnavailable(f"SQLiteStore {self.path}: {error}") from error
        return None if row is None else load_state(row[0])

    def __len__(self) -> int:
        return int(self._connect().execute(_COUNT).fetchone()[0])

    def __bool__(self) -> bool:
        """A store is a store, empty or not (``store or default`` must not drop an empty one)."""
        return True

    def _bound(self, connection: sqlite3.Connection, now: float) -> None:
        """A conversation was added: forget the expired ones, and the least recently updated past the cap."""
        if self.ttl is not None:
            connection.execute(_EXPIRE, (now - self.ttl,))
        connection.execute(_EVICT, (self.max_sessions,))

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection (a forked process opens its own: a connection must not cross a fork)."""
        if self._pid != os.getpid():
            self._local, self._pid = threading.local(), os.getpid()
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            try:
                connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
                connection.execute(_WAL)
                connection.execute(_SYNCHRONOUS)
                connection.executescript(_SCHEMA)
            except sqlite3.Error as error:
                raise StoreUnavailable(f"SQLiteStore {self.path}: {error}") from error
            self._local.connection = connection
        return connection
