"""OpenTelemetry on Strands' real agent loop, traced by Strands' own spans (``strands.telemetry``).

Strands traces through the process's global tracer provider, which can be set once: the ``strands_spans``
fixture sets an SDK ``TracerProvider`` if none is set yet (or takes the one set), and adds this module's
in-memory exporter to it. The guard decides a model response's calls as a batch (``BeforeToolsEvent``),
inside the ``execute_event_loop_cycle`` span of that response: the refusal event lands there (a refused call
gets no ``execute_tool`` span: it never runs); the stop is decided after the response's tools
(``AfterToolsEvent``), in the same cycle span. Both carry the agent's name, and with a session manager its
session id as ``gen_ai.conversation.id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from strands.session import FileSessionManager
from support.telemetry import counters, global_spans, holding, instrumented

from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT, RepeatHooksInstrumentor

from .conftest import STOPPED, Carrier, looping_agent, model_of


@pytest.fixture(scope="module")
def strands_spans() -> Iterator[InMemorySpanExporter]:
    """The spans Strands' tracer ends while this module runs."""
    with global_spans() as exporter:
        yield exporter


@pytest.fixture
def telemetry(strands_spans: InMemorySpanExporter) -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    strands_spans.clear()
    with instrumented(spans=strands_spans) as telemetry:
        yield telemetry.spans, telemetry.reader


def test_refusals_and_the_stop_are_events_on_the_cycle_spans_of_their_responses(
    telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader], carrier: Carrier, tmp_path: Path
) -> None:
    exporter, reader = telemetry
    sessions = FileSessionManager(session_id="conv-7", storage_dir=str(tmp_path))
    agent = looping_agent(carrier, name="parcel_tracker", session_manager=sessions)

    result = agent("Keep checking FR-7731")

    assert str(result).strip() == STOPPED and model_of(agent).calls == 5
    spans = list(exporter.get_finished_spans())
    (run,) = [span for span in spans if span.name == "invoke_agent parcel_tracker"]
    cycles = sorted((s for s in spans if s.name == "execute_event_loop_cycle"), key=lambda s: s.start_time or 0)
    assert len(cycles) == 5 and all(c.parent is not None and c.parent.span_id == run.context.span_id for c in cycles)
    ran = [span for span in spans if span.name == "execute_tool track_parcel"]
    assert [span.attributes.get("gen_ai.tool.call.id") for span in ran] == ["call_1", "call_2"]  # type: ignore[union-attr]

    refusals = holding(spans, REFUSAL_EVENT)
    assert [holder for holder, _ in refusals] == cycles[2:]  # each on the cycle of the response that asked
    assert [attributes for _, attributes in refusals] == [
        {
            "repeat_hooks.reason": "repeated_call",
            "repeat_hooks.rule": "repeat",
            "repeat_hooks.count": n,
            "repeat_hooks.limit": 2,
            "repeat_hooks.turn": 1,
            "repeat_hooks.response": n,
            "gen_ai.tool.name": "track_parcel",
            "gen_ai.tool.call.id": f"call_{n}",
            "gen_ai.conversation.id": "conv-7",
            "gen_ai.agent.name": "parcel_tracker",
        }
        for n in (3, 4, 5)
    ]
    ((stopped_on, stopped),) = holding(spans, STOP_EVENT)
    assert stopped_on is cycles[4]
    assert stopped == {
        "repeat_hooks.reason": "ignored_refusals",
        "repeat_hooks.rule": "max_refusals",
        "repeat_hooks.count": 3,
        "repeat_hooks.limit": 3,
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 5,
        "gen_ai.tool.name": "track_parcel",
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.agent.name": "parcel_tracker",
    }

    counted = counters(reader)
    agent_name = {"gen_ai.agent.name": "parcel_tracker"}
    why = {"repeat_hooks.reason": "repeated_call", "repeat_hooks.rule": "repeat"}
    assert counted["repeat_hooks.calls.refused"] == [({"gen_ai.tool.name": "track_parcel", **agent_name, **why}, 3)]
    assert counted["repeat_hooks.turns.stopped"] == [
        ({**agent_name, "repeat_hooks.reason": "ignored_refusals", "repeat_hooks.rule": "max_refusals"}, 1)
    ]
    written = json.dumps([attributes for _, attributes in refusals] + [stopped]) + json.dumps(counted)
    assert "FR-7731" not in written  # the parcel id is an argument value: never in the guard's attributes


def test_without_a_session_manager_no_conversation_id_and_uninstrumented_nothing(
    strands_spans: InMemorySpanExporter, carrier: Carrier
) -> None:
    strands_spans.clear()
    reader = InMemoryMetricReader()
    RepeatHooksInstrumentor().instrument(meter_provider=MeterProvider([reader]))
    try:
        looping_agent(carrier, name="parcel_tracker")("Keep checking FR-7731")
    finally:
        RepeatHooksInstrumentor().uninstrument()
    spans = list(strands_spans.get_finished_spans())
    assert [attributes.get("gen_ai.conversation.id") for _, attributes in holding(spans, REFUSAL_EVENT)] == [None] * 3
    assert [attributes["gen_ai.agent.name"] for _, attributes in holding(spans, STOP_EVENT)] == ["parcel_tracker"]

    strands_spans.clear()
    looping_agent(carrier, name="parcel_tracker")("Keep checking FR-7731")  # not instrumented

    spans = list(strands_spans.get_finished_spans())
    assert len([span for span in spans if span.name == "execute_event_loop_cycle"]) == 5
    assert holding(spans, REFUSAL_EVENT) == holding(spans, STOP_EVENT) == []
