"""OpenTelemetry with the OpenAI Agents SDK, on the real Runner loop.

The SDK traces with its own tracing (see ``test_tracing.py``), not OpenTelemetry: the guard's OpenTelemetry
events go on the span the application has open around the run, carrying the agent's name.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, Runner
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling
from support.telemetry import totals

from repeat_hooks.kit import request
from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT, RepeatHooksInstrumentor

PARCEL = "MARKER-FR-7731"
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


async def test_refusals_and_the_stop_are_events_on_the_applications_span(carrier: Any) -> None:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": PARCEL}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), clock=None, **SEED_004)
    RepeatHooksInstrumentor().instrument(tracer_provider=provider, meter_provider=MeterProvider([reader]))
    try:
        with provider.get_tracer("app").start_as_current_span("handle_request"):
            result = await Runner.run(agent, "Keep checking the parcel", context=GuardState())
    finally:
        RepeatHooksInstrumentor().uninstrument()

    assert result.final_output.startswith("I stopped") and model.calls == 5
    (span,) = exporter.get_finished_spans()  # the application's: the guard opened none of its own
    assert span.name == "handle_request"
    events = [(event.name, dict(event.attributes or {})) for event in span.events]
    assert events == [
        (
            REFUSAL_EVENT,
            {
                "repeat_hooks.reason": "repeated_call",
                "repeat_hooks.rule": "repeat",
                "repeat_hooks.count": n,
                "repeat_hooks.limit": 2,
                "repeat_hooks.turn": 1,
                "repeat_hooks.response": n - 1,  # the adapter opens a response at EndTurn: the first is 0
                "gen_ai.tool.name": "track_parcel",
                "gen_ai.tool.call.id": f"call_{n}",
                "gen_ai.agent.name": "parcel-tracker",
            },
        )
        for n in (3, 4, 5)
    ] + [
        (
            STOP_EVENT,
            {
                "repeat_hooks.reason": "ignored_refusals",
                "repeat_hooks.rule": "max_refusals",
                "repeat_hooks.count": 3,
                "repeat_hooks.limit": 3,
                "repeat_hooks.turn": 1,
                "repeat_hooks.response": 4,
                "gen_ai.tool.name": "track_parcel",
                "gen_ai.agent.name": "parcel-tracker",
            },
        )
    ]
    counted = totals(reader)
    assert (counted["repeat_hooks.calls.refused"], counted["repeat_hooks.turns.stopped"]) == (3, 1)
    assert "MARKER" not in json.dumps(events)


async def test_the_events_name_the_conversation_the_caller_named(carrier: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": PARCEL}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), clock=None, **SEED_004)
    RepeatHooksInstrumentor().instrument(tracer_provider=provider, meter_provider=MeterProvider())
    try:
        with provider.get_tracer("app").start_as_current_span("handle_request"), request(conversation_id="chat-9"):
            await Runner.run(agent, "Keep checking the parcel", context=GuardState())
    finally:
        RepeatHooksInstrumentor().uninstrument()

    (span,) = exporter.get_finished_spans()
    named = [dict(event.attributes or {}).get("gen_ai.conversation.id") for event in span.events]
    assert named == ["chat-9"] * 4  # three refusals and the stop
