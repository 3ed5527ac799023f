"""What ``RepeatGuard`` adds per tool call inside LlamaIndex's agent loop, side by side with an empty hook of the
same kind.

One run: a scripted model (``repeat_hooks_llama_index.testing.Script``, LlamaIndex's ``MockFunctionCallingLLM`` at
the model seam) asks for 20 tool calls, one per response (all different, so none is refused), then answers: 21
model calls, 20 tool runs, on the real ``FunctionAgent`` workflow. The same run goes on a fresh agent (a fresh
conversation) with no hooks; with an empty hook of the guard's kind (``EmptyAgent``: a subclass whose ``take_step``
and ``handle_tool_call_results`` only call the agent's own, its tools wrapped in a ``FunctionTool`` that takes the
run's ``Context`` and only calls the tool: what LlamaIndex charges for such seams at all); and guarded by
``RepeatGuard()`` (the default ``Policy()``). Fresh agents, tools and call ids every run. They are interleaved
(rotating which goes first), many rounds; each figure is the median over the rounds of one side's CPU time per tool
call (``time.process_time``: with a scripted model the loop is CPU-bound). The guard's own cost is guarded minus
empty.

    .venv/bin/python bench/llama_index_overhead.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import warnings
from collections.abc import Sequence
from typing import Any

from interleave import cpu_seconds, loop_overhead
from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ToolCallResult
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import AsyncBaseTool, FunctionTool, ToolOutput
from llama_index.core.workflow import Context
from repeat_hooks_llama_index import RepeatGuard, stop_of
from repeat_hooks_llama_index.testing import Reply, Script, call

CALLS_PER_RUN = 20
RUNS_PER_SAMPLE = 3


async def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


class EmptyTool(FunctionTool):
    """A tool wrapper of the guard's kind that does nothing: it takes the run's Context and calls the tool."""

    def __init__(self, inner: FunctionTool) -> None:
        super().__init__(async_fn=self.acall, metadata=inner.metadata)
        self.requires_context, self.ctx_param_name, self.inner = True, "bench_ctx", inner

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        kwargs.pop("bench_ctx")
        return await self.inner.acall(**kwargs)


class EmptyAgent(FunctionAgent):
    """An agent subclass of the guard's kind whose overrides only call the agent's own."""

    async def take_step(
        self, ctx: Any, llm_input: list[ChatMessage], tools: Sequence[AsyncBaseTool], memory: BaseMemory
    ) -> AgentOutput:
        return await super().take_step(ctx, llm_input, tools, memory)

    async def handle_tool_call_results(self, ctx: Context, results: list[ToolCallResult], memory: BaseMemory) -> None:
        await super().handle_tool_call_results(ctx, results, memory)


def twenty_parcels(script: Script, messages: Sequence[ChatMessage]) -> Reply:
    step = sum(1 for message in messages if message.role == "assistant")
    if step >= CALLS_PER_RUN:
        return "All parcels are in transit."
    return [call("track_parcel", {"tracking_number": f"FR-{step}"})]


def make(kind: str) -> FunctionAgent:
    tool = FunctionTool.from_defaults(async_fn=track_parcel)
    llm = Script(then=twenty_parcels, record_requests=False).llm()
    if kind == "empty hooks":
        return EmptyAgent(name="tracker", llm=llm, tools=[EmptyTool(tool)], streaming=False)
    agent = FunctionAgent(name="tracker", llm=llm, tools=[tool], streaming=False)
    return RepeatGuard().agent(agent) if kind == "guarded" else agent


def sample(kind: str) -> float:
    """CPU seconds per tool call over ``RUNS_PER_SAMPLE`` runs, each on a fresh agent (a fresh conversation)."""
    agents = [make(kind) for _ in range(RUNS_PER_SAMPLE)]

    async def run() -> None:
        for agent in agents:
            output: AgentOutput = await agent.run(user_msg="Track my 20 parcels", max_iterations=100)
            assert output.response.content == "All parcels are in transit." and stop_of(output) is None

    return cpu_seconds(lambda: asyncio.run(run())) / (RUNS_PER_SAMPLE * CALLS_PER_RUN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")  # pydantic deprecation warnings the workflows runtime triggers
    loop_overhead(
        f"LlamaIndex FunctionAgent loop, {CALLS_PER_RUN} tool calls a run, {RUNS_PER_SAMPLE} runs a sample",
        sample,
        ["no hooks", "empty hooks", "guarded"],
        args.rounds,
    )


if __name__ == "__main__":
    main()
