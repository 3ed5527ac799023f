"""The guard's overhead inside the Mistral Agents SDK's own loop.

A scripted model makes 20 tool calls a turn (20 distinct parcels, so the guard refuses none), then
answers. The same turn runs interleaved, each on a fresh session, three ways: without hooks, with a
hook that does nothing at the same hook points the guard takes, and with the guard (seed 004's
policy under the default count="progress": pre_tool_call, post_tool_call and pre_llm_call). It
prints the median time of each and the median per-round ratios: guard / no hook (what a user pays),
and guard / empty hook (the guard's own work; the rest is rc11's price for running any hook point).
Target: <= 1.03x.

    .venv/bin/python bench/mistral_overhead.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import os
import statistics
import time
from typing import Any, cast

os.environ.pop("MISTRAL_API_KEY", None)

from interleave import ainterleave, median_ratio
from mistralai.agents import agents
from mistralai.vibe.harness.core.protocol import HookToolCall, ProvidedToolCall, ToolSuccessResult
from mistralai.vibe.harness.runtime.capabilities import (
    PostToolCallHookInvocation,
    PreLlmCallHookInvocation,
    PreToolCallHookInvocation,
)
from mistralai.vibe_agents.sdk.authoring.contracts import HookContext, HookSession
from repeat_hooks_mistral import Policy, RepeatGuardHook
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, calls_this_turn, run_turn

CALLS_PER_TURN = 20


@agents.tool
def track_parcel(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan of a parcel."""
    return {"tracking_number": tracking_number, "status": "in transit"}


class BenchGuard(RepeatGuardHook):
    policy = Policy(match="tool", max_calls=CALLS_PER_TURN, max_refusals=3)


class EmptyHook(agents.Hook):
    """Does nothing, at the same hook points as BenchGuard."""

    async def pre_tool_call(self, ctx: Any, call: Any) -> Any:
        return agents.hook.PreToolCallHookContinue(effective_arguments=call.tool_call.call.arguments)

    async def post_tool_call(self, ctx: Any, result: Any) -> Any:
        return agents.hook.PostToolCallHookContinue(tool_result=result.tool_result)

    async def pre_llm_call(self, ctx: Any, invocation: Any) -> Any:
        return agents.hook.PreLlmCallHookContinue()


def twenty_parcels(request: Any) -> str | ToolUse:
    done = calls_this_turn(request)
    if done < CALLS_PER_TURN:
        return ToolUse("track_parcel", {"tracking_number": f"FR-{done}"})
    return "All 20 parcels are in transit."


def make_agent(model: ScriptedModel, hooks: list[agents.Hook]) -> agents.Agent:
    return agents.Agent(
        model=model.name,
        completion=model.completion(),
        name="bench",
        builtins=agents.Builtins.none(),
        max_iterations=CALLS_PER_TURN + 5,
        harness=agents.Harness(tools=[track_parcel], hooks=hooks),
    )


async def one_turn(agent: agents.Agent) -> tuple[float, float]:
    """One turn on a fresh session: its CPU seconds (all threads of this process) and wall seconds."""
    async with await agent.create_session() as session:
        gc.collect()
        cpu, wall = time.process_time(), time.perf_counter()
        result = await run_turn(session, "Check my 20 parcels.")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if result.text != "All 20 parcels are in transit.":
        raise RuntimeError(f"the turn did not finish as scripted: {result}")
    return cpu, wall


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    model = ScriptedModel(twenty_parcels)
    variants = {
        "no hook": make_agent(model, []),
        "empty hook": make_agent(model, [EmptyHook()]),
        "guard": make_agent(model, [BenchGuard()]),
    }
    samples = {name: functools.partial(one_turn, agent) for name, agent in variants.items()}
    figures = await ainterleave(samples, args.rounds, warmup=3)  # rotating which runs first
    cpu = {name: [seconds for seconds, _ in rows] for name, rows in figures.items()}
    wall = {name: [elapsed for _, elapsed in rows] for name, rows in figures.items()}
    print(f"mistral overhead: {CALLS_PER_TURN} tool calls a turn, {args.rounds} interleaved rounds (medians)")
    for name in variants:
        print(
            f"  {name:10}  {statistics.median(cpu[name]) * 1000:6.1f} ms CPU a turn"
            f"   {statistics.median(wall[name]) * 1000:6.1f} ms wall"
        )
    for label, times in (("CPU", cpu), ("wall", wall)):
        user = median_ratio(times["guard"], times["no hook"])
        own = median_ratio(times["guard"], times["empty hook"])
        print(f"  {label:4} guard / no hook: {user:.3f}x   guard / empty hook: {own:.3f}x")
    print("  guard / empty hook is the guard's own work (target <= 1.03x); the rest of guard / no hook is")
    print("  what mistralai-agents 1.1 charges for running any hook point (a loop step each).")
    per_call = await hook_call_cost()
    turn = statistics.median(cpu["empty hook"])
    hook_calls = 3 * CALLS_PER_TURN + 1  # 20 pre_tool_call + 20 post_tool_call + 21 pre_llm_call
    print(
        f"  the guard's methods alone, called directly: {per_call * 1e6:.1f} us more than the empty hook's a call;"
        f" x{hook_calls} calls = {per_call * hook_calls / turn * 100:.3f}% of a turn"
    )


async def hook_call_cost(repeat: int = 20_000) -> float:
    """Seconds the guard's pre_tool_call + post_tool_call + pre_llm_call take over the empty hook's, per hook call."""
    ctx = HookContext(session=HookSession(id="bench", turn_id="turn"), harness=cast(Any, None))
    call = ProvidedToolCall(group_name="client", tool_name="track_parcel", arguments={"tracking_number": "FR-1"})
    tool_call = HookToolCall(action_id="x", call_id="c", call=call)
    pre_tool = PreToolCallHookInvocation(action_id="a", turn_id="turn", binding_id="b", tool_call=tool_call)
    scan = ToolSuccessResult(structured_content={"tracking_number": "FR-1", "status": "in transit"})
    post_tool = PostToolCallHookInvocation(
        action_id="p", turn_id="turn", binding_id="b", tool_call=tool_call, tool_result=scan
    )
    pre_llm = PreLlmCallHookInvocation(action_id="l", turn_id="turn", binding_id="b")

    class Unlimited(BenchGuard):
        policy = Policy(match="tool", max_calls=10**9, max_refusals=3)

    timings: dict[str, float] = {}
    for hook in (EmptyHook(), Unlimited(), EmptyHook(), Unlimited()):
        started = time.perf_counter()
        for _ in range(repeat):
            await hook.pre_tool_call(ctx, pre_tool)
            await hook.post_tool_call(ctx, post_tool)
            await hook.pre_llm_call(ctx, pre_llm)
        timings[type(hook).__name__] = (time.perf_counter() - started) / (3 * repeat)
    return timings["Unlimited"] - timings["EmptyHook"]


if __name__ == "__main__":
    asyncio.run(main())
