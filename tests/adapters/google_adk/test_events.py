"""What the caller and the model get on ADK's real Runner (the seed-004 story itself runs in the kit):
refusals as function responses, the stop as the agent's final event, the stop read back from the session,
one invocation one turn, streaming."""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from repeat_hooks_google_adk import STOP_METADATA, Policy, RepeatGuardPlugin, StopReason, read_state, stop_of
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call, keep_calling, text

from .conftest import ARGS, REFUSAL, STOPPED, TRACKED, USER, Carrier, new_session, run_turn, runner_for


def seed_004() -> RepeatGuardPlugin:
    return RepeatGuardPlugin(Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3))


def parcel_agent(model: ScriptedLlm, carrier: Carrier) -> LlmAgent:
    return LlmAgent(name="parcel_tracker", instruction="Track parcels.", model=model, tools=[carrier.tool])


async def test_refusals_are_function_responses_and_the_stop_is_the_agents_final_event(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(parcel_agent(model, carrier), seed_004())
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking FR-7731")

    assert carrier.calls == ["FR-7731", "FR-7731"]
    # The model read the refusals as the tool's response, word for word.
    assert model.responses_received(2) == {"call_2": {"status": TRACKED}}
    assert model.responses_received(3) == {"call_3": {"error": REFUSAL}}
    assert model.responses_received(4) == {"call_4": {"error": REFUSAL}}
    # After the 3rd refusal the model is not called again: the guard's message is the final response.
    assert model.calls == 5
    assert turn.final_text == STOPPED
    assert turn.final.author == "parcel_tracker"
    assert turn.final.custom_metadata == {STOP_METADATA: "ignored_refusals", STOP_METADATA + "_message": STOPPED}
    assert turn.tool_responses == [{"status": TRACKED}] * 2 + [{"error": REFUSAL}] * 3
    # The stop is in the session state, persisted by the session service.
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    stop = stop_of(turn.final)  # the whole Stop rides on the final event
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    assert stop_of(turn.events) == stop_of(session) == stop_of(session, invocation_id=turn.invocation_id) == stop
    state = read_state(session)
    assert [e.kind for e in state.events] == ["refusal", "refusal", "refusal", "stop"]
    assert state.turn.responses == 5


async def test_a_new_invocation_is_a_new_turn(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(parcel_agent(model, carrier), seed_004())
    session_id = await new_session(runner)

    first = await run_turn(runner, session_id, "Keep checking FR-7731")
    second = await run_turn(runner, session_id, "Keep checking FR-7731")

    assert first.final_text == second.final_text == STOPPED
    assert carrier.calls == ["FR-7731"] * 4
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    state = read_state(session)
    assert state.turn.number == 2 and state.turn.id == second.invocation_id
    # Both stops stay readable, each under its own invocation.
    stops = [stop_of(session, invocation_id=turn.invocation_id) for turn in (first, second)]
    assert stops[0] == stops[1] == stop_of(second.final) is not None


async def test_a_model_that_answers_is_left_alone(carrier: Carrier) -> None:
    model = ScriptedLlm([function_call("track_parcel", ARGS, "c1")], [text("It is in Lyon.")])
    runner = runner_for(parcel_agent(model, carrier), seed_004())
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Where is FR-7731?")

    assert turn.final_text == "It is in Lyon."
    assert turn.final.custom_metadata is None
    assert carrier.calls == ["FR-7731"]
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    assert stop_of(turn.final) is None and stop_of(session) is None


async def test_per_turn_counting_refuses_only_identical_calls(carrier: Carrier) -> None:
    numbers = ["FR-1", "FR-2", "FR-3", "FR-1", "FR-1"]
    replies = [[function_call("track_parcel", {"tracking_number": n}, f"c{i}")] for i, n in enumerate(numbers)]
    model = ScriptedLlm(*replies, [text("Done.")])
    runner = runner_for(parcel_agent(model, carrier), RepeatGuardPlugin(count="per_turn"))

    turn = await run_turn(runner, await new_session(runner), "Track three parcels")

    assert carrier.calls == ["FR-1", "FR-2", "FR-3", "FR-1"]
    assert model.responses_received(5)["c4"]["error"].startswith(
        "Refused: you already called track_parcel with these exact"
    )
    assert turn.final_text == "Done."


@pytest.mark.parametrize("turns", [1, 2])
async def test_streaming_behaves_the_same_and_streams_the_stop(carrier: Carrier, turns: int) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS, say="Checking the carrier again."))
    runner = runner_for(parcel_agent(model, carrier), seed_004())
    session_id = await new_session(runner)
    sse = RunConfig(streaming_mode=StreamingMode.SSE)

    for number in range(turns):
        turn = await run_turn(runner, session_id, "Keep checking FR-7731", run_config=sse)
        partial: list[Any] = [e for e in turn.events if e.partial]
        # Each of the 5 model calls streamed its 4 words; the guard's stop came whole, once.
        assert len(partial) == 5 * 4
        assert turn.tool_responses == [{"status": TRACKED}] * 2 + [{"error": REFUSAL}] * 3
        assert [e for e in turn.events if e.is_final_response()][-1].content.parts[0].text == STOPPED  # type: ignore[union-attr,index]
        assert model.calls == 5 * (number + 1)

    assert carrier.calls == ["FR-7731"] * 2 * turns
