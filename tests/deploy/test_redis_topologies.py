"""``RedisStore`` as teams run Redis: a Redis Cluster reached through one node's URL, a Sentinel-managed primary
that fails over, a worker whose event loop is busy, and a client that fails in a way of its own. Real servers
only (``tests/services.py``)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis, RedisCluster
from redis.crc import key_slot
from services import HungRedis, RedisSentinel, RedisServer, redis_command
from services import RedisCluster as ClusterServers

from repeat_hooks import GuardSetupError, GuardState, Policy, ToolCall
from repeat_hooks.stores.redis import RedisStore, StoreUnavailable

pytestmark = pytest.mark.services

POLICY = Policy()
"""The default: the 3rd same call with nothing changed between is refused."""


def track(state: GuardState, parcel: int = 1, call_id: str | None = None) -> str | None:
    refusal = POLICY.decide_tool_call(state, ToolCall("track", {"parcel": parcel}, call_id=call_id), turn_id="t1")
    return None if refusal is None else refusal.reason.value


def node_of(cluster: ClusterServers, key: str) -> int:
    """The index of the node holding ``key``'s slot (the fixture splits the slots evenly, in order)."""
    return key_slot(key.encode()) * len(cluster.nodes) // 16384


# -- Redis Cluster ------------------------------------------------------------------------------


async def test_a_cluster_reached_through_one_nodes_url_guards_every_session(redis_cluster: ClusterServers) -> None:
    """40 sessions, their first updates all at once on a cold store: every one is counted on the node that holds
    its slot, and every third same call is refused (through a client for one server, 2 of 3 sessions answered
    MOVED: an outage, so unguarded under fail-open)."""
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    sessions = [f"session-{number}" for number in range(40)]
    assert len({node_of(redis_cluster, prefix + session) for session in sessions}) == 3
    store = RedisStore.from_url(redis_cluster.url, prefix=prefix)
    try:
        decided = [await asyncio.gather(*(store.update(s, track) for s in sessions)) for _ in range(3)]
        assert isinstance(store.client, RedisCluster)
    finally:
        await store.aclose()
    assert decided[:2] == [[None] * 40] * 2
    assert decided[2] == ["repeat"] * 40
    for session in sessions:  # each on its own node, where a plain client on that node reads it
        node = redis_cluster.nodes[node_of(redis_cluster, prefix + session)]
        assert redis_command(node.port, "HEXISTS", prefix + session, "s") == 1


async def test_every_node_of_the_cluster_will_do_and_a_cluster_client_can_be_given(
    redis_cluster: ClusterServers,
) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    decided = []
    for node in redis_cluster.nodes:  # one session, a store through each node in turn
        store = RedisStore.from_url(node.url, prefix=prefix)
        try:
            decided.append(await store.update("shared", track))
        finally:
            await store.aclose()
    assert decided == [None, None, "repeat"]
    client = RedisCluster.from_url(redis_cluster.nodes[2].url)
    try:
        given = RedisStore(client, prefix=prefix)
        assert await given.update("shared", track) == "repeat"
        state = await given.load("shared")
        assert state is not None and list(state.turn.counts.values()) == [4]
    finally:
        await client.aclose()


async def test_a_client_for_one_server_on_a_cluster_node_names_the_fix(redis_cluster: ClusterServers) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    moved = next(f"s{n}" for n in range(100) if node_of(redis_cluster, f"{prefix}s{n}") != 0)
    client = Redis.from_url(redis_cluster.url)
    try:
        with pytest.raises(StoreUnavailable, match=r"RedisCluster client, or use RedisStore\.from_url"):
            await RedisStore(client, prefix=prefix).update(moved, track)
    finally:
        await client.aclose()


CLUSTER_WRITER = textwrap.dedent(
    """
    import asyncio, json, random, sys
    from repeat_hooks import Policy, ToolCall
    from repeat_hooks.stores.redis import RedisStore

    url, prefix, worker, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    policy = Policy(max_calls=10**9, count="per_turn")
    sessions = [f"session-{n}" for n in range(4)]

    async def main():
        store = RedisStore.from_url(url, prefix=prefix, max_wait=60, max_attempts=10**6)
        deliveries = [(s, n) for s in sessions for n in range(calls) for _ in range(2)]  # every call twice
        random.Random(worker).shuffle(deliveries)

        async def deliver(session, n):
            call = ToolCall("track", {"id": 1}, call_id=f"w{worker}-c{n}")
            await store.update(session, lambda state: policy.decide_tool_call(state, call, turn_id="t1"))

        try:
            for start in range(0, len(deliveries), 8):  # eight hook calls in flight at a time
                await asyncio.gather(*(deliver(*d) for d in deliveries[start:start + 8]))
        finally:
            await store.aclose()
        print(json.dumps({"conflicts": store.conflicts}))

    asyncio.run(main())
    """
)


def test_16_processes_on_a_cluster_delivering_every_call_twice_count_each_once(redis_cluster: ClusterServers) -> None:
    """16 processes, each reaching the cluster through a node of its own choosing, decide 15 calls of each of 4
    sessions (on different nodes), every call delivered twice in a shuffled order: each session counts 240."""
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    nodes = redis_cluster.nodes
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", CLUSTER_WRITER, nodes[worker % 3].url, prefix, str(worker), "15"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for worker in range(16)
    ]
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 16, outputs

    async def counts() -> dict[str, list[int]]:
        store = RedisStore.from_url(nodes[0].url, prefix=prefix)
        try:
            states = {s: await store.load(f"session-{s}") for s in range(4)}
        finally:
            await store.aclose()
        return {str(s): list(state.turn.counts.values()) for s, state in states.items() if state is not None}

    assert asyncio.run(counts()) == {str(s): [16 * 15] for s in range(4)}
    assert len({node_of(redis_cluster, f"{prefix}session-{s}") for s in range(4)}) > 1


# -- Sentinel -----------------------------------------------------------------------------------


async def test_a_sentinel_url_reaches_the_primary_and_follows_a_failover(redis_sentinel: RedisSentinel) -> None:
    store = RedisStore.from_url(redis_sentinel.url, prefix="test:")
    try:
        assert [await store.update("s", track) for _ in range(2)] == [None, None]
        assert redis_command(redis_sentinel.primary.port, "HEXISTS", "test:s", "s") == 1
        redis_sentinel.failover()
        assert redis_sentinel.primary_port() == redis_sentinel.replica.port
        # The old primary is a replica now: the store finds the new one and the counts went with it.
        assert await store.update("s", track) == "repeat"
        state = await store.load("s")
        assert state is not None and list(state.turn.counts.values()) == [3]
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("redis+sentinel://127.0.0.1:26379", "not a Sentinel URL"),
        ("redis+sentinel:///mymaster", "not a Sentinel URL"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/0/extra", "not a Sentinel URL"),
        ("redis+sentinel://127.0.0.1:port/mymaster", "is not host\\[:port\\]"),
        ("redis+sentinel://127.0.0.1/mymaster/zero", "database .* is not a number"),
        ("redis+sentinel://127.0.0.1/mymaster?sentinel_password=x", "takes no query string"),
    ],
)
def test_a_malformed_sentinel_url_is_refused_with_the_right_spelling(url: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        RedisStore.from_url(url)


def test_a_sentinel_urls_parts_reach_the_clients() -> None:
    store = RedisStore.from_url("rediss+sentinel://app:s%40cret@one:26380,[::1],two/orders/3", timeout=0.5)
    client: Any = store.client
    pool = client.connection_pool
    assert pool.service_name == "orders"
    sentinels = [
        (sentinel.connection_pool.connection_kwargs["host"], sentinel.connection_pool.connection_kwargs["port"])
        for sentinel in pool.sentinel_manager.sentinels
    ]
    assert sentinels == [("one", 26380), ("::1", 26379), ("two", 26379)]
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"], kwargs["socket_timeout"]) == ("app", "s@cret", 3, 0.5)
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"


# -- a busy worker, a failing client ------------------------------------------------------------


async def test_a_busy_event_loop_does_not_make_a_healthy_redis_an_outage(redis_server: RedisServer) -> None:
    """A handler that holds the event loop for 1.5 s while an update waits for its 0.2 s reply: the timeout fires
    late, Redis had answered, so the update is asked again and decides (it was an outage before)."""
    store = RedisStore.from_url(redis_server.url, prefix=f"test-{uuid.uuid4().hex[:8]}:", timeout=0.2)
    try:
        await store.load("warm")  # connected

        async def hold_the_loop() -> None:
            await asyncio.sleep(0)  # the update has sent its request
            time.sleep(1.5)  # a CPU-bound or blocking handler on the same loop

        decided, _ = await asyncio.gather(store.update("s", track), hold_the_loop())
        assert decided is None
        assert store.late_timeouts >= 1
        state = await store.load("s")
        assert state is not None and list(state.turn.counts.values()) == [1]  # counted once
    finally:
        await store.aclose()


async def test_a_hung_redis_is_still_an_outage_after_its_timeout(hung_redis: HungRedis) -> None:
    store = RedisStore.from_url(hung_redis.url, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="Timeout"):
        await store.update("s", track)
    assert time.monotonic() - started < 1.0  # on time: never asked again
    assert store.late_timeouts == 0


async def test_any_failure_inside_the_client_becomes_store_unavailable(redis_server: RedisServer) -> None:
    """A bug inside redis-py (a TypeError, as a cold cluster client raised under load) is an outage with its
    kind named, which the outage policy then decides, not an error that escapes every adapter's handler."""

    class Broken(Redis):
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            raise TypeError("'NoneType' object is not subscriptable")

    client = Broken.from_url(redis_server.url)
    try:
        with pytest.raises(StoreUnavailable, match="TypeError: 'NoneType' object is not subscriptable"):
            await RedisStore(client).update("s", track)
    finally:
        await client.aclose()


def test_a_sync_client_is_refused_at_setup() -> None:
    from redis import Redis as SyncRedis

    with pytest.raises(GuardSetupError, match=r"redis\.asyncio client"):
        RedisStore(SyncRedis())  # type: ignore[arg-type]


# -- the ACL the README gives --------------------------------------------------------------------


def readme_acl() -> list[str]:
    """The README's ``ACL SETUSER`` line, as arguments, with a password of the test's."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("ACL SETUSER repeat-hooks "))
    return [">pw" if word == ">PASSWORD" else word for word in line.split()[2:]]


def cluster_extra() -> list[str]:
    """What the README adds for a Redis Cluster: ``and on a Redis Cluster also `+cluster|slots +command```."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"on a Redis Cluster also `([^`]+)`", readme)
    assert found is not None
    return found[1].split()


async def guarded_as(url: str) -> list[str | None]:
    store = RedisStore.from_url(url, prefix="repeat-hooks:")
    try:
        decided = [await store.update(f"acl-{n % 7}", track) for n in range(21)]
        assert await store.load("acl-0") is not None
        return decided
    finally:
        await store.aclose()


async def test_the_readmes_acl_is_all_the_store_needs(redis_server: RedisServer) -> None:
    redis_command(redis_server.port, "ACL", "SETUSER", *readme_acl())
    url = f"redis://repeat-hooks:pw@127.0.0.1:{redis_server.port}/0"
    try:
        assert await guarded_as(url) == [None] * 14 + ["repeat"] * 7
        redis_command(redis_server.port, "ACL", "SETUSER", "repeat-hooks", "-pexpire")
        with pytest.raises(StoreUnavailable, match="command"):  # one command fewer fails: the list is no longer
            await guarded_as(url)
    finally:
        redis_command(redis_server.port, "ACL", "DELUSER", "repeat-hooks")


async def test_the_readmes_acl_with_the_cluster_commands_is_all_a_cluster_needs(redis_cluster: ClusterServers) -> None:
    user = readme_acl()
    for node in redis_cluster.nodes:
        redis_command(node.port, "ACL", "SETUSER", *user, *cluster_extra())
    url = f"redis://repeat-hooks:pw@127.0.0.1:{redis_cluster.nodes[0].port}/0"
    try:
        assert await guarded_as(url) == [None] * 14 + ["repeat"] * 7
        for node in redis_cluster.nodes:
            redis_command(node.port, "ACL", "SETUSER", "repeat-hooks", "-command")
        with pytest.raises(StoreUnavailable, match="'command' command"):
            await guarded_as(url)
    finally:
        for node in redis_cluster.nodes:
            redis_command(node.port, "ACL", "DELUSER", "repeat-hooks")


# -- what a review found: retries that must not wait past the timeout, a cluster bootstrapped from every node ---


async def test_a_hung_cluster_node_is_an_outage_after_one_timeout(redis_cluster: ClusterServers) -> None:
    import os
    import signal

    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    store = RedisStore.from_url(redis_cluster.url, prefix=prefix, timeout=0.5)
    key = next(f"s{n}" for n in range(100) if node_of(redis_cluster, f"{prefix}s{n}") == 1)
    node = redis_cluster.nodes[1]
    assert node.pid is not None
    try:
        await store.update(key, track)  # a cluster client now, warm
        os.kill(node.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="Timeout"):
            await store.update(key, track)
        assert time.monotonic() - started < 1.2  # one timeout, not one per retry of the cluster client's and ours
        assert store.late_timeouts == 0
    finally:
        os.kill(node.pid, signal.SIGCONT)
        await store.aclose()


def test_a_new_event_loop_finds_the_cluster_though_the_urls_node_is_down(redis_cluster: ClusterServers) -> None:
    """A sync hook's loop made after the URL's node stopped answering: its cluster client starts from every node the
    first one found, not from the URL's alone. (The node named is the second: redis-py reads the command table
    from the cluster's first primary, so that one must answer whatever the URL.)"""
    import os
    import signal
    import threading

    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    named = redis_cluster.nodes[1]
    store = RedisStore.from_url(named.url, prefix=prefix, timeout=0.5)
    key = next(f"s{n}" for n in range(100) if node_of(redis_cluster, f"{prefix}s{n}") == 2)
    assert named.pid is not None
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(store.update(key, track)) is None  # switched to a cluster client here
        os.kill(named.pid, signal.SIGSTOP)
        decided: list[Any] = []
        thread = threading.Thread(target=lambda: decided.append(asyncio.run(store.update(key, track))))
        thread.start()
        thread.join(30)
        assert decided == [None]  # the second call: allowed, decided on the third node
        fresh = RedisStore.from_url(named.url, prefix=prefix, timeout=0.5)  # a new store knows only the URL's node
        with pytest.raises(StoreUnavailable, match="Timeout"):
            loop.run_until_complete(fresh.update(key, track))
        loop.run_until_complete(fresh.aclose())
    finally:
        os.kill(named.pid, signal.SIGCONT)
        loop.run_until_complete(store.aclose())
        loop.close()


async def test_a_hung_sentinel_costs_one_timeout_and_aclose_closes_the_sentinels(
    redis_sentinel: RedisSentinel, hung_redis: HungRedis
) -> None:
    url = f"redis+sentinel://127.0.0.1:{hung_redis.port},127.0.0.1:{redis_sentinel.port}/mymaster"
    store = RedisStore.from_url(url, prefix="test:", timeout=0.3)
    started = time.monotonic()
    assert await store.update("s", track) is None
    assert time.monotonic() - started < 1.5  # the hung one once (0.3 s), then the live one
    assert len(clients_of(redis_sentinel.port)) >= 2  # the store's, and the one asking
    await store.aclose()
    deadline = time.monotonic() + 5
    while len(clients_of(redis_sentinel.port)) > 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(clients_of(redis_sentinel.port)) == 1  # only the one asking: the store's went with aclose


def clients_of(port: int) -> list[str]:
    listed = redis_command(port, "CLIENT", "LIST")
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    return [line for line in text.splitlines() if line.strip()]
