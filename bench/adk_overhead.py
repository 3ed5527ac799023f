"""What the guard adds inside one Google ADK invocation, measured side by side.

One invocation: a scripted ``BaseLlm`` asks for 20 tool calls, one per response (all different, so
none is refused), then answers: 21 model calls, 20 tool runs, on the real ``Runner`` with an
``InMemorySessionService`` (a fresh session each time, so the history does not grow). The same
invocation runs on a plain runner and on one with ``RepeatGuardPlugin()`` (``Policy()``). The two are
interleaved (alternating which goes first), many rounds; the figure is the median of the per-round
ratios, so a noisy machine moves both sides alike. Times are this process's CPU time
(``time.process_time``): with a scripted model the loop is CPU-bound. Target: at most 1.03x.

Two more figures depend less on a noisy machine: the Python function calls an invocation makes
(``cProfile``), guarded over plain; and the guard's own CPU time inside its callbacks (the core's
rules, reading and writing the session state), measured around each callback during the guarded
invocations, over the fastest plain invocation. What is left of the ratio is ADK carrying the
state delta on its events (validation, copies, telemetry) and the machine's noise.

    .venv/bin/python bench/adk_overhead.py
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import logging
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.genai import types
from repeat_hooks_google_adk import RepeatGuardPlugin
from repeat_hooks_google_adk.testing import Reply, ScriptedLlm, function_call

CALLS_PER_TURN = 20
TURNS_PER_SAMPLE = 3
ROUNDS = 21
TARGET = 1.03
MESSAGE = types.Content(role="user", parts=[types.Part(text="Track my 20 parcels")])


def track_parcel(tracking_number: str) -> dict[str, Any]:
    """The carrier's latest scan of a parcel."""
    return {"status": f"{tracking_number}: in transit"}


def twenty_parcels(model: ScriptedLlm, request: LlmRequest) -> Reply:
    n = model.calls - 1  # this call's number, from 0
    if n % (CALLS_PER_TURN + 1) == CALLS_PER_TURN:
        return "All parcels are in transit."
    return [function_call("track_parcel", {"tracking_number": f"FR-{n}"}, model.new_call_id())]


def invocation(*plugins: BasePlugin) -> Callable[[], Awaitable[None]]:
    model = ScriptedLlm(then=twenty_parcels, record_requests=False)
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel])
    runner = InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=list(plugins)))

    async def turn() -> None:
        session = await runner.session_service.create_session(app_name="bench", user_id="u")
        final = ""
        async for event in runner.run_async(user_id="u", session_id=session.id, new_message=MESSAGE):
            if event.is_final_response() and event.content and event.content.parts:
                final = event.content.parts[0].text or ""
        assert final == "All parcels are in transit.", final

    return turn


def plain() -> Callable[[], Awaitable[None]]:
    return invocation()


class TimedGuard(RepeatGuardPlugin):
    """The guard, adding up the CPU time spent in its callbacks."""

    spent = 0.0

    async def before_tool_callback(self, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await super().before_tool_callback(**kwargs)
        finally:
            TimedGuard.spent += time.process_time() - started

    async def after_tool_callback(self, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await super().after_tool_callback(**kwargs)
        finally:
            TimedGuard.spent += time.process_time() - started

    async def before_model_callback(self, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await super().before_model_callback(**kwargs)
        finally:
            TimedGuard.spent += time.process_time() - started

    async def after_model_callback(self, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await super().after_model_callback(**kwargs)
        finally:
            TimedGuard.spent += time.process_time() - started

    async def on_event_callback(self, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await super().on_event_callback(**kwargs)
        finally:
            TimedGuard.spent += time.process_time() - started

    async def before_agent_callback(self, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await super().before_agent_callback(**kwargs)
        finally:
            TimedGuard.spent += time.process_time() - started


def guarded() -> Callable[[], Awaitable[None]]:
    return invocation(RepeatGuardPlugin())


async def own_time_per_invocation(invocations: int = 60) -> float:
    """The guard's own CPU seconds in one invocation (its callbacks, timed from inside)."""
    turn = invocation(TimedGuard())
    for _ in range(5):
        await turn()
    TimedGuard.spent = 0.0
    for _ in range(invocations):
        await turn()
    return TimedGuard.spent / invocations


async def sample(turn: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    started = time.process_time()
    for _ in range(TURNS_PER_SAMPLE):
        await turn()
    return time.process_time() - started


def function_calls_per_turn(make: Callable[[], Callable[[], Awaitable[None]]], turns: int = 2) -> float:
    """Python function calls one invocation makes (deterministic: no clock involved)."""
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


async def interleaved() -> tuple[list[float], list[float], list[float]]:
    """Plain and guarded invocations, alternately first: each plain sample's time, each guarded one's, each ratio."""
    without, with_guard = plain(), guarded()
    for _ in range(2):  # warm up both
        await sample(without)
        await sample(with_guard)
    ratios: list[float] = []
    base_times: list[float] = []
    guarded_times: list[float] = []
    for round_number in range(ROUNDS):
        if round_number % 2:
            guarded_time = await sample(with_guard)
            base_time = await sample(without)
        else:
            base_time = await sample(without)
            guarded_time = await sample(with_guard)
        ratios.append(guarded_time / base_time)
        base_times.append(base_time)
        guarded_times.append(guarded_time)
    return base_times, guarded_times, ratios


def main() -> None:
    logging.disable(logging.WARNING)
    plain_calls, guarded_calls = function_calls_per_turn(plain), function_calls_per_turn(guarded)
    print(
        f"function calls an invocation: plain {plain_calls:,.0f}, guarded {guarded_calls:,.0f} "
        f"= {guarded_calls / plain_calls:.4f}x"
    )
    own = min(asyncio.run(own_time_per_invocation(20)) for _ in range(5))  # best of 5: noise only adds
    base_times, guarded_times, ratios = asyncio.run(interleaved())
    ratio = statistics.median(ratios)
    per_turn = statistics.median(base_times) / TURNS_PER_SAMPLE
    added = (ratio - 1) * per_turn / CALLS_PER_TURN
    print(
        f"Runner.run_async, {CALLS_PER_TURN} tool calls an invocation, {ROUNDS} interleaved rounds of "
        f"{TURNS_PER_SAMPLE}: median ratio guarded/plain = {ratio:.3f}x (target <= {TARGET}x); "
        f"plain invocation {per_turn * 1000:.1f} ms, guard adds ~{added * 1e6:.0f} us per tool call"
    )
    quartiles = statistics.quantiles(ratios, n=4)
    print(
        f"ratio quartiles: {quartiles[0]:.3f} / {quartiles[1]:.3f} / {quartiles[2]:.3f} (the machine's noise); "
        f"fastest guarded / fastest plain sample = {min(guarded_times) / min(base_times):.3f}x"
    )
    fastest = min(base_times) / TURNS_PER_SAMPLE
    print(
        f"guard's own work (best of 5): {own * 1e6:.0f} us an invocation "
        f"({own / CALLS_PER_TURN * 1e6:.1f} us per tool call) "
        f"= {1 + own / fastest:.4f}x the fastest plain invocation ({fastest * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
