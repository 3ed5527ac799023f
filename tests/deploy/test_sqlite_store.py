"""SQLiteStore: one file shared by processes on one host. Exact counts under concurrent writers delivering every
hook call twice, and a process killed mid-update leaving the last committed state. (In one process:
``tests/core/test_sqlite_store.py``.)"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from repeat_hooks import Policy, ToolCall
from repeat_hooks.stores.sqlite import SQLiteStore

WRITER = textwrap.dedent(
    """
    import random, sys
    from repeat_hooks import Policy, ToolCall
    from repeat_hooks.stores.sqlite import SQLiteStore

    path, worker, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store, policy = SQLiteStore(path, timeout=60), Policy(max_calls=10**9, count="per_turn")
    deliveries = [n for n in range(calls) for _ in range(2)]  # every hook call delivered twice
    random.Random(worker).shuffle(deliveries)
    for n in deliveries:
        call = ToolCall("track", {"id": 1}, call_id=f"w{worker}-c{n}")
        store.update_now("conv", lambda state: policy.decide_tool_call(state, call, turn_id="t1"))
    """
)


def _writers(path: Path, workers: int, calls: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(worker), str(calls)])
        for worker in range(workers)
    ]


def test_processes_delivering_every_call_twice_count_each_once(tmp_path: Path) -> None:
    path = tmp_path / "states.db"
    SQLiteStore(path)  # made before the writers race to make it
    # 16 processes x 15 calls = 240 calls in one model response: within the 256 delivery ids a state keeps of the
    # current response (with more, a late second delivery of the oldest would count again, whatever the
    # interleaving of the writers).
    writers = _writers(path, workers=16, calls=15)
    assert [writer.wait(timeout=300) for writer in writers] == [0] * 16
    state = asyncio.run(SQLiteStore(path).load("conv"))
    assert state is not None and list(state.turn.counts.values()) == [16 * 15]


def test_a_process_killed_mid_update_leaves_the_last_committed_state(tmp_path: Path) -> None:
    path = tmp_path / "states.db"
    store = SQLiteStore(path)
    policy = Policy(max_calls=10**9, count="per_turn")
    for n in range(3):
        store.update_now("conv", lambda state, n=n: policy.decide_tool_call(state, ToolCall("t", {"n": n})))
    hold = textwrap.dedent(
        f"""
        import time
        from repeat_hooks import Policy, ToolCall
        from repeat_hooks.stores.sqlite import SQLiteStore

        def stall(state):
            Policy(max_calls=10**9, count="per_turn").decide_tool_call(state, ToolCall("t", {{"n": 99}}))
            print("inside", flush=True)
            time.sleep(60)  # killed here, its transaction open

        SQLiteStore({str(path)!r}).update_now("conv", stall)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == b"inside"
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    started = time.monotonic()
    store.update_now("conv", lambda state: policy.decide_tool_call(state, ToolCall("t", {"n": 3})))
    assert time.monotonic() - started < 5  # the dead process's lock went with it
    state = asyncio.run(store.load("conv"))
    assert state is not None and sum(state.turn.counts.values()) == 4  # 3 committed + 1; the killed one lost
