"""What the SDK shows of a guarded run, beyond the kit's story: the exact text the model reads, the stream's
events, the guard's events, and a ``Session`` whose every run is a new turn.

The seed-004 story itself (2 calls run, 3 refusals, the turn ends, the next turn counts afresh) is the
conformance kit's ``seed_004_story`` (``test_conformance.py``).
"""

from __future__ import annotations

from typing import Any

from agents import Agent, Runner, SQLiteSession
from repeat_hooks_openai_agents import GuardState, StopReason, guard_agent, stop_of
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


def parcel_agent(model: ScriptedModel, carrier: Any, **settings: Any) -> Agent[Any]:
    agent = Agent(name="parcel-tracker", instructions="Track parcels.", model=model, tools=[carrier.tool])
    return guard_agent(agent, **(settings or SEED_004))


async def test_the_model_reads_the_refusal_word_for_word_and_the_caller_the_stop(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    state = GuardState()

    result = await Runner.run(parcel_agent(model, carrier), "Keep checking FR-7731", context=state)

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model.outputs_received(2)["call_2"] == "FR-7731: in transit, hub Lyon"
    assert model.outputs_received(3)["call_3"] == REFUSAL
    assert model.outputs_received(4)["call_4"] == REFUSAL
    assert model.calls == 5  # the 3rd refusal ended the turn: no 6th model call
    assert result.final_output == STOPPED
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    assert [e.kind for e in state.events] == ["refusal", "refusal", "refusal", "stop"]


async def test_a_model_that_answers_is_left_alone(carrier: Any) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("It is in Lyon.")])
    state = GuardState()

    result = await Runner.run(parcel_agent(model, carrier), "Where is FR-7731?", context=state)

    assert result.final_output == "It is in Lyon." and stop_of(result) is None
    assert carrier.calls == ["FR-7731"]
    assert state.events == []


async def test_the_default_policy_refuses_a_third_identical_call_with_nothing_changed(carrier: Any) -> None:
    numbers = ["FR-1", "FR-2", "FR-1", "FR-1", "FR-1"]
    replies = [[tool_call("track_parcel", {"tracking_number": n}, f"c{i}")] for i, n in enumerate(numbers)]
    model = ScriptedModel(*replies, [message("Done.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]))  # Policy()

    result = await Runner.run(agent, "Track two parcels", context=GuardState())

    # FR-2 may have changed something, so FR-1 counts from 1 again after it: its 3rd run in a row is refused.
    assert carrier.calls == ["FR-1", "FR-2", "FR-1", "FR-1"]
    assert model.outputs_received(5)["c4"].startswith("Refused: you already called track_parcel with these exact")
    assert result.final_output == "Done."


async def test_run_streamed_streams_the_refusals_as_tool_outputs(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    state = GuardState()

    for run in range(2):
        streamed = Runner.run_streamed(agent, "Keep checking FR-7731", context=state)
        outputs = [
            event.item.output
            async for event in streamed.stream_events()
            if event.type == "run_item_stream_event" and event.name == "tool_output"
        ]
        assert outputs == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL] * 3
        assert streamed.final_output == STOPPED and stop_of(streamed) is not None
        assert model.calls == 5 * (run + 1)

    assert carrier.calls == ["FR-7731"] * 4
    assert state.turn.number == 2


async def test_each_run_with_a_session_is_a_new_turn(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    state = GuardState()
    session = SQLiteSession("parcel-chat")  # in memory; each run sends only the new message

    for _ in range(2):
        result = await Runner.run(agent, "Keep checking", context=state, session=session)
        assert result.final_output == STOPPED

    assert carrier.calls == ["FR-7731"] * 4
    assert state.turn.number == 2 and state.turn.id == "turn-2"


def test_a_run_state_context_saved_by_0_1_restores_its_counts() -> None:
    # 0.1 kept a whole StopRepeatedCalls (settings and counts) as the run context of a paused RunState.
    import json
    from pathlib import Path

    from repeat_hooks_openai_agents import context_deserializer

    saved = Path(__file__).resolve().parents[2] / "core" / "data" / "guard_0_1.json"
    state = context_deserializer(json.loads(saved.read_text()))
    assert (state.turn.id, state.turn.refusals, state.turn.model_calls) == ("t1", 2, 1)
