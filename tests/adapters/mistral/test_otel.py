"""OpenTelemetry on the Mistral Agents SDK's real loop. rc11 opens no span a hook runs inside (its GenAI spans,
Studio tracing in deployed workers, are written after the fact from recorded times, never current): the
refusal and the stop land on the span the application has current around the turn (with none, on short spans of
their own), carrying the session id and the agent's name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from repeat_hooks_mistral import RepeatGuardHook, TokenPrices, stop_of
from repeat_hooks_mistral.testing import ScriptedModel, run_turn
from support.telemetry import Telemetry, events, instrumented

from repeat_hooks import Policy, StopReason
from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT

PARCEL = "MARKER-FR-7731"


class TracedGuard(RepeatGuardHook):
    # A cost budget makes the class offer rc11 post_llm_call (Policy.hook_points): with the model calls' cost
    # recorded, a refusal says what it saved; without one, the events carry no repeat_hooks.saved.* figures.
    policy = Policy(max_calls=2, max_refusals=1, max_cost_usd=100.0)
    cost = TokenPrices(3, 15)


@pytest.fixture
def exported() -> Iterator[Telemetry]:
    with instrumented() as telemetry:
        yield telemetry


async def test_a_refusal_and_a_stop_are_events_on_the_applications_span(
    exported: Telemetry, carrier: Any, agent_for: Any
) -> None:
    provider, spans, reader = exported
    model = ScriptedModel.keep_calling("track_parcel", {"tracking_number": PARCEL}, usage=(100, 20))

    with provider.get_tracer("app").start_as_current_span("support request"):
        async with await agent_for(model, TracedGuard()).create_session() as session:
            result, stop = await TracedGuard.run(session, f"Keep checking {PARCEL}.")
            session_id = session.session_id

    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and result.text == stop.message
    assert carrier.calls == [PARCEL, PARCEL] and len(model.requests) == 3
    (span,) = spans.get_finished_spans()  # the application's: rc11 made none current, the guard opened none
    assert span.name == "support request"
    saved = TracedGuard.cost(type("Usage", (), {"input_tokens": 100, "output_tokens": 20})())  # type: ignore[misc]
    assert events(span) == [
        (
            REFUSAL_EVENT,
            {
                "repeat_hooks.reason": "repeated_call",
                "repeat_hooks.rule": "repeat",
                "repeat_hooks.turn": 1,
                "repeat_hooks.response": 3,
                "repeat_hooks.count": 3,
                "repeat_hooks.limit": 2,
                "repeat_hooks.saved.cost": pytest.approx(saved),
                "gen_ai.tool.name": "track_parcel",  # no gen_ai.tool.call.id: rc11's local runtime gives none
                "gen_ai.conversation.id": session_id,
                "gen_ai.agent.name": "parcel-tracker",
            },
        ),
        (
            STOP_EVENT,
            {
                "repeat_hooks.reason": "ignored_refusals",
                "repeat_hooks.rule": "max_refusals",
                "repeat_hooks.turn": 1,
                "repeat_hooks.response": 3,
                "repeat_hooks.count": 1,
                "repeat_hooks.limit": 1,
                "gen_ai.tool.name": "track_parcel",
                "gen_ai.conversation.id": session_id,
                "gen_ai.agent.name": "parcel-tracker",
            },
        ),
    ]
    data = reader.get_metrics_data()
    assert data is not None
    counters = {
        metric.name: [(dict(point.attributes or {}), point.value) for point in metric.data.data_points]  # type: ignore[union-attr]
        for resource in data.resource_metrics
        for scoped in resource.scope_metrics
        for metric in scoped.metrics
    }
    why = {"repeat_hooks.reason": "repeated_call", "repeat_hooks.rule": "repeat"}
    assert counters["repeat_hooks.calls.refused"] == [
        ({"gen_ai.tool.name": "track_parcel", "gen_ai.agent.name": "parcel-tracker", **why}, 1)
    ]
    assert [value for _, value in counters["repeat_hooks.turns.stopped"]] == [1]
    assert "MARKER" not in json.dumps(events(span), default=str) + json.dumps(counters)


async def test_with_no_span_current_the_events_get_spans_of_their_own(
    exported: Telemetry, carrier: Any, agent_for: Any
) -> None:
    _, spans, _ = exported
    model = ScriptedModel.keep_calling("track_parcel", {"tracking_number": "FR-7731"})

    async with await agent_for(model, TracedGuard()).create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")
        stop = await stop_of(session, guard=TracedGuard)
        session_id = session.session_id

    assert stop is not None
    finished = spans.get_finished_spans()
    assert [span.name for span in finished] == [REFUSAL_EVENT, STOP_EVENT]
    assert [events(span)[0][1]["gen_ai.conversation.id"] for span in finished] == [session_id] * 2
