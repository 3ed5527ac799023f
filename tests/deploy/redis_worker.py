"""One worker process of the Redis contention tests: decides its share of a ``Workload`` on one session.

``python redis_worker.py CONFIG_JSON``: connects, prints ``ready``, waits for a line on stdin (the start
line, so that all workers begin together), decides, then prints one JSON line: the decisions (refusal
texts or ``null``), and the conflicts and leases its store saw. The test harness and this worker share
``Workload`` and ``CONTENDED_POLICY`` (the test imports this file), so both decide the same calls.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis

from repeat_hooks import GuardState, Policy, Refusal, ToolCall
from repeat_hooks.stores.redis import RedisStore

T = TypeVar("T")

TURN = "turn-1"
# Refusal texts carry the call's number, so the multiset of refusals shows whether two decisions ever
# got the same count (a lost update) or one was skipped.
CONTENDED_POLICY = Policy(max_calls=180, limits={"tool0": 5, "tool1": 150}, refusal_message="{tool}#{count}/{limit}")


@dataclass(frozen=True)
class Workload:
    """``processes`` processes deciding ``decisions`` tool calls each on one session."""

    processes: int
    decisions: int
    concurrent: bool = True
    """All of a process's decisions at once (one asyncio task each), or one after the other."""
    with_ids: bool = True
    """Give every call a unique ``call_id`` (the state then keeps MAX_DELIVERIES deliveries)."""
    naive: bool = False
    """Use ``GetThenSetStore`` (no atomicity) instead of ``RedisStore``: the harness must catch it."""

    def calls(self, process: int) -> list[ToolCall]:
        """Process ``process``'s share: 7 tools x 3 argument values, round robin."""
        calls = []
        for index in range(self.decisions):
            number = process * self.decisions + index
            call_id = f"p{process}-{index}" if self.with_ids else None
            calls.append(ToolCall(f"tool{number % 7}", {"city": number % 3}, call_id=call_id))
        return calls

    def reference(self) -> tuple[list[str | None], GuardState]:
        """The same decisions, one after another, in one process, on one ``GuardState``."""
        state = GuardState()  # what a MemoryStore does, one decision after the other
        decisions = []
        for process in range(self.processes):
            for call in self.calls(process):
                refusal = CONTENDED_POLICY.decide_tool_call(state, call, turn_id=TURN)
                decisions.append(None if refusal is None else refusal.message)
        return decisions, state

    def argv(self, url: str, prefix: str, process: int) -> list[str]:
        """The command line of worker ``process``."""
        config = {**asdict(self), "url": url, "prefix": prefix, "process": process}
        return [sys.executable, __file__, json.dumps(config)]


class GetThenSetStore:
    """A store without atomicity (GET, then SET): what the harness must catch."""

    def __init__(self, url: str, prefix: str) -> None:
        self.client = Redis.from_url(url)
        self.prefix = prefix

    async def load(self, key: str) -> GuardState | None:
        raw = await self.client.get(self.prefix + key)
        return None if raw is None else GuardState.model_validate_json(raw)

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        state = await self.load(key) or GuardState()
        result = change(state)
        await self.client.set(self.prefix + key, state.model_dump_json())
        return result

    async def aclose(self) -> None:
        await self.client.aclose()


async def work(config: dict[str, Any]) -> dict[str, Any]:
    url, prefix, process = config.pop("url"), config.pop("prefix"), config.pop("process")
    workload = Workload(**config)
    store: Any = GetThenSetStore(url, prefix) if workload.naive else RedisStore.from_url(url, prefix=prefix)
    try:
        await store.load("s")  # connected before the start line
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)

        async def decide(call: ToolCall) -> str | None:
            def change(state: GuardState) -> Refusal | None:
                return CONTENDED_POLICY.decide_tool_call(state, call, turn_id=TURN)

            refusal = await store.update("s", change)
            return None if refusal is None else refusal.message

        calls = workload.calls(process)
        if workload.concurrent:
            decisions = list(await asyncio.gather(*(decide(call) for call in calls)))
        else:
            decisions = [await decide(call) for call in calls]
        return {
            "process": process,
            "decisions": decisions,
            "conflicts": getattr(store, "conflicts", 0),
            "leases": getattr(store, "leases", 0),
        }
    finally:
        await store.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(work(json.loads(sys.argv[1])))), flush=True)
