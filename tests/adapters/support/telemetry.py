"""What the adapters' OpenTelemetry tests share: the SDK's in-memory exporter and reader, read back as data.

``global_spans()`` is for SDKs that trace through the process's global tracer provider (ADK, Strands), which
can be set once per process: it sets an SDK ``TracerProvider`` if none is set yet (or takes the one set), adds
an in-memory exporter to it, and shuts that exporter off afterwards (the provider keeps the processor, which
then exports nothing).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@contextmanager
def global_spans() -> Iterator[InMemorySpanExporter]:
    """The spans the global tracer provider ends within the block."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), f"the global tracer provider is a {type(provider).__name__}"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        exporter.shutdown()


def holding(spans: list[ReadableSpan], event: str) -> list[tuple[ReadableSpan, dict[str, Any]]]:
    """Each span holding an event named ``event``, with that event's attributes (once per event)."""
    return [(span, dict(e.attributes or {})) for span in spans for e in span.events if e.name == event]


def events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    """A span's events: ``(name, attributes)`` in order."""
    return [(event.name, dict(event.attributes or {})) for event in span.events]


def counters(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """Every counter the reader holds: its data points as ``(attributes, value)``, by instrument name."""
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: [(dict(point.attributes or {}), point.value) for point in metric.data.data_points]  # type: ignore[union-attr]
        for resource in data.resource_metrics
        for scoped in resource.scope_metrics
        for metric in scoped.metrics
    }


@contextmanager
def instrumented(*, spans: InMemorySpanExporter | None = None) -> Iterator[Telemetry]:
    """``RepeatHooksInstrumentor`` instrumented for the block, with an in-memory reader for its counters.

    Spans: ``spans`` (an exporter already on the global provider, for SDKs that trace through it: see
    ``global_spans``), else a ``TracerProvider`` of the block's own, handed to the instrumentor."""
    from repeat_hooks.observe.otel import RepeatHooksInstrumentor

    reader = InMemoryMetricReader()
    provider: TracerProvider | None = None
    if spans is None:
        spans, provider = InMemorySpanExporter(), TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
    RepeatHooksInstrumentor().instrument(tracer_provider=provider, meter_provider=MeterProvider([reader]))
    try:
        yield Telemetry(provider, spans, reader)
    finally:
        RepeatHooksInstrumentor().uninstrument()


class Telemetry(NamedTuple):
    """What ``instrumented`` gives: the block's own tracer provider (``None`` on the global one), its spans,
    and the counters' reader."""

    provider: TracerProvider | None
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader


def totals(reader: InMemoryMetricReader) -> dict[str, float]:
    """Every counter's total over its data points, by instrument name."""
    return {name: sum(value for _, value in points) for name, points in counters(reader).items()}
