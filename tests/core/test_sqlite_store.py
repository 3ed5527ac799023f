"""SQLiteStore in one process: tasks and threads lose no counts, bounds hold, a hostile row is refused whole, a
change that raises writes nothing, and a path that cannot hold a database fails at setup. (Several processes and a
process killed mid-update: ``tests/deploy/test_sqlite_store.py``.)"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from repeat_hooks import GuardState, Policy, StateCorrupt, StoreUnavailable, ToolCall
from repeat_hooks.observe import Observation, add_observer
from repeat_hooks.stores.sqlite import SQLiteStore


async def test_async_updates_from_many_tasks_lose_no_counts(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "states.db")
    policy = Policy(max_calls=10**9, count="per_turn")
    call = ToolCall("t")
    await asyncio.gather(*(store.update("s", lambda state: policy.decide_tool_call(state, call)) for _ in range(200)))
    state = await store.load("s")
    assert state is not None and list(state.turn.counts.values()) == [200]


def test_conversations_expire_and_the_least_recently_updated_go_past_the_cap(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "states.db", max_sessions=3)
    for n in range(5):
        store.update_now(f"c{n}", lambda state: None)
    assert len(store) == 3 and asyncio.run(store.load("c0")) is None and asyncio.run(store.load("c4")) is not None
    short = SQLiteStore(tmp_path / "ttl.db", ttl=0.2)
    short.update_now("old", lambda state: None)
    time.sleep(0.3)
    short.update_now("new", lambda state: None)  # a new conversation sweeps the expired
    assert asyncio.run(short.load("old")) is None and len(short) == 1


def test_a_row_someone_else_wrote_is_refused_whole_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "states.db"
    store = SQLiteStore(path)
    store.update_now("conv", lambda state: None)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE repeat_hooks_states SET state = ? WHERE key = 'conv'", ('{"turn": "yes"}',))
    with pytest.raises(StateCorrupt, match="delete it to start this conversation's counts afresh"):
        store.update_now("conv", lambda state: None)
    with pytest.raises(StateCorrupt):
        asyncio.run(store.load("conv"))


def test_a_change_that_raises_writes_nothing_and_reaches_the_caller(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "states.db")

    def broken(state: GuardState) -> None:
        state.turn.refusals = 7
        raise KeyError("adapter bug")

    with pytest.raises(KeyError):
        store.update_now("conv", broken)
    assert asyncio.run(store.load("conv")) is None
    # Rolled back, not left open: the next update on this thread's connection takes the lock and commits.
    store.update_now("conv", lambda state: setattr(state.turn, "refusals", 1))
    loaded = asyncio.run(store.load("conv"))
    assert loaded is not None and loaded.turn.refusals == 1


def test_a_path_that_cannot_hold_a_database_fails_at_setup(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="SQLiteStore"):
        SQLiteStore(tmp_path / "no" / "such" / "folder" / "states.db")
    with pytest.raises(ValueError, match="ttl"):
        SQLiteStore(tmp_path / "x.db", ttl=0)
    with pytest.raises(ValueError, match=r"timeout=\.\.\.\) must be seconds >= 0"):
        SQLiteStore(tmp_path / "x.db", timeout=-1)


def test_threads_lose_no_counts_and_observers_hear_each_commit_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "states.db")
    policy = Policy(max_calls=10**9, count="per_turn")
    heard: list[Observation] = []
    remove = add_observer(heard.append)

    def work(worker: int) -> None:
        for n in range(50):
            call = ToolCall("t", call_id=f"w{worker}-{n}")
            store.update_now("s", lambda state, call=call: policy.decide_tool_call(state, call, turn_id="t1"))

    try:
        threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        remove()
    state = asyncio.run(store.load("s"))
    assert state is not None and list(state.turn.counts.values()) == [200]
    assert sum(type(seen).__name__ == "ToolCallDecided" for seen in heard) == 200


def test_max_sessions_is_at_least_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"SQLiteStore\(max_sessions=\.\.\.\) must be at least 1, got 0"):
        SQLiteStore(tmp_path / "x.db", max_sessions=0)
    one = SQLiteStore(tmp_path / "one.db", max_sessions=1)
    one.update_now("a", lambda state: None)
    one.update_now("b", lambda state: None)
    assert len(one) == 1


async def test_a_table_someone_else_dropped_is_an_outage_naming_the_file(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "states.db"
    store = SQLiteStore(path)
    store.update_now("c1", lambda state: None)
    with sqlite3.connect(path) as other:
        other.execute("DROP TABLE repeat_hooks_states")
    with pytest.raises(StoreUnavailable, match=rf"^SQLiteStore {re.escape(str(path))}: no such table"):
        store.update_now("c1", lambda state: None)
    with pytest.raises(StoreUnavailable, match=rf"^SQLiteStore {re.escape(str(path))}: no such table"):
        await store.load("c1")


def test_a_lock_held_elsewhere_is_an_outage_after_timeout_seconds(tmp_path: Path) -> None:
    path = tmp_path / "states.db"
    store = SQLiteStore(path, timeout=0.2)
    assert (SQLiteStore(tmp_path / "d.db").timeout, SQLiteStore(tmp_path / "d.db").max_sessions) == (10.0, 100_000)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write transaction, say
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=rf"^SQLiteStore {re.escape(str(path))}: database is locked"):
            store.update_now("c1", lambda state: None)
        assert 0.15 < time.monotonic() - started < 2.0  # its own timeout, not SQLite's default 5 s
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.update_now("c1", lambda state: None)  # the lock gone, it goes on
    assert SQLiteStore(tmp_path / "t.db", timeout=0.5).timeout == 0.5  # under a second is a timeout too


def test_a_forked_process_opens_its_own_connection_and_counts_on(tmp_path: Path) -> None:
    """In a fresh interpreter (forking this multi-threaded test process could deadlock the child): the store is
    used, the process forks, the child updates through the same store object, then the parent again."""
    import os
    import subprocess
    import sys
    import textwrap

    import repeat_hooks

    script = textwrap.dedent(
        """
        import asyncio, os, sys
        from repeat_hooks import Policy, ToolCall
        from repeat_hooks.stores.sqlite import SQLiteStore

        store, policy = SQLiteStore(sys.argv[1]), Policy(max_calls=10, count="per_turn")
        def decide(state):
            return policy.decide_tool_call(state, ToolCall("t", {}), turn_id="t1")
        store.update_now("conv", decide)
        child = os.fork()
        if child == 0:  # the parent's connection must not be used across the fork
            try:
                store.update_now("conv", decide)
            finally:
                os._exit(0 if store._pid == os.getpid() else 3)
        _, status = os.waitpid(child, 0)
        store.update_now("conv", decide)
        state = asyncio.run(store.load("conv"))
        print(os.waitstatus_to_exitcode(status), list(state.turn.counts.values()))
        """
    )
    source = str(Path(repeat_hooks.__file__).resolve().parents[1])  # the code this test imported (mutmut's too)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "states.db")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(maxsplit=1) == ["0", "[3]\n"]
