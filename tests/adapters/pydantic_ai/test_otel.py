"""OpenTelemetry on pydantic-ai's real agent graph, traced by its own ``Instrumentation`` capability: the refusal
lands on the ``chat`` span of the response that asked for the call (the guard decides a response's calls as a
batch, in ``after_model_request``, inside that span), the stop on the ``chat`` span of the request it skipped;
both carry the run's conversation id and the agent's name."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pai_parcels import Carrier
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from repeat_hooks_pydantic_ai import RepeatGuard, TokenPrices, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling
from support.telemetry import Telemetry, counters, holding, instrumented

from repeat_hooks import Policy, StopReason
from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT

PARCEL = "MARKER-FR-7731"
PRICES = TokenPrices(3, 15)


@pytest.fixture
def exported() -> Iterator[Telemetry]:
    with instrumented() as telemetry:
        yield telemetry


async def test_a_refusal_and_a_stop_are_events_on_the_runs_chat_spans(exported: Telemetry, carrier: Carrier) -> None:
    provider, spans, reader = exported
    model = ScriptedModel(keep_calling("track_parcel", {"parcel_id": PARCEL}))
    agent: Agent[None, str] = Agent(
        model,
        name="tracker",
        tools=[carrier.tool],
        capabilities=[
            Instrumentation(settings=InstrumentationSettings(tracer_provider=provider)),
            RepeatGuard(Policy(max_calls=2, max_refusals=1), cost=PRICES, clock=None),
        ],
    )

    result = await agent.run("Keep checking", conversation_id="conv-7")

    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and result.output == stop.message
    assert carrier.calls == [PARCEL, PARCEL] and model.calls == 3
    finished = list(spans.get_finished_spans())
    (run,) = [span for span in finished if span.name == "invoke_agent tracker"]
    chats = [span for span in finished if span.name == "chat scripted"]
    tools = [span for span in finished if span.name == "execute_tool track_parcel"]
    assert (len(chats), len(tools)) == (4, 3)  # 3 model calls and the request the stop skipped; 2 ran, 1 refused
    assert all(span.parent is not None and span.parent.span_id == run.context.span_id for span in chats + tools)

    ((refused_on, refusal),) = holding(finished, REFUSAL_EVENT)
    assert refused_on is chats[2]  # the response that asked for the third call
    saved = PRICES(model.usage)
    assert refusal == {
        "repeat_hooks.reason": "repeated_call",
        "repeat_hooks.rule": "repeat",
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 3,
        "repeat_hooks.count": 3,
        "repeat_hooks.limit": 2,
        "repeat_hooks.saved.cost": pytest.approx(saved),
        "gen_ai.tool.name": "track_parcel",
        "gen_ai.tool.call.id": "call_2_0",
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.agent.name": "tracker",
    }
    # the refused call's own tool span is found by the same gen_ai.tool.call.id
    assert [span.attributes.get("gen_ai.tool.call.id") for span in tools] == ["call_0_0", "call_1_0", "call_2_0"]  # type: ignore[union-attr]

    ((stopped_on, stopped),) = holding(finished, STOP_EVENT)
    assert stopped_on is chats[3]  # the request the guard skipped
    assert stopped == {
        "repeat_hooks.reason": "ignored_refusals",
        "repeat_hooks.rule": "max_refusals",
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 3,
        "repeat_hooks.count": 1,
        "repeat_hooks.limit": 1,
        "gen_ai.tool.name": "track_parcel",
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.agent.name": "tracker",
    }

    counted = counters(reader)
    agent_name = {"gen_ai.agent.name": "tracker"}
    why = {"repeat_hooks.reason": "repeated_call", "repeat_hooks.rule": "repeat"}
    assert counted["repeat_hooks.calls.refused"] == [({"gen_ai.tool.name": "track_parcel", **agent_name, **why}, 1)]
    assert counted["repeat_hooks.turns.stopped"] == [
        ({**agent_name, "repeat_hooks.reason": "ignored_refusals", "repeat_hooks.rule": "max_refusals"}, 1)
    ]
    assert [value for _, value in counted["repeat_hooks.saved.cost"]] == [pytest.approx(saved)]
    assert "repeat_hooks.saved.seconds" not in counted  # clock=None: no seconds recorded, none claimed
    ours = json.dumps([attributes for _, attributes in holding(finished, REFUSAL_EVENT)]) + json.dumps(counted)
    assert "MARKER" not in ours  # the parcel id is an argument value: never in the guard's attributes


async def test_without_instrumentation_the_events_get_spans_of_their_own(exported: Telemetry, carrier: Carrier) -> None:
    _, spans, _ = exported
    model = ScriptedModel(keep_calling("track_parcel", {"parcel_id": PARCEL}))
    agent: Agent[None, str] = Agent(
        model, name="tracker", tools=[carrier.tool], capabilities=[RepeatGuard(Policy(max_calls=2, max_refusals=1))]
    )

    await agent.run("Keep checking", conversation_id="conv-8")

    finished = list(spans.get_finished_spans())
    assert [span.name for span in finished] == [REFUSAL_EVENT, STOP_EVENT]
    assert [dict(span.events[0].attributes or {})["gen_ai.conversation.id"] for span in finished] == ["conv-8"] * 2


async def test_approval_rounds_report_each_refusal_once(
    exported: Telemetry,
) -> None:
    """A resumed turn is rebuilt from the history through the policy: the refusals in that history were
    reported when first made, and are not reported again at each approval round."""
    from repeat_hooks_pydantic_ai.testing import answer, steps
    from test_resumes import Refunds, approval_rounds

    _, spans, reader = exported
    script = steps(
        [("refund", {"order": "A-1"})],
        [("refund", {"order": "A-1"}), ("refund", {"order": "B-2"})],
        then=answer("done"),
    )
    agent, _ = Refunds().agent(script, Policy(max_calls=1, max_refusals=3))

    result, asked, runs = await approval_rounds(agent, 5)

    assert (runs, asked, result.output) == (3, [["call_0_0"], ["call_1_1"]], "done")
    refusals = holding(list(spans.get_finished_spans()), REFUSAL_EVENT)
    assert [attributes["gen_ai.tool.call.id"] for _, attributes in refusals] == ["call_1_0"]
    assert [value for _, value in counters(reader)["repeat_hooks.calls.refused"]] == [1]
