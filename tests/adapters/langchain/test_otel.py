"""OpenTelemetry on the real ``create_agent`` loop. LangChain opens no OpenTelemetry spans of its own: the refusal
and the stop land on the span the application has current around ``invoke`` / ``ainvoke`` (with none, on short
spans of their own), carrying the thread id and the agent's name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_parcels import STOPPED, Carrier, thread
from langgraph.checkpoint.memory import InMemorySaver
from repeat_hooks_langchain import RepeatGuardMiddleware, TokenPrices
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling
from support.telemetry import Telemetry, events, instrumented

from repeat_hooks import Policy
from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT

PARCEL = "MARKER-FR-7731"
PRICES = TokenPrices(3, 15)


@pytest.fixture
def exported() -> Iterator[Telemetry]:
    with instrumented() as telemetry:
        yield telemetry


def _agent(carrier: Carrier) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(then=keep_calling("track_parcel", {"tracking_number": PARCEL}), usage=(100, 20))
    guard = RepeatGuardMiddleware(Policy(max_calls=2, max_refusals=1), cost=PRICES, clock=None)
    agent = create_agent(model, tools=[carrier.tool], middleware=[guard], name="tracker", checkpointer=InMemorySaver())
    return agent, model


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
async def test_a_refusal_and_a_stop_are_events_on_the_applications_span(
    exported: Telemetry, asynchronous: bool
) -> None:
    provider, spans, reader = exported
    carrier = Carrier()
    agent, model = _agent(carrier)
    user = {"messages": [("user", f"Keep checking {PARCEL}")]}

    with provider.get_tracer("app").start_as_current_span("support request"):
        if asynchronous:
            result = await agent.ainvoke(user, thread("th-1"))
        else:
            result = agent.invoke(user, thread("th-1"))

    assert result["messages"][-1].content == STOPPED
    assert carrier.calls == [PARCEL, PARCEL] and model.calls == 3
    (span,) = spans.get_finished_spans()  # the application's: the guard opened none
    assert span.name == "support request"
    saved = PRICES({"input_tokens": 100, "output_tokens": 20, "total_tokens": 120})
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
                "gen_ai.tool.name": "track_parcel",  # no gen_ai.tool.call.id: the guard decides LangChain's
                "gen_ai.conversation.id": "th-1",  # calls by their position in the message
                "gen_ai.agent.name": "tracker",
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
                "gen_ai.conversation.id": "th-1",
                "gen_ai.agent.name": "tracker",
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
        ({"gen_ai.tool.name": "track_parcel", "gen_ai.agent.name": "tracker", **why}, 1)
    ]
    assert [value for _, value in counters["repeat_hooks.turns.stopped"]] == [1]
    assert "MARKER" not in json.dumps(events(span), default=str) + json.dumps(counters)


def test_with_no_span_current_the_events_get_spans_of_their_own(
    exported: Telemetry,
) -> None:
    _, spans, _ = exported
    agent, _ = _agent(Carrier())

    agent.invoke({"messages": [("user", "Keep checking")]}, thread("th-2"))

    finished = spans.get_finished_spans()
    assert [span.name for span in finished] == [REFUSAL_EVENT, STOP_EVENT]
    assert [events(span)[0][1]["gen_ai.conversation.id"] for span in finished] == ["th-2", "th-2"]
