"""OpenTelemetry with the Claude Agent SDK, on the real Claude Code CLI against the fake Messages API.

Claude Code's loop runs in the CLI and traces nothing in the Python process: the guard's events go on the
span the application has open around the conversation (the hooks run in tasks the SDK starts inside it),
carrying the session id as ``gen_ai.conversation.id``.
"""

from __future__ import annotations

import json
from pathlib import Path

from cas_parcels import REFUSAL, SEED_004, STOPPED, allowed, call, carrier, converse, scripted
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI
from support.telemetry import holding

from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT, RepeatHooksInstrumentor


async def test_refusals_and_the_stop_are_events_on_the_applications_span(tmp_path: Path) -> None:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    RepeatHooksInstrumentor().instrument(tracer_provider=provider, meter_provider=MeterProvider([reader]))
    parcels = carrier()
    model = scripted({"Keep checking FR-7731": [call("track_parcel")] * 20})
    try:
        with (
            FakeMessagesAPI(model) as api,
            provider.get_tracer("app").start_as_current_span("handle_request"),
        ):
            (turn,) = await converse(
                RepeatGuardHooks(**SEED_004),
                api,
                tmp_path,
                ["Keep checking FR-7731"],
                mcp_servers={"parcels": parcels.server},
                allowed_tools=allowed("track_parcel"),
            )
    finally:
        RepeatHooksInstrumentor().uninstrument()

    assert turn.seen[-3:] == [REFUSAL] * 3 and turn.result.result == STOPPED
    refused_ids = [request["messages"][-1]["content"][0]["tool_use_id"] for request in api.model_requests()[3:5]]
    refused_ids += [turn.result.permission_denials[-1]["tool_use_id"]]  # the 3rd refusal ended the turn
    session = turn.result.session_id
    (span,) = exporter.get_finished_spans()  # the application's: the guard opened none of its own
    assert span.name == "handle_request"
    refusals = holding([span], REFUSAL_EVENT)
    assert [attributes for _, attributes in refusals] == [
        {
            "repeat_hooks.reason": "repeated_call",
            "repeat_hooks.rule": "repeat",
            "repeat_hooks.count": n,
            "repeat_hooks.limit": 2,
            "repeat_hooks.turn": 1,
            "repeat_hooks.response": n,
            "gen_ai.tool.name": "mcp__parcels__track_parcel",
            "gen_ai.tool.call.id": call_id,
            "gen_ai.conversation.id": session,
        }
        for n, call_id in zip((3, 4, 5), refused_ids, strict=True)
    ]
    ((_, stopped),) = holding([span], STOP_EVENT)
    assert stopped == {
        "repeat_hooks.reason": "ignored_refusals",
        "repeat_hooks.rule": "max_refusals",
        "repeat_hooks.count": 3,
        "repeat_hooks.limit": 3,
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 5,
        "gen_ai.tool.name": "mcp__parcels__track_parcel",
        "gen_ai.conversation.id": session,
    }
    data = reader.get_metrics_data()
    assert data is not None
    counted = {
        metric.name: sum(point.value for point in metric.data.data_points)  # type: ignore[union-attr]
        for resource in data.resource_metrics
        for scoped in resource.scope_metrics
        for metric in scoped.metrics
    }
    assert (counted["repeat_hooks.calls.refused"], counted["repeat_hooks.turns.stopped"]) == (3, 1)
    assert "FR-7731" not in json.dumps([attributes for _, attributes in refusals] + [stopped])
