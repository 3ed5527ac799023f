"""Seed 004 on the real Runner: 2 calls reach the tool, refusals reach the model, the turn ends."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, Runner
from repeat_hooks_openai_agents import GuardHooks, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import StopReason, StopRepeatedCalls

REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
ARGS = {"tracking_number": "FR-7731"}


def seed_004() -> StopRepeatedCalls:
    return StopRepeatedCalls(count="per_turn", match="tool", max_calls=2, max_refusals=3)


def parcel_agent(model: ScriptedModel, carrier: Any) -> Agent[Any]:
    return guard_agent(Agent(name="parcel-tracker", instructions="Track parcels.", model=model, tools=[carrier.tool]))


async def test_two_calls_reach_the_carrier_then_refusals_then_the_turn_ends(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    guard = seed_004()

    result = await Runner.run(parcel_agent(model, carrier), "Keep checking FR-7731", context=guard, hooks=GuardHooks())

    assert carrier.calls == ["FR-7731", "FR-7731"]
    # The model received the refusals as the tool's output, word for word.
    assert model.outputs_received(3)["call_3"] == REFUSAL
    assert model.outputs_received(4)["call_4"] == REFUSAL
    assert model.outputs_received(2)["call_2"] == "FR-7731: in transit, hub Lyon"
    # The 3rd refusal ended the turn: no 6th model call, the guard's message is the answer.
    assert model.calls == 5
    assert result.final_output == STOPPED
    assert guard.state.stop is not None and guard.state.stop.reason is StopReason.IGNORED_REFUSALS
    assert [e.kind for e in guard.events] == ["refusal", "refusal", "refusal", "stop"]


async def test_a_new_run_starts_a_new_turn(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    guard = seed_004()

    first = await Runner.run(agent, "Keep checking FR-7731", context=guard, hooks=GuardHooks())
    # Same context, same words: a new Runner.run is a new turn, so the carrier is reached twice again.
    second = await Runner.run(agent, "Keep checking FR-7731", context=guard, hooks=GuardHooks())

    assert first.final_output == second.final_output == STOPPED
    assert carrier.calls == ["FR-7731"] * 4
    assert model.calls == 10
    assert guard.state.turn == 2


async def test_a_model_that_answers_is_left_alone(carrier: Any) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("It is in Lyon.")])
    guard = seed_004()

    result = await Runner.run(parcel_agent(model, carrier), "Where is FR-7731?", context=guard, hooks=GuardHooks())

    assert result.final_output == "It is in Lyon."
    assert carrier.calls == ["FR-7731"]
    assert guard.events == []


async def test_default_policy_refuses_only_identical_calls(carrier: Any) -> None:
    numbers = ["FR-1", "FR-2", "FR-1", "FR-1", "FR-1"]
    replies = [[tool_call("track_parcel", {"tracking_number": n}, f"c{i}")] for i, n in enumerate(numbers)]
    model = ScriptedModel(*replies, [message("Done.")])
    guard = StopRepeatedCalls()  # same tool + same arguments, the 3rd with nothing changed between is refused

    result = await Runner.run(parcel_agent(model, carrier), "Track two parcels", context=guard, hooks=GuardHooks())

    # FR-2 may have changed something, so FR-1 counts from 1 again after it: its 3rd run in a row is refused.
    assert carrier.calls == ["FR-1", "FR-2", "FR-1", "FR-1"]
    assert model.outputs_received(5)["c4"].startswith("Refused: you already called track_parcel with these exact")
    assert result.final_output == "Done."


@pytest.mark.parametrize("runs", [1, 2])
async def test_run_streamed_behaves_the_same_and_streams_the_refusals(carrier: Any, runs: int) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    guard = seed_004()

    for run in range(runs):
        streamed = Runner.run_streamed(agent, "Keep checking FR-7731", context=guard, hooks=GuardHooks())
        outputs = [
            event.item.output
            async for event in streamed.stream_events()
            if event.type == "run_item_stream_event" and event.name == "tool_output"
        ]
        assert outputs == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL] * 3
        assert streamed.final_output == STOPPED
        assert model.calls == 5 * (run + 1)
        assert model.outputs_received(-1)[f"call_{5 * run + 4}"] == REFUSAL

    assert carrier.calls == ["FR-7731"] * 2 * runs


async def test_each_run_with_a_session_is_a_new_turn(carrier: Any) -> None:
    from agents import SQLiteSession

    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    guard = seed_004()
    session = SQLiteSession("parcel-chat")  # in memory; each run sends only the new message

    for _ in range(2):
        result = await Runner.run(agent, "Keep checking", context=guard, hooks=GuardHooks(), session=session)
        assert result.final_output == STOPPED

    assert carrier.calls == ["FR-7731"] * 4
    assert guard.state.turn == 2
