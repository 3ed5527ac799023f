"""OpenTelemetry on Agent Framework's real loop, traced by its own spans (``agent_framework.observability``, on the
process's global tracer provider). The guard's chat middleware runs outside the ``chat`` span of each model call
(``ChatTelemetryLayer`` sits below ``ChatMiddlewareLayer``), so its refusal and stop events land on the run's
``invoke_agent`` span, naming the agent and, with a session, its ``session_id`` as ``gen_ai.conversation.id``;
argument values never appear."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from agent_framework.observability import enable_instrumentation
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.telemetry import counters, global_spans, holding, instrumented

from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT

from .conftest import STOPPED, Carrier, client_of, looping_agent


@pytest.fixture(scope="module")
def sdk_spans() -> Iterator[InMemorySpanExporter]:
    """The spans Agent Framework's tracer ends while this module runs."""
    enable_instrumentation()
    with global_spans() as exporter:
        yield exporter


async def test_refusals_and_the_stop_are_events_on_the_runs_agent_span(
    sdk_spans: InMemorySpanExporter, carrier: Carrier
) -> None:
    sdk_spans.clear()
    agent = looping_agent(carrier, name="parcel_tracker")
    with instrumented(spans=sdk_spans) as telemetry:
        response = await agent.run("Keep checking FR-7731", session=agent.create_session(session_id="conv-7"))

    assert response.text == STOPPED and client_of(agent).calls == 5
    spans = list(sdk_spans.get_finished_spans())
    (run,) = [span for span in spans if span.name == "invoke_agent parcel_tracker"]
    assert len([span for span in spans if span.name.startswith("chat")]) == 5  # no 6th model call
    assert len([span for span in spans if span.name == "execute_tool track_parcel"]) == 2  # refused calls never ran
    refusals = holding(spans, REFUSAL_EVENT)
    assert [holder for holder, _ in refusals] == [run] * 3
    assert [attributes["gen_ai.tool.call.id"] for _, attributes in refusals] == ["call_3", "call_4", "call_5"]
    assert all(attributes["gen_ai.conversation.id"] == "conv-7" for _, attributes in refusals)
    ((stopped_on, stopped),) = holding(spans, STOP_EVENT)
    assert stopped_on is run and stopped["repeat_hooks.reason"] == "ignored_refusals"
    assert stopped["gen_ai.agent.name"] == "parcel_tracker"
    counted = counters(telemetry.reader)
    assert [value for _, value in counted["repeat_hooks.calls.refused"]] == [3]
    written = json.dumps([attributes for _, attributes in refusals] + [stopped]) + json.dumps(counted)
    assert "FR-7731" not in written  # the parcel id is an argument value: never in the guard's attributes


async def test_uninstrumented_the_guard_adds_no_event(sdk_spans: InMemorySpanExporter, carrier: Carrier) -> None:
    sdk_spans.clear()

    await looping_agent(carrier, name="parcel_tracker").run("Keep checking FR-7731")

    spans = list(sdk_spans.get_finished_spans())
    assert [span.name for span in spans].count("invoke_agent parcel_tracker") == 1
    assert holding(spans, REFUSAL_EVENT) == holding(spans, STOP_EVENT) == []
