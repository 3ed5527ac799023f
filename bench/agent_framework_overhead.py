"""What ``RepeatGuardMiddleware`` adds per tool call inside Agent Framework's agent loop, side by side with empty
middleware of the same kinds.

One run: a scripted model (``repeat_hooks_agent_framework.testing.ScriptedClient``, at the chat client's model
seam, layered as the shipped clients are) asks for 20 function calls, one per response (all different, so none is
refused), then answers: 21 model calls, 20 tool runs, on the real ``Agent`` and function-invocation loop, each run on
a fresh agent and session with fresh call ids. The same run goes with no middleware, with empty middleware of the
guard's shape (``Empty``: an agent middleware that puts an empty chat middleware and an empty function middleware
into each run, all three only calling ``call_next``: what Agent Framework charges for such middleware at all), and
with ``RepeatGuardMiddleware()`` (the default ``Policy()``, its state in the session). They are interleaved (rotating
which goes first), many rounds; each figure is the median over the rounds of one side's CPU time per tool call
(``time.process_time``: with a scripted model the loop is CPU-bound). The guard's own cost is guarded minus empty.

    .venv/bin/python bench/agent_framework_overhead.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent_framework import (
    Agent,
    AgentContext,
    AgentMiddleware,
    ChatContext,
    ChatMiddleware,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    tool,
)
from interleave import cpu_seconds, loop_overhead
from repeat_hooks_agent_framework import RepeatGuardMiddleware, stop_of
from repeat_hooks_agent_framework.testing import Reply, ScriptedClient, function_call

CALLS_PER_RUN = 20
RUNS_PER_SAMPLE = 3
Next = Callable[[], Awaitable[None]]


@tool
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


class EmptyChat(ChatMiddleware):
    async def process(self, context: ChatContext, call_next: Next) -> None:
        await call_next()


class EmptyFunction(FunctionMiddleware):
    async def process(self, context: FunctionInvocationContext, call_next: Next) -> None:
        await call_next()


class Empty(AgentMiddleware):
    """Middleware of the guard's shape that does nothing: one agent middleware bringing a chat and a function
    middleware into each run (fresh objects each run, as the guard's)."""

    async def process(self, context: AgentContext, call_next: Next) -> None:
        given = list(context.client_kwargs.get("middleware") or [])
        context.client_kwargs["middleware"] = [EmptyFunction(), EmptyChat(), *given]
        await call_next()


def twenty_parcels(client: ScriptedClient, messages: Sequence[Message]) -> Reply:
    step = sum(1 for message in messages if message.role == "assistant")
    if step >= CALLS_PER_RUN:
        return "All parcels are in transit."
    return [function_call("track_parcel", {"tracking_number": f"FR-{step}"})]


def make(kind: str) -> Agent[Any]:
    middleware: dict[str, list[Any]] = {
        "no middleware": [],
        "empty middleware": [Empty()],
        "guarded": [RepeatGuardMiddleware()],
    }
    return Agent(client=ScriptedClient(then=twenty_parcels), tools=[track_parcel], middleware=middleware[kind])


def sample(kind: str) -> float:
    """CPU seconds per tool call over ``RUNS_PER_SAMPLE`` runs, each on a fresh agent and session."""
    agents = [make(kind) for _ in range(RUNS_PER_SAMPLE)]

    async def runs() -> None:
        for agent in agents:
            response = await agent.run("Track my 20 parcels", session=agent.create_session())
            assert response.text == "All parcels are in transit." and stop_of(response) is None

    elapsed = cpu_seconds(lambda: asyncio.run(runs()))
    return elapsed / (RUNS_PER_SAMPLE * CALLS_PER_RUN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    loop_overhead(
        f"Agent Framework agent loop, {CALLS_PER_RUN} tool calls a run, {RUNS_PER_SAMPLE} runs a sample",
        sample,
        ["no middleware", "empty middleware", "guarded"],
        args.rounds,
    )


if __name__ == "__main__":
    main()
