"""Seed 004 on the real ``create_agent`` loop: 2 calls reach the tool, 3 refusals, the stop ends the turn."""

from __future__ import annotations

from langchain_core.messages import AIMessage, ToolMessage
from langchain_parcels import ARGS, IN_TRANSIT, REFUSAL, STOPPED, USER, Carrier, kinds, parcel_agent, thread
from repeat_hooks_langchain import guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling

from repeat_hooks import Policy, StopReason


def looping_model() -> ScriptedChatModel:
    return ScriptedChatModel(then=keep_calling("track_parcel", ARGS))


def test_two_calls_reach_the_carrier_then_refusals_then_the_turn_ends(carrier: Carrier) -> None:
    model = looping_model()

    result = parcel_agent(model, carrier).invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    # The model read the carrier's answer twice, then the refusal as the tool's result, word for word.
    assert [model.tool_results(n) for n in range(1, 5)] == [[IN_TRANSIT], [IN_TRANSIT], [REFUSAL], [REFUSAL]]
    # The 3rd refusal ended the turn: no 6th model call; the caller's last message is the stop message.
    assert model.calls == 5
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and last.content == STOPPED and not last.tool_calls
    assert kinds(result["messages"]) == ["human"] + ["ai", "tool"] * 5 + ["ai"]
    refusals = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert [m.content for m in refusals] == [REFUSAL] * 3
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED


def test_the_next_invoke_is_a_fresh_turn_on_the_same_thread(carrier: Carrier) -> None:
    model = looping_model()
    agent = parcel_agent(model, carrier)

    first = agent.invoke(USER, thread("t1"))
    second = agent.invoke(USER, thread("t1"))

    assert first["messages"][-1].content == second["messages"][-1].content == STOPPED
    assert carrier.calls == ["FR-7731"] * 4  # twice per turn
    assert model.calls == 10
    state = guard_state_of(second)
    assert (state.turn, state.refusals, state.model_calls) == (2, 3, 5)
    # The thread kept the whole conversation: both turns are in it.
    assert len(second["messages"]) == 2 * len(first["messages"])


async def test_ainvoke_tells_the_same_story(carrier: Carrier) -> None:
    model = looping_model()
    agent = parcel_agent(model, carrier)

    result = await agent.ainvoke(USER, thread("t1"))
    again = await agent.ainvoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731"] * 4
    assert model.calls == 10
    assert result["messages"][-1].content == again["messages"][-1].content == STOPPED
    assert [model.tool_results(n) for n in (3, 4, 8, 9)] == [[REFUSAL]] * 4
    assert guard_state_of(again).turn == 2


def test_stream_shows_the_refusals_as_tool_messages_and_ends_with_the_stop(carrier: Carrier) -> None:
    model = looping_model()
    agent = parcel_agent(model, carrier)

    streamed = [
        message
        for update in agent.stream(USER, thread("t1"), stream_mode="updates")
        for node in update.values()
        if isinstance(node, dict)
        for message in node.get("messages", [])
    ]

    tool_texts = [m.content for m in streamed if isinstance(m, ToolMessage)]
    assert tool_texts == [IN_TRANSIT, IN_TRANSIT, REFUSAL, REFUSAL, REFUSAL]
    assert isinstance(streamed[-1], AIMessage) and streamed[-1].content == STOPPED
    assert carrier.calls == ["FR-7731", "FR-7731"]
    # A second stream on the thread is a new turn.
    list(agent.stream(USER, thread("t1")))
    assert carrier.calls == ["FR-7731"] * 4


async def test_astream_ends_with_the_stop_message(carrier: Carrier) -> None:
    model = looping_model()
    agent = parcel_agent(model, carrier)

    values = [chunk async for chunk in agent.astream(USER, thread("t1"), stream_mode="values")]

    assert values[-1]["messages"][-1].content == STOPPED
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert stop_of(values[-1]) is not None


def test_a_model_that_reads_the_refusal_and_answers_finishes_normally(carrier: Carrier) -> None:
    calls = keep_calling("track_parcel", ARGS)
    model = ScriptedChatModel(replies=[calls, calls, calls, AIMessage(content="It is in transit at the Lyon hub.")])

    result = parcel_agent(model, carrier).invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model.tool_results(3) == [REFUSAL]
    assert result["messages"][-1].content == "It is in transit at the Lyon hub."
    assert stop_of(result) is None
    assert guard_state_of(result).refusals == 1


def test_the_default_progress_counting_tells_the_same_story_when_nothing_changes(carrier: Carrier) -> None:
    # count="progress" (the default): the same call, the same result, nothing else ran in between.
    model = looping_model()
    agent = parcel_agent(model, carrier, Policy(match="tool", max_calls=2, max_refusals=3))

    result = agent.invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    refusal = model.tool_results(3)[0]
    assert refusal.startswith("Refused: you already called track_parcel 2 times, and nothing has changed since")
    assert model.tool_results(4) == [refusal]
    assert model.calls == 5
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result["messages"][-1].content == stop.message
