"""OpenTelemetry: the guard's refusals and stops as span events and counters (``repeat_hooks.observe.otel``), named
by the agent's role and the conversation. CrewAI records no OpenTelemetry span around a tool call here (its own
telemetry is off in tests and is not the process's tracer), so each event lands on a span of its own."""

from __future__ import annotations

import json

from repeat_hooks_crewai.testing import tool_results
from support.telemetry import counters, holding, instrumented

from repeat_hooks.kit import request
from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT
from repeat_hooks.stores import MemoryStore

from .conftest import STOPPED, Carrier, crew_of, guarded, tracker


def test_refusals_and_the_stop_are_events_named_by_role_and_conversation(carrier: Carrier) -> None:
    agent = tracker(carrier, role="parcel_tracker")
    crew = crew_of(agent)

    with instrumented() as telemetry, guarded(crew, store=MemoryStore()), request(conversation_id="conv-7"):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert output.raw == STOPPED and len(tool_results(agent)) == 5
    spans = list(telemetry.spans.get_finished_spans())
    refusals = [attributes for _, attributes in holding(spans, REFUSAL_EVENT)]
    assert [(a["repeat_hooks.count"], a["gen_ai.tool.name"]) for a in refusals] == [
        (n, "track_parcel") for n in (3, 4, 5)
    ]
    assert {a["gen_ai.agent.name"] for a in refusals} == {"parcel_tracker"}
    assert {a["gen_ai.conversation.id"] for a in refusals} == {"conv-7"}
    ((_, stopped),) = holding(spans, STOP_EVENT)
    assert stopped["repeat_hooks.reason"] == "ignored_refusals" and stopped["gen_ai.agent.name"] == "parcel_tracker"
    counted = counters(telemetry.reader)
    assert [value for _, value in counted["repeat_hooks.calls.refused"]] == [3]
    assert [value for _, value in counted["repeat_hooks.turns.stopped"]] == [1]
    assert "FR-7731" not in json.dumps([*refusals, stopped]) + json.dumps(counted)  # digests and names only
