"""OpenTelemetry on LlamaIndex's real agent loop. LlamaIndex's core traces nothing through OpenTelemetry (its own
``llama_index_instrumentation`` dispatcher is not OTel), so the guard's events land on the caller's current span:
the workflow's steps run as tasks that copy the caller's context. They carry the agent's name, the conversation a
caller names (``repeat_hooks.kit.request``), and no argument value."""

from __future__ import annotations

import json

from support.telemetry import counters, holding, instrumented

from repeat_hooks.kit import request
from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT

from .conftest import STOPPED, Carrier, looping_agent


async def test_refusals_and_the_stop_are_events_on_the_callers_span(carrier: Carrier) -> None:
    with instrumented() as telemetry:
        assert telemetry.provider is not None
        agent, script = looping_agent(carrier)
        with telemetry.provider.get_tracer("app").start_as_current_span("request"), request(conversation_id="conv-7"):
            output = await agent.run(user_msg="Keep checking FR-7731")
        spans = list(telemetry.spans.get_finished_spans())
        counted = counters(telemetry.reader)

    assert output.response.content == STOPPED and script.calls == 5
    (span,) = spans
    refusals = holding(spans, REFUSAL_EVENT)
    assert [holder for holder, _ in refusals] == [span] * 3
    assert [attributes["gen_ai.tool.call.id"] for _, attributes in refusals] == ["call_3", "call_4", "call_5"]
    assert {attributes["gen_ai.conversation.id"] for _, attributes in refusals} == {"conv-7"}
    ((_, stopped),) = holding(spans, STOP_EVENT)
    assert stopped["repeat_hooks.reason"] == "ignored_refusals" and stopped["gen_ai.agent.name"] == "parcel_tracker"
    agent_name = {"gen_ai.agent.name": "parcel_tracker"}
    why = {"repeat_hooks.reason": "repeated_call", "repeat_hooks.rule": "repeat"}
    assert counted["repeat_hooks.calls.refused"] == [({"gen_ai.tool.name": "track_parcel", **agent_name, **why}, 3)]
    assert counted["repeat_hooks.turns.stopped"] == [
        ({**agent_name, "repeat_hooks.reason": "ignored_refusals", "repeat_hooks.rule": "max_refusals"}, 1)
    ]
    written = json.dumps([attributes for _, attributes in refusals] + [stopped]) + json.dumps(counted)
    assert "FR-7731" not in written  # an argument value: never in the guard's attributes


async def test_uninstrumented_nothing_is_recorded(carrier: Carrier) -> None:
    with instrumented() as telemetry:
        pass
    agent, _ = looping_agent(carrier)

    await agent.run(user_msg="Keep checking FR-7731")

    assert list(telemetry.spans.get_finished_spans()) == [] and carrier.calls == ["FR-7731"] * 2
