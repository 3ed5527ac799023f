"""What ``RepeatGuard`` adds inside a pydantic-ai ``agent.run``, measured side by side.

One run: a scripted model asks for 20 tool calls, one per response (all different, so none is
refused), then answers: 21 model requests, 20 tool runs. The same run goes on the plain agent, on the
agent with an empty capability (``Nothing``: what pydantic-ai charges for having any capability at
all), and on the agent with ``capabilities=[RepeatGuard(Policy())]``. They are interleaved (rotating
which goes first), many rounds; the figures are the medians of the per-round ratios, so a noisy
machine moves all sides alike. Times are this process's CPU time (``time.process_time``): with a scripted model
the loop is CPU-bound, and other processes on a loaded machine then do not count. Target: at most
1.03x.

Two more figures do not depend on a noisy machine: the capability's own work in one such run (its
hooks called directly as the run calls them: ``for_run`` + ``before_run``; for each of the 20 responses
``before_model_request``, ``after_model_request`` (which decides the response's calls as one batch) and
``wrap_tool_execute``; the answer's two model hooks; minus the tool handlers) over the fastest
plain run; and the Python function calls a run makes (``cProfile``), guarded over plain, which counts
pydantic-ai's own hook dispatch too.

    .venv/bin/python bench/pydantic_ai_overhead.py
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
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from interleave import ainterleave, median_ratio
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage
from repeat_hooks_pydantic_ai import RepeatGuard, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, call

from repeat_hooks import Policy

T = TypeVar("T")
CALLS_PER_RUN = 20
RUNS_PER_SAMPLE = 5
ROUNDS = 31
TARGET = 1.03


async def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


def twenty_parcels(step: int) -> list[Any]:
    if step >= CALLS_PER_RUN:
        return [TextPart("All parcels are in transit.")]
    return [call("track_parcel", {"tracking_number": f"FR-{step}"}, step=step)]


@dataclass
class Nothing(AbstractCapability[Any]):
    """A capability with no hooks: the run pays pydantic-ai's capability plumbing and nothing else."""


def make(kind: str) -> Callable[[], Awaitable[None]]:
    choices: dict[str, list[AbstractCapability[Any]]] = {
        "plain": [],
        "nothing": [Nothing()],
        "guarded": [RepeatGuard(Policy())],
    }
    agent = Agent(ScriptedModel(twenty_parcels), tools=[track_parcel], capabilities=choices[kind])

    async def run() -> None:
        result = await agent.run("Track my 20 parcels")
        assert result.output == "All parcels are in transit." and stop_of(result) is None

    return run


async def sample(run: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    started = time.process_time()
    for _ in range(RUNS_PER_SAMPLE):
        await run()
    return time.process_time() - started


async def interleaved() -> dict[str, list[float]]:
    """Plain, empty-capability and guarded runs, rotating which goes first: each one's sample times."""
    runs = {kind: make(kind) for kind in ("plain", "nothing", "guarded")}
    return await ainterleave({kind: functools.partial(sample, run) for kind, run in runs.items()}, ROUNDS, warmup=3)


# -- the capability's own work, hook by hook ------------------------------------------------------------


@dataclass
class Capture(AbstractCapability[Any]):
    """Keeps a real run context and model request context from a run, to call the guard's hooks with."""

    seen: list[tuple[RunContext[Any], ModelRequestContext]] = field(default_factory=list)

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        self.seen.append((ctx, request_context))
        return request_context


def run_now(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends, without an event loop (pydantic-ai awaits it in its own)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    raise RuntimeError("suspended")


def best(function: Callable[[], object], number: int = 2000, repeat: int = 7) -> float:
    """Seconds one call of ``function`` takes, best of ``repeat`` timings of ``number`` calls."""
    timings = []
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(number):
            function()
        timings.append((time.process_time() - started) / number)
    return min(timings)


def own_seconds_per_run() -> float:
    """The capability's own time in one 20-call run: its hooks called directly, as the run calls them."""
    capture = Capture()
    Agent(ScriptedModel(twenty_parcels), tools=[track_parcel], capabilities=[capture]).run_sync("Track")
    ctx, request_context = capture.seen[0]
    guard = RepeatGuard(Policy())
    tool_def = ToolDefinition(name="track_parcel")
    usage = RequestUsage(input_tokens=100, output_tokens=20)
    answer = ModelResponse(parts=[TextPart("All parcels are in transit.")], usage=usage)
    parts = [
        ToolCallPart("track_parcel", {"tracking_number": f"FR-{n}"}, tool_call_id=f"call_{n}")
        for n in range(CALLS_PER_RUN)
    ]
    responses = [ModelResponse(parts=[part], usage=usage) for part in parts]

    async def handler(args: dict[str, Any]) -> str:
        return "in transit"

    def hooks() -> None:  # for_run, before_run; per response its two model hooks and its call; the answer
        run = run_now(guard.for_run(ctx))
        run_now(run.before_run(ctx))
        for part, response in zip(parts, responses, strict=True):
            run_now(run.before_model_request(ctx, request_context))
            run_now(run.after_model_request(ctx, request_context=request_context, response=response))
            run_now(run.wrap_tool_execute(ctx, call=part, tool_def=tool_def, args=part.args_as_dict(), handler=handler))
        run_now(run.before_model_request(ctx, request_context))
        run_now(run.after_model_request(ctx, request_context=request_context, response=answer))

    def handlers() -> None:  # the same tool calls, no guard: what ``hooks`` spends outside the guard
        for part in parts:
            run_now(handler(part.args_as_dict()))

    return best(hooks, number=100) - best(handlers, number=100)


def function_calls_per_run(kind: str, runs: int = 3) -> float:
    """Python function calls one run makes (deterministic: no clock involved)."""
    run = make(kind)

    async def go() -> None:
        for _ in range(runs):
            await run()

    asyncio.run(go())  # warm up: first-use caches
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(go())
    profile.disable()
    return pstats.Stats(profile).total_calls / runs  # type: ignore[attr-defined,no-any-return]


def main() -> None:
    calls = {kind: function_calls_per_run(kind) for kind in ("plain", "nothing", "guarded")}
    print(
        f"function calls a run: plain {calls['plain']:,.0f}, empty capability {calls['nothing']:,.0f}, "
        f"guarded {calls['guarded']:,.0f} = {calls['guarded'] / calls['plain']:.4f}x plain, "
        f"{calls['guarded'] / calls['nothing']:.4f}x the empty capability"
    )
    own = own_seconds_per_run()
    times = asyncio.run(interleaved())
    plain, nothing, guarded = times["plain"], times["nothing"], times["guarded"]
    ratio = median_ratio(guarded, plain)
    over_nothing = median_ratio(guarded, nothing)
    nothing_ratio = median_ratio(nothing, plain)
    per_run = statistics.median(plain) / RUNS_PER_SAMPLE
    print(
        f"agent.run, {CALLS_PER_RUN} tool calls a run, {ROUNDS} interleaved rounds of {RUNS_PER_SAMPLE} runs "
        f"(plain run {per_run * 1000:.1f} ms): median ratios guarded/plain = {ratio:.3f}x (target <= {TARGET}x), "
        f"empty capability/plain = {nothing_ratio:.3f}x, guarded/empty capability = {over_nothing:.3f}x"
    )
    quartiles = statistics.quantiles([g / p for g, p in zip(guarded, plain, strict=True)], n=4)
    print(
        f"guarded/plain quartiles: {quartiles[0]:.3f} / {quartiles[1]:.3f} / {quartiles[2]:.3f} (the machine's noise); "
        f"fastest guarded / fastest plain sample = {min(guarded) / min(plain):.3f}x"
    )
    fastest = min(plain) / RUNS_PER_SAMPLE
    print(
        f"capability's own work: {own * 1e6:.0f} us a run ({own / CALLS_PER_RUN * 1e6:.1f} us per tool call) "
        f"= {1 + own / fastest:.4f}x the fastest plain run ({fastest * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
