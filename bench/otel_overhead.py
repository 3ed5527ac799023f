"""What ``RepeatHooksInstrumentor`` adds to a guarded step, as adapters pay it: side by side in one process.

A step is what a hook-driven loop asks the guard for one model response with one tool call, through the hook
(which commits each decision, then tells the observers): ``pre_llm_call``, ``post_llm_call``, a fresh
``ToolCall``, ``pre_tool_call`` and ``post_tool_call``. Every side runs the same workload, built the same way
before the clock starts (as ``overhead.py`` builds it): ``STEPS`` steps in turns of 20, a fresh
``StopRepeatedCalls`` per turn, each call's arguments (``{"id": step % 7}``) and result (``{"value": ...}``)
``json.loads`` copies and its id new (``call_<n>``), so no object or id is ever seen twice. The default policy
lets the first 14 steps of a turn run, refuses the next 3 calls (``cycle``: the 7 ids come round again), stops
the turn at the 18th model call (``ignored_refusals``) and refuses the last 3 calls (``turn_ended``): 4
events a turn, 3 span events of a refusal and one of a stop. Three sides, interleaved (``interleave.py``):
``off`` (no observer: the guard pays one check per hook call), ``no-op providers`` (instrumented with
OpenTelemetry's default no-op providers: what an application that has not set up the SDK pays) and ``SDK``
(instrumented with the OpenTelemetry SDK, an in-memory span exporter and metric reader: every refusal an
event, every decision a counter). CPU time; the figure is the median of per-round ratios to ``off`` (their
quartiles in brackets).

    .venv/bin/python bench/otel_overhead.py
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable
from typing import Any

from interleave import cpu_seconds, interleave, median_ratio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.observe.otel import RepeatHooksInstrumentor

NAME = "lookup"
STEPS = 2_000
TURN = 20
ROUNDS = 21
EVENTS = STEPS // TURN * 4  # per turn of 20: 3 calls refused as a cycle, then the stop (and 3 calls refused after it)

Turns = list[tuple[StopRepeatedCalls, list[tuple[Any, Any, str]]]]  # per turn: its guard, each step's call
_ids = itertools.count()


def workload() -> Turns:
    """``STEPS`` steps in turns of ``TURN``, each turn with a fresh guard: fresh arguments, results and ids."""
    texts = [(json.dumps({"id": step % 7}), json.dumps({"value": step % 7})) for step in range(TURN)]
    return [
        (StopRepeatedCalls(), [(json.loads(a), json.loads(r), f"call_{next(_ids)}") for a, r in texts])
        for _ in range(STEPS // TURN)
    ]


def steps() -> float:
    """CPU seconds of a fresh workload (built untimed); checks that it refused and stopped as meant."""
    turns = workload()

    def run() -> None:
        for guard, calls in turns:
            guard.pre_agent_turn()
            pre_llm_call, post_llm_call = guard.pre_llm_call, guard.post_llm_call
            pre_tool_call, post_tool_call = guard.pre_tool_call, guard.post_tool_call
            for arguments, result, call_id in calls:
                pre_llm_call()
                post_llm_call(seconds=1.0, cost_usd=0.01)
                call = ToolCall(NAME, arguments, call_id=call_id)
                if pre_tool_call(call) is None:
                    post_tool_call(call, result=result)

    elapsed = cpu_seconds(run)
    events = sum(len(guard.events) for guard, _ in turns)
    if events != EVENTS:
        raise RuntimeError(f"expected {EVENTS} refusal and stop events, got {events}")
    return elapsed


def instrumented(**providers: object) -> Callable[[], float]:
    """CPU seconds of ``steps`` with the instrumentor on ``providers`` (the no-op globals when none)."""

    def sample() -> float:
        RepeatHooksInstrumentor().instrument(**providers)  # type: ignore[arg-type]
        try:
            return steps()
        finally:
            RepeatHooksInstrumentor().uninstrument()

    return sample


def main() -> None:
    tracer = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    meter = MeterProvider([InMemoryMetricReader()])

    def sdk() -> float:
        exporter.clear()  # the spans of earlier rounds do not pile up
        return instrumented(tracer_provider=tracer, meter_provider=meter)()

    times = interleave({"off": steps, "no-op providers": instrumented(), "SDK": sdk}, ROUNDS)
    off = statistics.median(times["off"]) / STEPS * 1e6
    print(
        f"a step (model call + ToolCall + tool call, decided and recorded), instrumented vs off: CPU time, median "
        f"of {ROUNDS} interleaved rounds of {STEPS} steps (fresh guards, objects and ids each round; turns of "
        f"{TURN} steps, {EVENTS} refusal and stop events)"
    )
    for name in ("no-op providers", "SDK"):
        each = statistics.median(times[name]) / STEPS * 1e6
        ratio = median_ratio(times[name], times["off"])
        ratios = [over / base for over, base in zip(times[name], times["off"], strict=True)]
        low, _, high = statistics.quantiles(ratios, n=4)
        print(
            f"  {name:16s} ratio {ratio:.2f}x  [quartiles {low:.2f}-{high:.2f}]  ({each:.1f} us a step, off "
            f"{off:.1f}: +{each - off:.1f} us)"
        )


if __name__ == "__main__":
    main()
