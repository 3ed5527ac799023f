"""What ``RepeatHooksInstrumentor`` adds to a guarded step, measured side by side in one process.

A step is what a hook-driven loop asks the guard for one model response with one tool call, through the hook
(which commits each decision, then tells the observers): ``pre_llm_call``, ``post_llm_call``, ``pre_tool_call`` and
``post_tool_call``, each call a fresh ``ToolCall`` with a fresh id. Three sides,
interleaved (``interleave.py``): ``off`` (no observer: the guard pays one check per hook call),
``no-op providers`` (instrumented with OpenTelemetry's default no-op providers: what an application that has
not set up the SDK pays) and ``SDK`` (instrumented with the OpenTelemetry SDK, an in-memory span exporter
and metric reader: every refusal an event, every decision a counter). One step in seven repeats a call and is
refused. CPU time; the figure is the median of per-round ratios to ``off``.

    .venv/bin/python bench/otel_overhead.py
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from interleave import cpu_seconds, interleave, median_ratio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.observe.otel import RepeatHooksInstrumentor

STEPS = 2_000
ROUNDS = 21


def steps() -> None:
    """``STEPS`` steps, in turns of 20."""
    for _ in range(STEPS // 20):
        guard = StopRepeatedCalls()
        guard.pre_agent_turn()
        for step in range(20):
            guard.pre_llm_call()
            guard.post_llm_call(seconds=1.0, cost_usd=0.01)
            call = ToolCall("lookup", {"id": step % 7}, call_id=f"c{step}")
            if guard.pre_tool_call(call) is None:
                guard.post_tool_call(call, result={"value": step % 7})


def instrumented(**providers: object) -> Callable[[], float]:
    """CPU seconds of ``steps`` with the instrumentor on ``providers`` (the no-op globals when none)."""

    def sample() -> float:
        RepeatHooksInstrumentor().instrument(**providers)  # type: ignore[arg-type]
        try:
            return cpu_seconds(steps)
        finally:
            RepeatHooksInstrumentor().uninstrument()

    return sample


def main() -> None:
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    meter = MeterProvider([InMemoryMetricReader()])
    times = interleave(
        {
            "off": lambda: cpu_seconds(steps),
            "no-op providers": instrumented(),
            "SDK": instrumented(tracer_provider=tracer, meter_provider=meter),
        },
        ROUNDS,
    )
    off = statistics.median(times["off"]) / STEPS * 1e6
    print(f"a step (model call + tool call, decided and recorded), instrumented vs off: {STEPS} steps x {ROUNDS}")
    for name in ("no-op providers", "SDK"):
        each = statistics.median(times[name]) / STEPS * 1e6
        ratio = median_ratio(times[name], times["off"])
        print(f"  {name:16s} ratio {ratio:.2f}x  ({each:.1f} us a step, off {off:.1f})")


if __name__ == "__main__":
    main()
