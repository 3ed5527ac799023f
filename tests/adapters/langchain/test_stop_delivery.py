"""What the caller and the model see on LangChain, beyond the kit's seed-004 story (``test_conformance``): the
refusals as ``status="error"`` ``ToolMessage``\\ s word for word, the stop as the thread's last ``AIMessage``,
the whole conversation kept on the thread, and the same through ``stream`` and ``astream``."""

from __future__ import annotations

from langchain_core.messages import AIMessage, ToolMessage
from langchain_parcels import ARGS, IN_TRANSIT, REFUSAL, STOPPED, USER, Carrier, kinds, parcel_agent, thread
from repeat_hooks_langchain import StopReason, guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling


def looping_model() -> ScriptedChatModel:
    return ScriptedChatModel(then=keep_calling("track_parcel", ARGS))


def test_the_model_reads_each_refusal_and_the_caller_gets_the_stop_as_the_last_message(carrier: Carrier) -> None:
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


def test_the_next_invoke_is_a_fresh_turn_and_the_thread_keeps_both(carrier: Carrier) -> None:
    model = looping_model()
    agent = parcel_agent(model, carrier)

    first = agent.invoke(USER, thread("t1"))
    second = agent.invoke(USER, thread("t1"))

    assert first["messages"][-1].content == second["messages"][-1].content == STOPPED
    assert carrier.calls == ["FR-7731"] * 4  # twice per turn
    state = guard_state_of(second)
    assert (state.turn.number, state.turn.refusals, state.turn.model_calls) == (2, 3, 5)
    assert len(second["messages"]) == 2 * len(first["messages"])


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
    stop = stop_of(values[-1])
    assert stop is not None and stop.message == STOPPED
