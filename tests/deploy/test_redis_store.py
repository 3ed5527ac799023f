"""``RedisStore`` against a real ``redis-server`` (started by ``tests/services.py`` on a free loopback port)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Connection, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from services import HungRedis, RedisServer, free_port, start_redis

from repeat_hooks import GuardSetupError, GuardState, MemoryStore, Policy, Refusal, StateCorrupt, ToolCall, observe
from repeat_hooks.call import call_key
from repeat_hooks.kit import load_state as load_guard_state
from repeat_hooks.state import MAX_DELIVERIES
from repeat_hooks.stores.redis import RedisStore, StoreContention, StoreUnavailable

pytestmark = pytest.mark.services


def new_store(url: str, **options: Any) -> RedisStore:
    """A store on ``url`` with a prefix of its own, so tests sharing the session's Redis never meet."""
    options.setdefault("prefix", f"test-{uuid.uuid4().hex[:8]}:")
    return RedisStore.from_url(url, **options)


class CountingConnection(Connection):
    """Counts round trips: each ``send_packed_command`` is one request (a pipeline's commands go in one)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


async def round_trips(call: Callable[[], Any]) -> tuple[Any, int]:
    before = CountingConnection.sent
    result = await call()
    return result, CountingConnection.sent - before


# -- many processes, one session -----------------------------------------------------------------


def _import_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "repeat_hooks_redis_worker", Path(__file__).with_name("redis_worker.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


redis_worker = _import_worker()
Workload = redis_worker.Workload
TURN = redis_worker.TURN


def run_processes(url: str, prefix: str, workload: Any) -> tuple[list[str | None], int, int]:
    """Run ``workload`` in separate Python processes (``redis_worker.py``), all starting together.

    Returns every decision (refusal text or ``None``) in process order, and the conflicts and leases
    their stores saw. Every process is waited for, or killed by its PID, before returning.
    """
    workers = [
        subprocess.Popen(workload.argv(url, prefix, process), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for process in range(workload.processes)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:  # the start line
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        answers = []
        for worker in workers:
            output, _ = worker.communicate(timeout=120)
            assert worker.returncode == 0, output
            answers.append(json.loads(output))
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGKILL)
                worker.wait()
    decisions = [decision for answer in answers for decision in answer["decisions"]]
    return decisions, sum(answer["conflicts"] for answer in answers), sum(answer["leases"] for answer in answers)


def load_state(url: str, prefix: str) -> GuardState | None:
    async def load() -> GuardState | None:
        async with RedisStore.from_url(url, prefix=prefix) as store:
            return await store.load("s")

    return asyncio.run(load())


@pytest.mark.parametrize(
    "workload",
    [Workload(8, 500), Workload(4, 150, concurrent=False, with_ids=False)],
    ids=["8x500-concurrent", "4x150-one-by-one"],
)
def test_many_processes_count_exactly_what_one_process_counts(redis_server: RedisServer, workload: Any) -> None:
    """Concurrent: each process's 500 decisions are in flight at once (group commits race across the
    processes). One by one: 600 separate compare-and-sets race, which takes leases."""
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    decisions, conflicts, leases = run_processes(redis_server.url, prefix, workload)
    expected_decisions, expected = workload.reference()
    state = load_state(redis_server.url, prefix)
    total = workload.processes * workload.decisions

    assert state is not None
    assert len(decisions) == total
    assert conflicts > 0, "the processes never raced: this run proved nothing"
    if not workload.concurrent:
        assert leases > 0, "no update ever needed the lease"
    # Counts: every decision counted once, none lost.
    assert state.turn.counts == expected.turn.counts
    assert sum(state.turn.counts.values()) == total
    assert (state.turn.number, state.turn.id) == (1, TURN)
    # Refusals: the same number, and the same multiset of (tool, call number): no count given twice.
    assert state.turn.refusals == expected.turn.refusals == sum(decision is not None for decision in decisions) > 0
    assert Counter(decisions) == Counter(expected_decisions)
    # Events: the last 64 refusals, each one of the expected refusals.
    # (An event names the tool, not the arguments: one tool's 3 keys may share an event's figures.)
    assert len(state.events) == len(expected.events) == 64
    assert all(event.kind == "refusal" and event.turn_id == TURN for event in state.events)
    seen = Counter(f"{event.tool}#{int(event.count)}/{int(event.limit)}" for event in state.events)
    refused = Counter(expected_decisions)
    assert all(times <= refused[figures] for figures, times in seen.items()), seen
    assert len(state.deliveries) == len(expected.deliveries) == (MAX_DELIVERIES if workload.with_ids else 0)


def test_the_harness_catches_lost_updates(redis_server: RedisServer) -> None:
    """The same harness with a GET-then-SET store loses updates: so the test above can fail."""
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    workload = Workload(4, 100, concurrent=False, with_ids=False, naive=True)
    run_processes(redis_server.url, prefix, workload)
    state = GuardState.model_validate_json(SyncRedis.from_url(redis_server.url).get(prefix + "s"))
    assert sum(state.turn.counts.values()) < 4 * 100


# -- deliveries, equivalence with MemoryStore ------------------------------------------------------


async def test_a_decision_delivered_twice_counts_once(redis_server: RedisServer) -> None:
    """Two workers (two stores, two connections) receive the same 40 deliveries at once, then again."""
    policy = Policy(max_calls=2, count_failures=False)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    calls = [ToolCall("track", {"parcel": index % 10}, call_id=f"delivery-{index}") for index in range(40)]
    async with (
        RedisStore.from_url(redis_server.url, prefix=prefix) as one,
        RedisStore.from_url(redis_server.url, prefix=prefix) as two,
    ):

        async def decide(store: RedisStore, call: ToolCall) -> Refusal | None:
            return await store.update("s", lambda state: policy.decide_tool_call(state, call))

        first = await asyncio.gather(*(decide(store, call) for call in calls for store in (one, two)))
        again = await asyncio.gather(*(decide(store, call) for call in calls for store in (two, one)))
        failed = ToolCall("track", {"parcel": 0}, call_id="delivery-0")
        for store in (one, two, one):  # the failure of delivery-0, reported three times
            await store.update("s", lambda state: policy.record_tool_result(state, failed, ok=False))
        state = await one.load("s")

    assert first[0::2] == first[1::2]  # both workers got the same decision for each delivery
    assert again[0::2] == again[1::2] == first[0::2]
    assert state is not None
    assert sorted(state.turn.counts.values()) == [3] + [4] * 9  # 4 deliveries per parcel; parcel 0's failure uncounted
    assert state.turn.refusals == 10 * (4 - 2)
    assert sum(refusal is not None for refusal in first[0::2]) == state.turn.refusals
    assert state.turn.errors_in_a_row == 1


WRITERS, RESPONSES, CALLS = 32, 10, 5


async def test_32_writers_delivering_every_hook_call_twice_count_each_once(redis_server: RedisServer) -> None:
    """32 writers (32 stores, 32 connections) serve one session for 10 model responses of 160 parallel calls,
    5 per writer at once: each call is decided, decided again (a second delivery), its outcome recorded and
    recorded again, the response's model call recorded twice; every second delivery comes in a random order
    among the other writers'. So each writer delivers 50 calls twice, and 50 outcomes twice. A 64-id memory
    forgot most of a response's ids before their second delivery: those were counted twice."""
    policy = Policy(count="per_turn", count_failures=False, max_calls=10_000)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    rng = random.Random(19)
    stores = [RedisStore.from_url(redis_server.url, prefix=prefix) for _ in range(WRITERS)]

    def parcel(number: int, response: int | None = None) -> ToolCall:
        call_id = None if response is None else f"call-{response}-{number}"
        return ToolCall(f"track{number % 4}", {"parcel": number % 16}, call_id=call_id)  # 10 calls per key

    def failed(response: int, number: int) -> bool:
        return (response + number) % 3 == 0  # a failure takes the call back out of its count

    def writer(number: int) -> RedisStore:
        return stores[number // CALLS]

    async def decide(number: int, response: int) -> Refusal | None:
        call = parcel(number, response)
        return await writer(number).update("s", lambda state: policy.decide_tool_call(state, call, turn_id="t1"))

    async def record(number: int, response: int) -> None:
        call, ok = parcel(number, response), not failed(response, number)
        await writer(number).update(
            "s", lambda state: policy.record_tool_result(state, call, ok=ok, result=None, turn_id="t1")
        )

    async def model_call(store: RedisStore, response: int) -> None:
        delivery = f"model-{response}"
        await store.update(
            "s", lambda state: policy.record_model_call(state, cost_usd=0.01, turn_id="t1", delivery_id=delivery)
        )

    def shuffled(jobs: list[Any]) -> list[Any]:
        rng.shuffle(jobs)
        return jobs

    numbers = range(WRITERS * CALLS)
    first: list[Refusal | None] = []
    again: list[Refusal | None] = []
    try:
        for response in range(RESPONSES):
            model = stores[response % WRITERS]
            assert await model.update("s", lambda state: policy.decide_model_call(state, turn_id="t1")) is None
            await model_call(model, response)
            first += await asyncio.gather(*(decide(number, response) for number in numbers))
            order = shuffled(list(numbers))
            decided = await asyncio.gather(*(decide(number, response) for number in order))
            again += [decision for _, decision in sorted(zip(order, decided, strict=True))]
            await asyncio.gather(*(record(number, response) for number in numbers))
            await asyncio.gather(
                *shuffled([*(record(number, response) for number in numbers), model_call(stores[-1], response)])
            )
        state = await stores[0].load("s")
        conflicts = sum(store.conflicts for store in stores)
    finally:
        for store in stores:
            await store.aclose()

    assert state is not None
    assert conflicts > 0, "the writers never raced: this run proved nothing"
    assert again == first == [None] * (RESPONSES * WRITERS * CALLS)  # every second delivery: the first decision
    turn = state.turn
    # Every call counted once, every failure taken back once: what is left is the successes, per call key.
    successes = Counter(
        call_key(f"track{number % 4}", {"parcel": number % 16})
        for response in range(RESPONSES)
        for number in numbers
        if not failed(response, number)
    )
    assert turn.counts == dict(successes)
    assert (turn.model_calls, round(turn.cost_usd, 6), turn.responses) == (RESPONSES, RESPONSES * 0.01, RESPONSES)
    assert turn.refusals == 0


async def test_workers_with_different_digest_keys_on_one_session_fail_loudly(redis_server: RedisServer) -> None:
    """The store keeps what the policy wrote and never a key; a worker whose ``Policy(digest_key=...)`` differs
    from the one that wrote the session gets ``GuardSetupError`` naming ``digest_key`` (not a ``StoreUnavailable``
    that fail-open would swallow), and nothing it decided is written."""
    keyed, plain = Policy(digest_key="a secret of sixteen+ chars"), Policy()
    call = ToolCall("unlock", {"pin": "000042"}, call_id="c1")
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    async with (
        RedisStore.from_url(redis_server.url, prefix=prefix) as one,
        RedisStore.from_url(redis_server.url, prefix=prefix) as two,
    ):
        assert await one.update("s", lambda state: keyed.decide_tool_call(state, call, turn_id="t1")) is None
        with pytest.raises(GuardSetupError, match=r"another digest_key, and this policy has no digest_key") as raised:
            await two.update("s", lambda state: plain.decide_tool_call(state, call, turn_id="t1"))
        assert not isinstance(raised.value, StoreUnavailable)
        raw = await one.client.hget(prefix + "s", "s")
        state = await two.load("s")
    assert state is not None and state.key_id is not None and list(state.turn.counts.values()) == [1]
    assert b"000042" not in raw and b"a secret" not in raw and call_key("unlock", {"pin": "000042"}).encode() not in raw


async def test_observers_hear_each_decision_once_under_contention(redis_server: RedisServer) -> None:
    """Four stores on one session lose compare-and-sets and decide again: observers hear what was written, once
    per decision, never an attempt that lost (it was decided on a state nobody kept)."""
    heard: list[observe.Observation] = []
    remove = observe.add_observer(heard.append)
    policy = Policy(max_calls=None)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    stores = [RedisStore.from_url(redis_server.url, prefix=prefix) for _ in range(4)]

    async def worker(store: RedisStore, tag: str) -> None:
        for index in range(50):
            call = ToolCall("t", {"i": index, "w": tag}, call_id=f"{tag}{index}")
            await store.update("s", lambda state, call=call: policy.decide_tool_call(state, call, turn_id="t1"))

    try:
        await asyncio.gather(*(worker(store, f"w{k}") for k, store in enumerate(stores)))
    finally:
        remove()
        for store in stores:
            await store.aclose()
    decided = [seen.call.call_id for seen in heard if isinstance(seen, observe.ToolCallDecided)]
    assert sum(store.conflicts for store in stores) > 0  # the stores did lose races
    assert sorted(decided) == sorted(f"w{k}{index}" for k in range(4) for index in range(50))


def random_operations(seed: int, count: int = 300) -> list[Callable[[Policy, GuardState], object]]:
    """``count`` rule calls (turns, tool calls and results, model calls), some delivered twice."""
    rng = random.Random(seed)
    operations: list[Callable[[Policy, GuardState], object]] = []
    delivered: list[ToolCall] = []
    turn = "t0"
    for index in range(count):
        roll = rng.random()
        if roll < 0.05:
            turn = f"t{index}"
            operations.append(lambda policy, state, turn=turn: policy.start_turn(state, turn_id=turn))
        elif roll < 0.55:
            if delivered and rng.random() < 0.2:
                call = rng.choice(delivered)
            else:
                call_id = f"c{index}" if rng.random() < 0.8 else None
                call = ToolCall(rng.choice(["a", "b", "c"]), {"x": rng.randrange(4)}, call_id=call_id)
                delivered.append(call)
            operations.append(
                lambda policy, state, call=call, turn=turn: policy.decide_tool_call(state, call, turn_id=turn)
            )
        elif roll < 0.8 and delivered:
            call, ok = rng.choice(delivered), rng.random() < 0.6
            operations.append(
                lambda policy, state, call=call, ok=ok, turn=turn: policy.record_tool_result(
                    state, call, ok=ok, turn_id=turn
                )
            )
        elif roll < 0.9:
            operations.append(lambda policy, state, turn=turn: policy.decide_model_call(state, turn_id=turn))
        else:
            seconds, cost, delivery = rng.random(), rng.random() / 10, f"m{rng.randrange(index + 1)}"
            operations.append(
                lambda policy, state, s=seconds, c=cost, d=delivery, turn=turn: policy.record_model_call(
                    state, seconds=s, cost_usd=c, delivery_id=d, turn_id=turn
                )
            )
    return operations


@pytest.mark.parametrize("layout", ["one store", "two stores taking turns", "no cache"])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_state_equals_a_memory_store_after_the_same_updates(
    redis_server: RedisServer, layout: str, seed: int
) -> None:
    policy = Policy(max_calls=2, window=5, count_failures=seed % 2 == 0, max_errors_in_a_row=3, max_model_calls=20)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    memory = MemoryStore()
    cache_size = 0 if layout == "no cache" else 1024
    stores = [RedisStore.from_url(redis_server.url, prefix=prefix, cache_size=cache_size) for _ in range(2)]
    if layout != "two stores taking turns":
        stores = stores[:1]
    try:
        for index, operation in enumerate(random_operations(seed)):
            expected = memory.update_now("s", lambda state, operation=operation: operation(policy, state))
            got = await stores[index % len(stores)].update(
                "s", lambda state, operation=operation: operation(policy, state)
            )
            assert got == expected, f"operation {index}"
        raw = await stores[0].client.hget(prefix + "s", "s")
    finally:
        for store in stores:
            await store.aclose()
    remembered = memory.update_now("s", lambda state: state)
    assert GuardState.model_validate_json(raw) == remembered
    assert remembered.events and remembered.deliveries and remembered.turn.number > 1  # the sequence did exercise them


# -- round trips, layout, errors -------------------------------------------------------------------


async def test_an_uncontended_decision_takes_at_most_two_round_trips(redis_server: RedisServer) -> None:
    policy = Policy()
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    options = {"prefix": prefix, "connection_class": CountingConnection}
    async with (
        RedisStore.from_url(redis_server.url, **options) as one,
        RedisStore.from_url(redis_server.url, **options) as two,
    ):
        await one.client.ping()
        await two.client.ping()  # connected: the handshake is not a decision's cost

        def check(state: GuardState) -> Refusal | None:
            return policy.decide_tool_call(state, ToolCall("lookup", {"q": 1}))

        async def trips(store: RedisStore) -> int:
            return (await round_trips(lambda: store.update("s", check)))[1]

        # One process serves the session: a read and a write for a new session, then one round trip.
        alone = [await trips(one) for _ in range(3)]
        # A worker switch: ``two`` reads and writes; ``one`` decides on its stale memory, loses the
        # compare-and-set (which answers with the current state) and writes: 2. Having seen another
        # writer, it reads before deciding (2) until a read shows nobody else wrote; then 1 again.
        switch = [await trips(two), await trips(one), await trips(one), await trips(one)]
        # Hook calls alternating between two workers: a read and a write each, never more.
        alternating = [await trips(store) for _ in range(4) for store in (two, one)]
        _, load = await round_trips(lambda: one.load("s"))
        await trips(one)
        await one.client.script_flush()  # as after a Redis restart: the server forgot the script
        refusal, after_flush = await round_trips(lambda: one.update("s", check))
    assert alone == [2, 1, 1]
    assert switch == [2, 2, 2, 1]
    assert alternating == [2] * 8
    assert load == 1
    assert after_flush == 2  # EVALSHA answered NOSCRIPT, then EVAL: the write happened once
    assert isinstance(refusal, Refusal)


async def test_concurrent_updates_through_one_store_are_written_together_in_order(redis_server: RedisServer) -> None:
    """50 parallel decisions of one session in one process: one write (a group commit), same results as
    one after the other; a change that raises gets its exception, and only its own change is dropped."""
    policy = Policy(max_calls=3)
    calls = [ToolCall("lookup", {"q": index % 5}) for index in range(50)]
    reference = MemoryStore()
    expected = [
        reference.update_now("s", lambda state, call=call: policy.decide_tool_call(state, call)) for call in calls
    ]

    def explode(state: GuardState) -> None:
        state.turn.refusals += 1000
        raise ValueError("boom")

    async with new_store(redis_server.url, connection_class=CountingConnection) as store:
        await store.client.ping()
        decide = [store.update("s", lambda state, call=call: policy.decide_tool_call(state, call)) for call in calls]
        before = CountingConnection.sent
        results = await asyncio.gather(*decide[:25], store.update("s", explode), *decide[25:], return_exceptions=True)
        sent = CountingConnection.sent - before
        state = await store.load("s")
    assert sent <= 3  # a read, then one or two writes: not 50
    assert results[:25] + results[26:] == expected
    assert isinstance(results[25], ValueError)
    assert state is not None
    assert state.turn.refusals == sum(result is not None for result in expected) == 5 * (10 - 3)


async def test_a_cancelled_caller_leaves_the_others_and_the_store_working(redis_server: RedisServer) -> None:
    async with new_store(redis_server.url) as store:
        tasks = [asyncio.create_task(store.update("s", policy_check)) for _ in range(10)]
        await asyncio.sleep(0)  # all ten queued
        tasks[5].cancel()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        after = await asyncio.wait_for(store.update("s", policy_check), 5)
    assert isinstance(results[5], asyncio.CancelledError)
    others = results[:5] + results[6:]
    assert others == sorted(others) and len(set(others)) == 9  # each counted once, in order
    assert after == others[-1] + 1


async def test_a_writer_waits_for_a_lease_held_elsewhere_and_takes_it_when_it_expires(
    redis_server: RedisServer,
) -> None:
    """A lease left by a writer that died holds the session off for at most its expiry; past ``max_wait``
    the update gives up with ``StoreContention``."""
    async with new_store(redis_server.url, max_wait=0.3) as store:
        name = store.prefix + "s"
        await store.update("s", policy_check)
        await store.client.hset(name, mapping={"l": "a-dead-writer", "x": await server_ms(store) + 10_000})
        started = time.monotonic()
        with pytest.raises(StoreContention, match=r"held it for 0\.3 s"):
            await store.update("s", policy_check)
        assert 0.3 <= time.monotonic() - started < 2

        await store.client.hset(name, mapping={"x": await server_ms(store) + 400})  # it expires soon after all
        started = time.monotonic()
        store.max_wait = 5
        assert await store.update("s", policy_check) == 2
        waited = time.monotonic() - started
        leftover = await store.client.hmget(name, ["l", "x"])
    assert 0.3 < waited < 2
    assert store.leases == 1
    assert leftover == [None, None]  # the write released the lease


async def server_ms(store: RedisStore) -> int:
    seconds, micros = await store.client.time()
    return int(seconds * 1000 + micros // 1000)


def policy_check(state: GuardState) -> int:
    Policy().decide_tool_call(state, ToolCall("a"))
    return sum(state.turn.counts.values())


class ReplyLosingConnection(Connection):
    """Loses the reply of the next script call once armed: the write happens, the client never hears."""

    armed = False
    meanwhile: Callable[[], None] | None = None
    """Run after the lost reply's write landed, before the client resends it (another writer, say)."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self._script_call = ReplyLosingConnection.armed and b"EVAL" in b"".join(
            part if isinstance(part, bytes) else str(part).encode() for part in _parts(command)
        )
        await super().send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().read_response(*args, **kwargs)
        if getattr(self, "_script_call", False):
            ReplyLosingConnection.armed = self._script_call = False
            if ReplyLosingConnection.meanwhile is not None:
                await asyncio.to_thread(ReplyLosingConnection.meanwhile)
            await self.disconnect()
            raise RedisConnectionError("reply lost (test)")
        return response


def _parts(command: Any) -> list[Any]:
    return [command] if isinstance(command, bytes | str) else list(command)


async def test_a_write_whose_reply_was_lost_is_not_applied_twice(redis_server: RedisServer) -> None:
    """The client resends the compare-and-set after losing its reply; the store sees its own token and
    knows its write landed, instead of deciding again (which would count the call twice)."""
    policy = Policy(max_calls=5)
    async with new_store(redis_server.url, connection_class=ReplyLosingConnection) as store:
        await store.update("s", lambda state: policy.decide_tool_call(state, ToolCall("a")))
        ReplyLosingConnection.armed = True
        await store.update("s", lambda state: policy.decide_tool_call(state, ToolCall("a")))
        assert not ReplyLosingConnection.armed  # the reply was indeed lost, and the call resent
        state = await store.load("s")
    assert state is not None
    assert list(state.turn.counts.values()) == [2]
    assert store.conflicts == 0


async def test_a_write_whose_reply_was_lost_lands_once_though_another_writer_wrote_since(
    redis_server: RedisServer,
) -> None:
    """The write lands, its reply is lost, another process writes on top before the client resends it: the script
    finds the resent write's token among the hash's last write tokens and answers that it landed, so the change
    is not applied again on the newer state (it was: 102 where 101 was right)."""
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    runs: list[int] = []

    def ours(state: GuardState) -> None:
        runs.append(1)
        state.key_id = str(int(state.key_id or 0) + 1)

    def other_process() -> None:
        async def write() -> None:
            async with RedisStore.from_url(redis_server.url, prefix=prefix) as other:
                await other.update("s", lambda state: setattr(state, "key_id", str(int(state.key_id or 0) + 100)))

        asyncio.run(write())

    async with RedisStore.from_url(redis_server.url, prefix=prefix, connection_class=ReplyLosingConnection) as store:
        await store.update("s", lambda state: None)
        ReplyLosingConnection.armed, ReplyLosingConnection.meanwhile = True, other_process
        try:
            await store.update("s", ours)
        finally:
            ReplyLosingConnection.meanwhile = None
        assert not ReplyLosingConnection.armed  # the reply was lost, the call resent
        state = await store.load("s")
        stored = await store.client.hgetall(prefix + "s")
    assert state is not None and state.key_id == "101" and runs == [1]
    tokens = stored[b"r"].decode().split(",")
    assert len(tokens) == 3 and tokens[0] == stored[b"t"].decode()  # newest first: the other's, ours, the first


async def test_the_hash_keeps_the_last_eight_write_tokens(redis_server: RedisServer) -> None:
    from repeat_hooks.stores.redis import RECENT_TOKENS

    async with new_store(redis_server.url) as store:
        for _ in range(12):
            await store.update("s", lambda state: None)
        stored = await store.client.hgetall(store.prefix + "s")
    tokens = stored[b"r"].decode().split(",")
    assert len(tokens) == RECENT_TOKENS == 8 and len(set(tokens)) == 8 and tokens[0] == stored[b"t"].decode()


async def test_key_layout_prefix_and_ttl_on_every_write(redis_server: RedisServer) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    async with (
        RedisStore.from_url(redis_server.url, prefix=prefix, ttl=60) as store,
        RedisStore.from_url(redis_server.url, prefix=prefix + "other:", ttl=60) as other,
    ):
        await store.update("session-1", lambda state: Policy().decide_tool_call(state, ToolCall("a")))
        await store.client.expire(prefix + "session-1", 5)
        await store.update("session-1", lambda state: Policy().decide_tool_call(state, ToolCall("a")))
        stored = await store.client.hgetall(prefix + "session-1")
        ttl_ms = await store.client.pttl(prefix + "session-1")
        assert await other.load("session-1") is None  # another prefix is another namespace
    assert set(stored) == {b"t", b"s", b"r"}  # token, state, the last write tokens
    assert list(GuardState.model_validate_json(stored[b"s"]).turn.counts.values()) == [2]
    assert 55_000 < ttl_ms <= 60_000  # the second write set the TTL again


async def test_a_client_passed_in_works_with_decoded_responses_and_stays_open(redis_server: RedisServer) -> None:
    client = Redis.from_url(redis_server.url, decode_responses=True)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    try:
        async with RedisStore(client, prefix=prefix) as store, RedisStore(client, prefix=prefix) as other:
            for _ in range(3):  # the two stores take turns: conflict replies are decoded too
                await store.update("s", policy_check)
                await other.update("s", policy_check)
            state = await store.load("s")
        assert await client.ping()  # the caller's client: not closed by the store
    finally:
        await client.aclose()
    assert state is not None
    assert list(state.turn.counts.values()) == [6]


async def test_one_store_serves_async_and_sync_hooks_each_on_its_own_loop(redis_server: RedisServer) -> None:
    """A sync hook's calls run on the guard's own event loop, an async hook's on the application's: a store from
    ``from_url`` has a client for each, so one guard counts both paths together; a given client refuses the
    second live loop loudly, naming the way out."""
    from repeat_hooks.kit import GuardCore

    name = f"rh-{uuid.uuid4().hex[:8]}"
    store = new_store(redis_server.url, client_name=name)
    core = GuardCore(Policy(max_calls=3), owner="Guard", store=store)
    call = ToolCall("track", {"id": "FR-1"})
    watcher = SyncRedis.from_url(redis_server.url)

    def connected() -> int:
        return sum(client.get("name") == name for client in watcher.client_list())

    def decide(state: GuardState) -> Refusal | None:
        return core.policy.decide_tool_call(state, call)

    decisions = [await core.update("s", decide, outage=core.refused)]
    decisions.append(await asyncio.to_thread(core.update_now, "s", decide, outage=core.refused))  # the guard's loop
    decisions.append(await core.update("s", decide, outage=core.refused))
    decisions.append(await asyncio.to_thread(core.update_now, "s", decide, outage=core.refused))
    assert [decision is None for decision in decisions] == [True, True, True, False]  # one count: 4 > 3
    assert connected() == 2  # a client on each loop
    await store.aclose()
    assert connected() == 0  # both closed, the guard's loop's on that loop

    client = Redis.from_url(redis_server.url)
    given = RedisStore(client, prefix=f"test-{uuid.uuid4().hex[:8]}:")
    closed = GuardCore(owner="Guard", store=given, fail="closed")
    try:
        assert await closed.update("s", decide, outage=closed.refused) is None
        with pytest.raises(GuardSetupError, match=r"RedisStore\.from_url"):
            await asyncio.to_thread(closed.update_now, "s", decide, outage=closed.refused)
    finally:
        await client.aclose()

    def later_loop() -> None:  # the given client's first loop is gone: still refused, never a raw loop error
        with pytest.raises(GuardSetupError, match=r"RedisStore\.from_url"):
            asyncio.run(closed.update("s", decide, outage=closed.refused))

    await asyncio.to_thread(later_loop)


async def test_state_expires_after_its_ttl(redis_server: RedisServer) -> None:
    policy = Policy(max_calls=1)
    call = ToolCall("a")
    async with new_store(redis_server.url, ttl=0.5) as store:
        assert await store.update("s", lambda state: policy.decide_tool_call(state, call)) is None
        assert await store.update("s", lambda state: policy.decide_tool_call(state, call)) is not None
        assert await store.client.pttl(store.prefix + "s") > 0
        await asyncio.sleep(0.7)
        assert await store.load("s") is None
        assert await store.client.exists(store.prefix + "s") == 0
        # The store still remembers the expired state locally; Redis decides: the count starts again.
        assert await store.update("s", lambda state: policy.decide_tool_call(state, call)) is None
        state = await store.load("s")
    assert state is not None
    assert list(state.turn.counts.values()) == [1]


async def test_a_failing_change_writes_nothing(redis_server: RedisServer) -> None:
    def explode(state: GuardState) -> None:
        state.turn.refusals = 99
        raise ValueError("boom")

    async with new_store(redis_server.url) as store:
        await store.update("s", lambda state: Policy().decide_tool_call(state, ToolCall("a")))
        with pytest.raises(ValueError, match="boom"):
            await store.update("s", explode)
        state = await store.load("s")
        assert state is not None
        assert state.turn.refusals == 0
        assert await store.update("s", lambda state: sum(state.turn.counts.values())) == 1


async def test_contention_past_max_attempts_raises_store_contention(redis_server: RedisServer) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    async with (
        RedisStore.from_url(redis_server.url, prefix=prefix, max_attempts=1) as stale,
        RedisStore.from_url(redis_server.url, prefix=prefix) as other,
    ):
        await stale.update("s", lambda state: None)
        await other.update("s", lambda state: None)  # now what ``stale`` remembers is out of date
        with pytest.raises(StoreContention, match="lost 1 compare-and-sets") as caught:
            await stale.update("s", lambda state: None)
        assert isinstance(caught.value, StoreUnavailable)
        assert stale.conflicts == 1
        assert await stale.update("s", lambda state: "ok") == "ok"  # it forgot the stale state


async def test_a_state_that_is_not_a_guard_state_raises_store_unavailable(redis_server: RedisServer) -> None:
    async with new_store(redis_server.url) as store:
        await store.client.hset(store.prefix + "s", mapping={"t": "x", "s": '{"counts": "nope"}'})
        with pytest.raises(StoreUnavailable, match="is not a repeat-hooks GuardState"):
            await store.update("s", lambda state: None)
        with pytest.raises(StoreUnavailable, match="is not a repeat-hooks GuardState"):
            await store.load("s")


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decode_responses"])
async def test_a_state_that_is_not_utf8_is_refused_as_load_state_refuses_it(
    redis_server: RedisServer, decoded: bool
) -> None:
    """Bytes someone else wrote: decoded with replacement characters they were a state the guard never wrote
    (a count under a key made of U+FFFD), kept and written back; ``load_state`` refuses the same bytes."""
    written = json.dumps({"turn": {"counts": {"@": 1}}}).encode().replace(b"@", b"\xff\xfe")
    with pytest.raises(StateCorrupt):
        load_guard_state(written)
    client = Redis.from_url(redis_server.url, decode_responses=decoded)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    try:
        async with RedisStore(client, prefix=prefix) as store:
            raw = SyncRedis.from_url(redis_server.url)
            raw.hset(prefix + "s", mapping={"t": b"x", "s": written})
            for attempt in (store.load("s"), store.update("s", lambda state: None)):
                with pytest.raises(StateCorrupt, match=r"'test-\w+:s': the stored guard state is not UTF-8 text"):
                    await attempt
            raw.hset(prefix + "s", mapping={"t": b"\xff", "s": GuardState().model_dump_json()})
            with pytest.raises(StateCorrupt, match="not UTF-8 text"):
                await store.load("s")
            raw.delete(prefix + "s")
            assert await store.update("s", lambda state: "written") == "written"  # deleted: afresh, as it says
            raw.close()
    finally:
        await client.aclose()


async def test_unreachable_redis_raises_store_unavailable_quickly() -> None:
    port = free_port()  # nothing listens there
    async with RedisStore.from_url(f"redis://127.0.0.1:{port}/0", timeout=0.5) as store:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="Redis failed") as caught:
            await store.update("s", lambda state: None)
        with pytest.raises(StoreUnavailable):
            await store.load("s")
    assert time.monotonic() - started < 2
    assert caught.value.__cause__ is not None


async def test_a_redis_that_never_answers_raises_store_unavailable_not_a_hang(hung_redis: HungRedis) -> None:
    async with RedisStore.from_url(hung_redis.url, timeout=0.3) as store:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="Timeout"):
            await store.update("s", lambda state: None)
        with pytest.raises(StoreUnavailable, match="Timeout"):
            await store.update("s", lambda state: None)
    assert time.monotonic() - started < 3  # a hang, not an error: two updates of one 0.3 s timeout each
    # The documented timeout is the wait: a timed-out request is not sent again (one connection per update).
    assert len(hung_redis.connections) == 2


# -- restarts --------------------------------------------------------------------------------------


async def test_counts_survive_a_redis_crash_mid_turn_with_persistence(redis_restartable: RedisServer) -> None:
    """With the AOF fsynced on every write, a crash (SIGKILL) loses no decision; while Redis is down the
    store raises ``StoreUnavailable`` promptly, and once it is back the turn continues where it was."""
    policy = Policy(max_calls=2)
    lookup = ToolCall("lookup", {"q": "parcel 7"}, call_id="first")
    async with RedisStore.from_url(redis_restartable.url, timeout=0.5) as store:
        assert await store.update("s", lambda state: policy.decide_tool_call(state, lookup, turn_id="turn-1")) is None
        second = ToolCall("lookup", {"q": "parcel 7"}, call_id="second")
        assert await store.update("s", lambda state: policy.decide_tool_call(state, second, turn_id="turn-1")) is None

        pid = redis_restartable.pid
        assert pid is not None
        redis_restartable.kill()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped by its PID
        started = time.monotonic()
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                await store.update("s", lambda state: policy.decide_tool_call(state, lookup, turn_id="turn-1"))
        assert time.monotonic() - started < 3

        redis_restartable.start()
        # The delivery made before the crash is still known: decided again without counting.
        assert await store.update("s", lambda state: policy.decide_tool_call(state, lookup, turn_id="turn-1")) is None
        third = ToolCall("lookup", {"q": "parcel 7"}, call_id="third")
        refusal = await store.update("s", lambda state: policy.decide_tool_call(state, third, turn_id="turn-1"))
        state = await store.load("s")
    assert isinstance(refusal, Refusal)
    assert state is not None
    assert list(state.turn.counts.values()) == [3]
    assert state.turn.refusals == 1


async def test_without_persistence_a_restart_forgets_the_session(tmp_path: Path) -> None:
    """An ephemeral Redis (no AOF, no RDB) comes back empty: the store works at once and counts from zero,
    never from the state it remembers locally."""
    server = start_redis(tmp_path, persistent=False)
    try:
        policy = Policy(max_calls=1)
        call = ToolCall("lookup")
        async with RedisStore.from_url(server.url, timeout=0.5) as store:
            assert await store.update("s", lambda state: policy.decide_tool_call(state, call)) is None
            assert await store.update("s", lambda state: policy.decide_tool_call(state, call)) is not None
            server.restart()
            assert await store.load("s") is None
            assert await store.update("s", lambda state: policy.decide_tool_call(state, call)) is None
    finally:
        server.stop()


# -- packaging, fixtures ---------------------------------------------------------------------------


def test_importing_without_redis_py_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "import repeat_hooks\n"  # the core never needs redis
        "try:\n"
        "    import repeat_hooks.stores.redis\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'repeat-hooks[redis]'" in answer.stdout


def test_invalid_settings_are_refused() -> None:
    client = Redis()
    invalid = [({"ttl": 0}, "ttl"), ({"max_attempts": 0}, "max_attempts"), ({"cache_size": -1}, "cache")]
    for options, field in [*invalid, ({"max_wait": 0}, "max_wait")]:
        with pytest.raises(ValueError, match=field):
            RedisStore(client, **options)
