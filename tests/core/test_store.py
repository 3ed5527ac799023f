"""MemoryStore: atomic read-modify-write per session, isolation, LRU bound."""

from __future__ import annotations

import asyncio
import threading

from repeat_hooks import GuardState, MemoryStore, Policy, StateStore, ToolCall

POLICY = Policy(max_calls=1_000_000)
CALL = ToolCall("t", {"a": 1})


async def test_concurrent_tasks_lose_no_counts() -> None:
    store = MemoryStore()

    async def decide(n: int) -> None:
        await asyncio.sleep(0)
        await store.update("s", lambda state: POLICY.decide_tool_call(state, CALL))

    await asyncio.gather(*(decide(n) for n in range(2_000)))
    state = await store.load("s")
    assert state is not None and list(state.turn.counts.values()) == [2_000]


def test_threads_lose_no_counts() -> None:
    store = MemoryStore()

    def work() -> None:
        for _ in range(2_000):
            store.update_now("s", lambda state: POLICY.decide_tool_call(state, CALL))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state = asyncio.run(store.load("s"))
    assert state is not None and list(state.turn.counts.values()) == [8_000]


async def test_sessions_are_isolated_and_evicted_least_recently_used_first() -> None:
    store = MemoryStore(max_sessions=2)
    for session in ("a", "b", "a", "c"):
        await store.update(session, lambda state: POLICY.decide_tool_call(state, CALL))
    assert len(store) == 2
    assert await store.load("b") is None
    a = await store.load("a")
    assert a is not None and list(a.turn.counts.values()) == [2]


async def test_load_is_a_copy_and_update_returns_the_decision() -> None:
    store: StateStore = MemoryStore()
    assert await store.load("s") is None
    refusal = await store.update("s", lambda state: Policy(max_calls=0).decide_tool_call(state, CALL))
    assert refusal is not None
    loaded = await store.load("s")
    assert isinstance(loaded, GuardState)
    loaded.turn.refusals = 99
    again = await store.load("s")
    assert again is not None and again.turn.refusals == 1


def test_the_default_bound_is_1024_sessions() -> None:
    store = MemoryStore()
    for n in range(1024):
        store.update_now(f"s{n}", lambda state: None)
    assert (len(store), store.evictions) == (1024, 0)
    store.update_now("s1024", lambda state: None)
    assert (len(store), store.evictions) == (1024, 1)
    assert asyncio.run(store.load("s0")) is None  # the least recently used went first
