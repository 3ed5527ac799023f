"""What the guard adds inside ``Runner.run`` of the OpenAI Agents SDK, measured side by side.

One turn: a scripted model asks for 20 tool calls, one per response (all different, so none is
refused), then answers: 21 model calls, 20 tool runs. The same turn runs on the plain agent and on
``guard_agent(agent)`` with ``context=GuardState()``. The two are
interleaved (alternating which goes first: ``interleave.py``), many rounds; the figure is the median of the per-round
ratios, so a noisy machine moves both sides alike. Times are this process's CPU time
(``time.process_time``): with a scripted model the loop is CPU-bound, and other processes on a
loaded machine then do not count. Target: at most 1.03x.

Two more figures do not depend on a noisy machine: the adapter's own work in one such turn (20 cycles
of ``on_llm_end`` deciding a response's call, its input guardrail, its output guardrail and ``EndTurn``,
plus 21 ``on_llm_start``), timed alone (best of several repeats), over the fastest plain turn; and the
Python function calls a turn makes (``cProfile``), guarded over plain, which counts the SDK's extra
guardrail plumbing too.

    .venv/bin/python bench/openai_overhead.py
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import gc
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

from agents import (
    Agent,
    AgentHookContext,
    FunctionTool,
    FunctionToolResult,
    ModelResponse,
    RunContextWrapper,
    Runner,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.tool_context import ToolContext
from interleave import ainterleave, median_ratio
from repeat_hooks_openai_agents import GuardState, RepeatGuardHooks, guard_agent
from repeat_hooks_openai_agents.guard import EndTurn
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

T = TypeVar("T")
CALLS_PER_TURN = 20
TURNS_PER_SAMPLE = 5
ROUNDS = 31
TARGET = 1.03


@function_tool
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


def twenty_parcels(n: int, model: ScriptedModel) -> list[Any]:
    if n % (CALLS_PER_TURN + 1) == CALLS_PER_TURN:
        return [message("All parcels are in transit.")]
    return [tool_call("track_parcel", {"tracking_number": f"FR-{n}"}, model.new_call_id())]


def plain() -> Callable[[], Awaitable[None]]:
    agent = Agent(name="parcel-tracker", model=ScriptedModel(then=twenty_parcels), tools=[track_parcel])

    async def turn() -> None:
        await Runner.run(agent, "Track my 20 parcels", max_turns=50)

    return turn


def guarded() -> Callable[[], Awaitable[None]]:
    agent = guard_agent(Agent(name="parcel-tracker", model=ScriptedModel(then=twenty_parcels), tools=[track_parcel]))

    async def turn() -> None:
        state = GuardState()
        result = await Runner.run(agent, "Track my 20 parcels", context=state, max_turns=50)
        assert state.turn.refusals == 0 and result.final_output == "All parcels are in transit."

    return turn


async def sample(turn: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    started = time.process_time()
    for _ in range(TURNS_PER_SAMPLE):
        await turn()
    return time.process_time() - started


def best(function: Callable[[], object], number: int = 2000, repeat: int = 7) -> float:
    """Seconds one call of ``function`` takes, best of ``repeat`` timings of ``number`` calls."""
    timings = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(number):
            function()
        timings.append((time.process_time() - started) / number)
    return min(timings)


def adapter_seconds_per_turn() -> float:
    """The adapter's own time in one 20-call turn, from its entry points timed alone."""
    agent = guard_agent(Agent(name="parcel-tracker", tools=[track_parcel]), max_calls=10**9)  # refuses none
    tool = agent.tools[0]
    assert isinstance(tool, FunctionTool) and tool.tool_input_guardrails and tool.tool_output_guardrails
    refuse, record = tool.tool_input_guardrails[-1], tool.tool_output_guardrails[-1]
    behavior, hooks = agent.tool_use_behavior, agent.hooks
    assert isinstance(behavior, EndTurn) and isinstance(hooks, RepeatGuardHooks)
    state = GuardState()
    usage = Usage()  # one run: every context of the turn shares the run's Usage, as in the SDK
    wrapper = RunContextWrapper(context=state, usage=usage)
    numbers = iter(range(10**9))

    def one_call() -> None:
        """One response with one call: decided with its batch, let through, recorded, then EndTurn."""
        n = next(numbers)
        arguments = f'{{"tracking_number": "FR-{n}"}}'
        call = tool_call("track_parcel", arguments, f"call_{n}")
        response = ModelResponse(output=[call], usage=Usage(requests=1, input_tokens=100), response_id=None)
        run_now(hooks.on_llm_end(wrapper, agent, response))
        context = ToolContext(
            state, usage=usage, tool_name="track_parcel", tool_call_id=f"call_{n}", tool_arguments=arguments
        )
        run_now(refuse.guardrail_function(ToolInputGuardrailData(context, agent)))  # async: they may await a store
        run_now(record.guardrail_function(ToolOutputGuardrailData(context, agent, "ok")))
        run_now(behavior(wrapper, results))

    def making_a_context() -> None:  # the SDK's cost, paid with or without the guard
        n = next(numbers)
        call = tool_call("track_parcel", "{}", f"call_{n}")
        ModelResponse(output=[call], usage=Usage(requests=1, input_tokens=100), response_id=None)
        ToolContext(state, usage=usage, tool_name="track_parcel", tool_call_id=f"call_{n}", tool_arguments="{}")

    results = [FunctionToolResult(tool=tool, output="in transit", run_item=None)]
    run_now(hooks.on_start(AgentHookContext(context=state, usage=usage), agent))
    per_call = best(one_call) - best(making_a_context)
    llm_start = best(lambda: run_now(hooks.on_llm_start(wrapper, agent, None, [])))
    return CALLS_PER_TURN * per_call + (CALLS_PER_TURN + 1) * llm_start


def run_now(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends, without an event loop (the SDK awaits it in its own)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    raise RuntimeError("suspended")


def function_calls_per_turn(make: Callable[[], Callable[[], Awaitable[None]]], turns: int = 3) -> float:
    """Python function calls one turn makes (deterministic: no clock involved)."""
    turn = make()

    async def run() -> None:
        for _ in range(turns):
            await turn()

    asyncio.run(run())  # warm up: first-use caches
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(run())
    profile.disable()
    return pstats.Stats(profile).total_calls / turns  # type: ignore[attr-defined,no-any-return]


def main() -> None:
    set_tracing_disabled(True)
    plain_calls, guarded_calls = function_calls_per_turn(plain), function_calls_per_turn(guarded)
    print(
        f"function calls a turn: plain {plain_calls:,.0f}, guarded {guarded_calls:,.0f} "
        f"= {guarded_calls / plain_calls:.4f}x"
    )
    own = adapter_seconds_per_turn()
    base_times, guarded_times, ratios = asyncio.run(interleaved())
    report(own, base_times, guarded_times, ratios)


async def interleaved() -> tuple[list[float], list[float], list[float]]:
    """Plain and guarded turns, alternately first (``interleave.py``): each plain sample's time, each guarded
    one's, and each round's ratio."""
    samples = {"plain": functools.partial(sample, plain()), "guarded": functools.partial(sample, guarded())}
    times = await ainterleave(samples, ROUNDS, warmup=3)
    base_times, guarded_times = times["plain"], times["guarded"]
    return base_times, guarded_times, [g / b for g, b in zip(guarded_times, base_times, strict=True)]


def report(own: float, base_times: list[float], guarded_times: list[float], ratios: list[float]) -> None:
    """Prints the figures."""
    ratio = median_ratio(guarded_times, base_times)
    per_turn = statistics.median(base_times) / TURNS_PER_SAMPLE
    added = (ratio - 1) * per_turn / CALLS_PER_TURN
    print(
        f"Runner.run, {CALLS_PER_TURN} tool calls a turn, {ROUNDS} interleaved rounds of {TURNS_PER_SAMPLE} turns: "
        f"median ratio guarded/plain = {ratio:.3f}x (target <= {TARGET}x); "
        f"plain turn {per_turn * 1000:.1f} ms, guard adds ~{added * 1e6:.0f} us per tool call"
    )
    quartiles = statistics.quantiles(ratios, n=4)
    print(
        f"ratio quartiles: {quartiles[0]:.3f} / {quartiles[1]:.3f} / {quartiles[2]:.3f} (the machine's noise); "
        f"fastest guarded / fastest plain sample = {min(guarded_times) / min(base_times):.3f}x"
    )
    fastest = min(base_times) / TURNS_PER_SAMPLE
    print(
        f"adapter's own work: {own * 1e6:.0f} us a turn ({own / CALLS_PER_TURN * 1e6:.1f} us per tool call) "
        f"= {1 + own / fastest:.4f}x the fastest plain turn ({fastest * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
