"""Where the guard's stop goes (issue 12, item 10): the caller, a stream, a session, a typed output.

The SDK ends a stopped run from ``tool_use_behavior``, so no model message carries the stop text.
These tests pin what each consumer sees, and the helpers that fill the gaps (``stop_of``,
``stop_items``, ``save_stop``).
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, MaxTurnsExceeded, Runner, SQLiteSession
from pydantic import BaseModel
from repeat_hooks_openai_agents import GuardState, Policy, StopReason, guard_agent, save_stop, stop_items, stop_of
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import ToolCall

ARGS = {"tracking_number": "FR-7731"}
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."


SEED_004: dict[str, Any] = {"match": "tool", "max_calls": 2, "max_refusals": 3}


def stuck_agent(carrier: Any, **settings: Any) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = Agent(name="parcel-tracker", model=model, tools=[carrier.tool], **settings)
    return guard_agent(agent, **SEED_004), model


async def test_a_session_gets_the_stop_message_with_save_stop(carrier: Any) -> None:
    agent, model = stuck_agent(carrier)
    state = GuardState()
    session = SQLiteSession("parcel-chat")

    result = await Runner.run(agent, "Keep checking FR-7731", context=state, session=session)
    # The SDK saved the calls and the refusals, but not the text the user was given.
    assert (await session.get_items())[-1].get("type") == "function_call_output"

    assert await save_stop(session, result) is True
    assert (await session.get_items())[-1] == {"role": "assistant", "content": STOPPED}

    # The next turn's model reads what the user was told, before the new question.
    model.then = lambda n, m: [message("Still in transit.")]
    await Runner.run(agent, "Any news?", context=state, session=session)
    sent = model.requests[-1].input
    assert [i.get("content") for i in sent[-2:]] == [STOPPED, "Any news?"]


async def test_save_stop_adds_nothing_when_the_model_answered(carrier: Any) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In Lyon.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **SEED_004)
    session = SQLiteSession("parcel-chat")

    result = await Runner.run(agent, "Where?", context=GuardState(), session=session)

    assert stop_of(result) is None and stop_items(result) == []
    assert await save_stop(session, result) is False
    assert (await session.get_items())[-1]["content"][0]["text"] == "In Lyon."  # type: ignore[index,typeddict-item]


async def test_a_history_you_keep_yourself_gets_the_stop_with_stop_items(carrier: Any) -> None:
    agent, _ = stuck_agent(carrier)
    result = await Runner.run(agent, "Keep checking", context=GuardState())

    history = result.to_input_list()
    assert history[-1].get("type") == "function_call_output"  # the SDK's list ends with the last refusal
    assert [*history, *stop_items(result)][-1] == {"role": "assistant", "content": STOPPED}


async def test_a_streamed_run_has_no_message_event_for_the_stop_but_stop_of_reads_it(carrier: Any) -> None:
    agent, _ = stuck_agent(carrier)
    streamed = Runner.run_streamed(agent, "Keep checking", context=GuardState())

    names = [e.name async for e in streamed.stream_events() if e.type == "run_item_stream_event"]

    assert "message_output_created" not in names  # the stop is not a model message
    assert streamed.final_output == STOPPED
    stop = stop_of(streamed)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED


class ParcelStatus(BaseModel):
    status: str


async def test_an_output_type_agent_gets_the_stop_as_text_and_stop_of_tells_them_apart(carrier: Any) -> None:
    agent, _ = stuck_agent(carrier, output_type=ParcelStatus)
    stopped = await Runner.run(agent, "Keep checking", context=GuardState())

    assert stopped.final_output == STOPPED  # a str, not a ParcelStatus
    assert stop_of(stopped) is not None

    model = ScriptedModel([message('{"status": "in transit"}')])
    answering = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], output_type=ParcelStatus), **SEED_004)
    answered = await Runner.run(answering, "Where?", context=GuardState())
    assert stop_of(answered) is None
    assert answered.final_output == ParcelStatus(status="in transit")


@pytest.mark.parametrize("behavior", ["stop_on_first_tool", {"stop_at_tool_names": ["track_parcel"]}])
async def test_a_refused_call_never_becomes_the_callers_output(carrier: Any, behavior: Any) -> None:
    # A behaviour that ends the run on a tool's output: the refused call did not run, so its refusal (written
    # for the model) must not become the answer. The model reads it and answers instead.
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("I may not track parcels today.")])
    forbidden = Policy(limits={"track_parcel": 0})  # the tool is forbidden: its first call is refused
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], tool_use_behavior=behavior), forbidden)
    state = GuardState()

    result = await Runner.run(agent, "Where is FR-7731?", context=state)

    assert carrier.calls == []
    assert state.turn.refusals == 1
    refusal = forbidden.decide_tool_call(GuardState(), ToolCall("track_parcel", ARGS))
    assert refusal is not None and model.outputs_received(1)["c1"] == refusal.message  # the model read it
    assert result.final_output == "I may not track parcels today."
    assert model.calls == 2


async def test_max_turns_below_the_guards_limits_fires_first(carrier: Any) -> None:
    agent, model = stuck_agent(carrier)

    # The SDK's max_turns counts model calls: 3 is less than the 5 the guard needs to end this turn.
    with pytest.raises(MaxTurnsExceeded):
        await Runner.run(agent, "Keep checking", context=GuardState(), max_turns=3)
    assert model.calls == 3

    # With max_turns above the guard's limits, the guard ends the turn with its own message.
    result = await Runner.run(agent, "Keep checking", context=GuardState(), max_turns=6)
    assert result.final_output == STOPPED
