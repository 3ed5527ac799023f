"""Handoffs: the turn goes on across a handoff, and the target is guarded too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, Runner, RunState, function_tool, handoff
from repeat_hooks_openai_agents import GuardState, context_deserializer, context_serializer, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, tool_call

STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


@pytest.mark.parametrize("as_handoff_object", [False, True])
async def test_counting_continues_across_a_handoff_and_the_target_is_guarded(
    carrier: Any, as_handoff_object: bool
) -> None:
    specialist_model = ScriptedModel(then=keep_calling("track_parcel", ARGS), call_id_prefix="spec")
    specialist = Agent(name="specialist", model=specialist_model, tools=[carrier.tool])
    triage_model = ScriptedModel(
        [tool_call("track_parcel", ARGS, "t1")],
        [tool_call("transfer_to_specialist", {}, "t2")],
    )
    triage = Agent(
        name="triage",
        model=triage_model,
        tools=[carrier.tool],
        handoffs=[handoff(specialist) if as_handoff_object else specialist],
    )
    agent = guard_agent(triage, **SEED_004)
    state = GuardState()

    result = await Runner.run(agent, "Keep checking FR-7731", context=state)

    # One call before the handoff and one after reached the carrier: the count did not restart.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert specialist_model.outputs_received(1)["spec_1"] == "FR-7731: in transit, hub Lyon"
    assert specialist_model.outputs_received(2)["spec_2"].startswith("Refused: you already called track_parcel 2")
    # The specialist's turn was ended by its guarded tool_use_behavior.
    assert result.last_agent.name == "specialist"
    assert result.final_output == STOPPED
    assert triage_model.calls == 2 and specialist_model.calls == 4
    assert state.turn.number == 1
    assert state.turn.model_calls == 6


async def test_handoffs_back_and_forth_are_guarded_once(carrier: Any) -> None:
    first = Agent(name="first", tools=[carrier.tool])
    second = Agent(name="second", tools=[carrier.tool], handoffs=[first])
    first.handoffs = [second]

    guarded = guard_agent(first)
    target = guarded.handoffs[0]
    assert isinstance(target, Agent) and target.name == "second"
    assert target.handoffs[0] is guarded  # the cycle closes on the guarded clone
    assert first.handoffs[0] is second and second.tools == [carrier.tool]  # originals untouched


async def test_a_handoff_keeps_the_turn_even_when_the_model_reports_no_usage(carrier: Any) -> None:
    # The turn is keyed on the run's Usage object, not on the figures in it.
    specialist_model = ScriptedModel(then=keep_calling("track_parcel", ARGS), reports_usage=False, call_id_prefix="s")
    specialist = Agent(name="specialist", model=specialist_model, tools=[carrier.tool])
    triage_model = ScriptedModel(
        [tool_call("track_parcel", ARGS, "t1")], [tool_call("transfer_to_specialist", {}, "t2")], reports_usage=False
    )
    agent = guard_agent(
        Agent(name="triage", model=triage_model, tools=[carrier.tool], handoffs=[specialist]), **SEED_004
    )
    state = GuardState()

    await Runner.run(agent, "Keep checking FR-7731", context=state)

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert state.turn.number == 1


async def test_a_turn_paused_after_a_handoff_resumes_on_the_guarded_target(carrier: Any) -> None:
    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order (needs a human's approval)."""
        return "refunded"

    def build() -> tuple[Agent[Any], ScriptedModel]:
        specialist_model = ScriptedModel(
            [tool_call("track_parcel", ARGS, "s1")],
            [tool_call("refund", {"order": "A1"}, "s2")],
            then=keep_calling("track_parcel", ARGS),
            call_id_prefix="s",
        )
        specialist = Agent(name="specialist", model=specialist_model, tools=[carrier.tool, refund])
        triage_model = ScriptedModel(
            [tool_call("track_parcel", ARGS, "t1")], [tool_call("transfer_to_specialist", {}, "t2")]
        )
        triage = Agent(name="triage", model=triage_model, tools=[carrier.tool], handoffs=[handoff(specialist)])
        return guard_agent(triage, **SEED_004), specialist_model

    agent, _ = build()
    paused = await Runner.run(agent, "Track, then refund", context=GuardState())
    assert paused.last_agent.name == "specialist" and paused.interruptions
    saved = json.dumps(paused.to_state().to_json(context_serializer=context_serializer))

    fresh_agent, fresh_specialist_model = build()
    fresh_specialist_model.replies = fresh_specialist_model.replies[2:]  # it already answered twice
    state = await RunState.from_json(fresh_agent, json.loads(saved), context_deserializer=context_deserializer)
    for item in state.get_interruptions():
        state.approve(item)
    resumed = await Runner.run(fresh_agent, state)

    assert resumed.last_agent.name == "specialist"
    assert carrier.calls == ["FR-7731", "FR-7731"]  # the resumed specialist was refused at once
    assert resumed.final_output == STOPPED
    assert fresh_specialist_model.calls == 3
