"""Round trips and latency of one guard decision through ``RedisStore``, next to a bare GET + SET.

Starts its own ``redis-server`` on a free loopback port (no persistence) and stops it by its PID.
Every scenario makes the same decision, ``policy.decide_tool_call`` on one session, uncontended:

- ``GET+SET`` (baseline, not atomic): GET the state, decide, SET EX it back.
- ``WATCH/MULTI``: the textbook optimistic transaction (WATCH, GET, then MULTI/SET EX/EXEC pipelined).
- ``RedisStore``: this store wrote the session last (the usual case: one process serves the session).
- ``RedisStore, 2 stores taking turns``: as when every hook call lands on another worker.
- ``RedisStore, cache_size=0``: no local memory of the session.
- ``RedisStore, 10 parallel calls``: ten decisions of one session in flight at once (a group commit).

Round trips are counted at the socket (each ``send_packed_command`` of redis-py is one request; a
pipeline's commands go in one), and the commands themselves are listed as the server's MONITOR saw
them (commands run inside the Lua scripts left out). Latency:
rounds of N decisions per scenario, interleaved, for a small state and for a full one (256 remembered
deliveries, the most a state keeps; ~20 KB of JSON); the figures are medians over rounds, and the ratio is the
median of the per-round ratios to the baseline, so a noisy machine moves both sides alike.

``--against REV`` then measures this tree against the core of git revision ``REV`` (its ``src/repeat_hooks``
imported as ``repeat_hooks_base``), the same decisions through each one's ``RedisStore``, interleaved rounds
in one process: what a change costs per decision, without trusting two runs on a busy machine.

    .venv/bin/python bench/redis_roundtrips.py [--against HEAD]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import io
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from redis.asyncio import Connection, Redis

from repeat_hooks import GuardState, Policy, ToolCall
from repeat_hooks.stores.redis import RedisStore

ROUNDS = 7
DECISIONS = 200
POLICY = Policy(max_calls=1000)
TTL = 3600


class CountingConnection(Connection):
    """A redis-py connection that counts requests sent: one per round trip."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


@contextmanager
def redis_server() -> Iterator[int]:
    """A throwaway ``redis-server`` on a free loopback port; stopped by its PID on the way out."""
    binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        sys.exit("bench/redis_roundtrips.py: redis-server not found (apt-get install redis-server)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        process = subprocess.Popen(
            [*argv, "--dir", directory], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 10
            while not _pong(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    sys.exit("bench/redis_roundtrips.py: redis-server did not start")
                time.sleep(0.02)
            yield port
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def decision(index: int, with_ids: bool) -> Callable[[GuardState], object]:
    call = ToolCall(f"tool{index % 5}", {"q": index % 40}, call_id=f"c{index}" if with_ids else None)
    return lambda state: POLICY.decide_tool_call(state, call)


class Scenario:
    """A way to make decisions on one session; ``run(n)`` makes ``n`` of them, one after the other."""

    name = ""
    parallel = 1

    async def decide(self, change: Callable[[GuardState], object]) -> object:
        raise NotImplementedError

    async def run(self, first: int, count: int, with_ids: bool) -> None:
        if self.parallel == 1:
            for index in range(first, first + count):
                await self.decide(decision(index, with_ids))
            return
        for start in range(first, first + count, self.parallel):
            await asyncio.gather(*(self.decide(decision(i, with_ids)) for i in range(start, start + self.parallel)))

    async def close(self) -> None:
        pass


class GetSet(Scenario):
    name = "GET+SET (baseline, not atomic)"

    def __init__(self, url: str, key: str) -> None:
        self.client = Redis.from_url(url, connection_class=CountingConnection)
        self.key = key

    async def decide(self, change: Callable[[GuardState], object]) -> object:
        raw = await self.client.get(self.key)
        state = GuardState() if raw is None else GuardState.model_validate_json(raw)
        result = change(state)
        await self.client.set(self.key, state.model_dump_json(), ex=TTL)
        return result

    async def close(self) -> None:
        await self.client.aclose()


class WatchMulti(GetSet):
    name = "WATCH/MULTI (optimistic txn)"

    async def decide(self, change: Callable[[GuardState], object]) -> object:
        async with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(self.key)
                    raw = await pipe.get(self.key)
                    state = GuardState() if raw is None else GuardState.model_validate_json(raw)
                    result = change(state)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(self.key, state.model_dump_json(), ex=TTL)
                    await pipe.execute()
                    return result
                except Exception as error:  # WatchError: retry
                    if type(error).__name__ != "WatchError":
                        raise


class Store(Scenario):
    def __init__(self, name: str, url: str, prefix: str, stores: int = 1, parallel: int = 1, **options: Any) -> None:
        self.name = name
        self.parallel = parallel
        self.stores = [
            RedisStore.from_url(url, prefix=prefix, ttl=TTL, connection_class=CountingConnection, **options)
            for _ in range(stores)
        ]
        self.turn = 0

    async def decide(self, change: Callable[[GuardState], object]) -> object:
        self.turn += 1
        return await self.stores[self.turn % len(self.stores)].update("s", change)

    async def close(self) -> None:
        for store in self.stores:
            await store.aclose()


def scenarios(url: str, size: str) -> list[Scenario]:
    return [
        GetSet(url, f"bench-{size}-getset"),  # the baseline: first
        WatchMulti(url, f"bench-{size}-watch"),
        Store("RedisStore", url, f"bench-{size}-one:"),
        Store("RedisStore, 2 stores alternating", url, f"bench-{size}-two:", stores=2),
        Store("RedisStore, cache_size=0", url, f"bench-{size}-nocache:", cache_size=0),
        Store("RedisStore, 10 parallel calls", url, f"bench-{size}-par:", parallel=10),
    ]


class Monitor:
    """The commands clients send, as the server's MONITOR sees them (commands run by scripts left out)."""

    def __init__(self, url: str) -> None:
        self.client = Redis.from_url(url)
        self.seen: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Monitor:
        ready = asyncio.Event()

        async def listen() -> None:
            async with self.client.monitor() as monitor:
                ready.set()
                while True:
                    command = await monitor.next_command()
                    if command["client_type"] != "lua":
                        self.seen.append(command["command"].split()[0].upper())

        self.task = asyncio.create_task(listen())
        await asyncio.wait_for(ready.wait(), 5)
        await asyncio.sleep(0.05)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.sleep(0.1)  # let the last lines arrive
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.client.aclose()

    def per_decision(self, decisions: int) -> str:
        """``EVALSHA`` or ``HMGET + EVALSHA``: what one decision sent, on average (PINGs left out)."""
        counts = Counter(name for name in self.seen if name not in ("PING", "MONITOR"))
        return " + ".join(f"{n / decisions:.2g} {name}" if n != decisions else name for name, n in counts.items())


async def measure(url: str, size: str, with_ids: bool) -> None:
    runs = scenarios(url, size)
    # Warm up: connect, load scripts, fill the state (300 decisions: 256 deliveries kept when with_ids).
    for scenario in runs:
        await scenario.run(0, 300, with_ids)
    trips: dict[str, float] = {}
    commands: dict[str, str] = {}
    for scenario in runs:
        async with Monitor(url) as monitor:
            sent = CountingConnection.sent
            await scenario.run(1000, 100, with_ids)
            trips[scenario.name] = (CountingConnection.sent - sent) / 100
        commands[scenario.name] = monitor.per_decision(100)
    micros: dict[str, list[float]] = {scenario.name: [] for scenario in runs}
    ratios: dict[str, list[float]] = {scenario.name: [] for scenario in runs}
    first = 2000
    for round_ in range(ROUNDS):
        order = runs if round_ % 2 == 0 else runs[::-1]
        took: dict[str, float] = {}
        for scenario in order:
            started = time.perf_counter()
            await scenario.run(first, DECISIONS, with_ids)
            took[scenario.name] = (time.perf_counter() - started) / DECISIONS * 1e6
            first += DECISIONS
        baseline = took[runs[0].name]
        for name, value in took.items():
            micros[name].append(value)
            ratios[name].append(value / baseline)
    state = await runs[2].stores[0].load("s")  # type: ignore[attr-defined]
    size_bytes = len(state.model_dump_json()) if state else 0
    print(f"\n{size} state ({size_bytes:,} bytes of JSON), {ROUNDS} rounds x {DECISIONS} decisions, uncontended")
    print(f"{'scenario':36} {'round trips':>11} {'us/decision':>12} {'vs GET+SET':>11}  commands sent (MONITOR)")
    for scenario in runs:
        name = scenario.name
        print(
            f"{name:36} {trips[name]:11.2f} {statistics.median(micros[name]):12.0f} "
            f"{statistics.median(ratios[name]):10.2f}x  {commands[name]}"
        )
    for scenario in runs:
        await scenario.close()


def base_core(revision: str, directory: str) -> ModuleType:
    """The core of git revision ``revision``, imported as ``repeat_hooks_base`` (from ``directory``)."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", revision, "src/repeat_hooks"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    os.rename(os.path.join(directory, "src", "repeat_hooks"), os.path.join(directory, "repeat_hooks_base"))
    sys.path.insert(0, directory)
    importlib.import_module("repeat_hooks_base.redis")
    return importlib.import_module("repeat_hooks_base")


def core_run(core: Any, store: Any) -> Callable[[int, int, bool], Any]:
    """``run(first, count, with_ids)``: the decisions of ``Scenario.run``, through ``core``'s policy and ``store``."""
    policy = core.Policy(max_calls=1000)

    async def run(first: int, count: int, with_ids: bool) -> None:
        for index in range(first, first + count):
            call = core.ToolCall(f"tool{index % 5}", {"q": index % 40}, call_id=f"c{index}" if with_ids else None)
            await store(index).update("s", lambda state, call=call: policy.decide_tool_call(state, call))

    return run


async def compare(url: str, size: str, with_ids: bool, revision: str, base: ModuleType) -> None:
    """This tree's ``RedisStore`` against ``base``'s, three layouts, interleaved rounds; prints the ratios."""
    layouts = {
        "RedisStore": {},
        "RedisStore, 2 stores alternating": {"n": 2},
        "RedisStore, cache_size=0": {"cache_size": 0},
    }
    cores = {revision: base, "this tree": sys.modules["repeat_hooks"]}
    runs: dict[tuple[str, str], Callable[[int, int, bool], Any]] = {}
    stores: list[Any] = []
    for layout, options in layouts.items():
        for label, core in cores.items():
            count = int(options.get("n", 1))
            made = [
                core.redis.RedisStore.from_url(
                    url, prefix=f"vs-{size}-{label}-{layout}:", ttl=TTL, cache_size=options.get("cache_size", 1024)
                )
                for _ in range(count)
            ]
            stores += made
            runs[layout, label] = core_run(core, lambda index, made=made: made[index % len(made)])
    for run in runs.values():
        await run(0, 300, with_ids)
    micros: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    first = 2000
    rounds, decisions = 4 * ROUNDS, DECISIONS // 2  # shorter rounds, more of them: steadier medians
    for round_ in range(rounds):
        for key in list(runs) if round_ % 2 == 0 else list(runs)[::-1]:
            started = time.perf_counter()
            await runs[key](first, decisions, with_ids)
            micros[key].append((time.perf_counter() - started) / decisions * 1e6)
            first += decisions
    print(f"\n{size} state: this tree against {revision}, {rounds} rounds x {decisions} decisions, interleaved")
    print(f"{'scenario':36} {revision + ' us':>12} {'this tree us':>13} {'ratio':>7}")
    for layout in layouts:
        then, now = micros[layout, revision], micros[layout, "this tree"]
        ratio = statistics.median(b / a for a, b in zip(then, now, strict=True))
        print(f"{layout:36} {statistics.median(then):12.0f} {statistics.median(now):13.0f} {ratio:6.2f}x")
    for store in stores:
        await store.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--against", metavar="REV", help="also measure this tree against git revision REV's core")
    revision = parser.parse_args().against
    with redis_server() as port, tempfile.TemporaryDirectory() as directory:
        url = f"redis://127.0.0.1:{port}/0"
        print(f"redis-server on 127.0.0.1:{port}; Python {sys.version.split()[0]}")
        await measure(url, "small", with_ids=False)
        await measure(url, "full", with_ids=True)
        if revision is not None:
            base = base_core(revision, directory)
            await compare(url, "small", False, revision, base)
            await compare(url, "full", True, revision, base)


if __name__ == "__main__":
    asyncio.run(main())
