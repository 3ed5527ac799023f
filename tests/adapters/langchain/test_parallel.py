"""Parallel tool calls of one ``AIMessage`` are decided together, in order, and counted exactly."""

from __future__ import annotations

from langchain_core.messages import AIMessage, ToolMessage
from langchain_parcels import ARGS, IN_TRANSIT, USER, Carrier, parcel_agent, thread
from repeat_hooks_langchain import guard_state_of
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message

from repeat_hooks import Policy

DONE = AIMessage(content="It is in transit.")


def tool_messages(result: dict[str, object]) -> list[ToolMessage]:
    messages = result["messages"]
    assert isinstance(messages, list)
    return [m for m in messages if isinstance(m, ToolMessage)]


def test_three_identical_parallel_calls_with_max_two_refuse_exactly_one(carrier: Carrier) -> None:
    model = ScriptedChatModel(replies=[call_message(*[("track_parcel", ARGS)] * 3), DONE])
    agent = parcel_agent(model, carrier, Policy(max_calls=2, max_refusals=3))

    result = agent.invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    answers = tool_messages(result)
    assert len(answers) == 3  # every call got its ToolMessage
    refused = [m for m in answers if m.status == "error"]
    assert len(refused) == 1 and str(refused[0].content).startswith("Refused: you already called track_parcel")
    # The refused one is the 3rd call of the message, decided in order: it left tool_calls (nothing after the
    # model node sees it as a call to make) for invalid_tool_calls, which the model reads as a call it made.
    response = result["messages"][1]
    assert len(response.tool_calls) == 2
    assert [(call["id"], call["error"]) for call in response.invalid_tool_calls] == [
        (refused[0].tool_call_id, refused[0].content)
    ]
    assert response.invalid_tool_calls[0]["id"].startswith("call_0_2_")  # the 3rd call's own id
    assert sorted(model.tool_results(1)) == sorted([IN_TRANSIT, IN_TRANSIT, str(refused[0].content)])
    state = guard_state_of(result)
    assert (state.turn.refusals, sorted(state.turn.counts.values())) == (1, [3])


async def test_parallel_calls_run_concurrently_under_ainvoke_and_still_count_exactly(carrier: Carrier) -> None:
    model = ScriptedChatModel(
        replies=[call_message(*[("track_parcel", ARGS)] * 5), call_message(("track_parcel", ARGS)), DONE]
    )
    agent = parcel_agent(model, carrier, Policy(max_calls=2, max_refusals=10))

    result = await agent.ainvoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert [m.status for m in tool_messages(result)].count("error") == 4  # 3 of the batch, then the lone call
    assert guard_state_of(result).turn.refusals == 4


def test_different_arguments_in_one_message_all_run(carrier: Carrier) -> None:
    numbers = ["FR-1", "FR-2", "FR-3"]
    model = ScriptedChatModel(
        replies=[call_message(*[("track_parcel", {"tracking_number": n}) for n in numbers]), DONE]
    )

    result = parcel_agent(model, carrier, Policy(max_calls=1)).invoke(USER, thread("t1"))

    assert sorted(carrier.calls) == numbers
    assert all(m.status == "success" for m in tool_messages(result))


def with_ids(message: AIMessage, *ids: str) -> AIMessage:
    """``message`` with its calls' ids set (a model layer that gets ids wrong)."""
    calls = [{**call, "id": call_id} for call, call_id in zip(message.tool_calls, ids, strict=True)]
    return AIMessage(content=message.content, tool_calls=calls)


def test_empty_call_ids_still_refuse_the_right_call_and_the_model_reads_the_refusal(carrier: Carrier) -> None:
    # Issue 16 item 7: an empty id must neither let a refused call run nor stop the turn for refusals the
    # model never read.
    batch = with_ids(call_message(*[("track_parcel", ARGS)] * 3), "", "", "")
    model = ScriptedChatModel(replies=[batch, batch, DONE])
    agent = parcel_agent(model, carrier, Policy(max_calls=2, max_refusals=3))

    result = agent.invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]  # 2 of the first batch; the rest refused
    # The refusal answers its call in the model node, before the tool node's results.
    assert [text[:8] for text in model.tool_results(1)] == ["Refused:", IN_TRANSIT[:8], IN_TRANSIT[:8]]
    ids = [call["id"] for call in model.received[1][-4].tool_calls + model.received[1][-4].invalid_tool_calls]
    assert ids == [
        "call_0",
        "call_1",
        "call_2",
    ]  # an id of its own for each call, so LangChain tells answered from pending
    assert [text[:8] for text in model.tool_results(2)] == ["Refused:"] * 3
    assert guard_state_of(result).turn.refusals == 4  # every refusal counted was read by the model
    assert result["messages"][-1].content == "It is in transit."  # 2 responses refused: under the limit of 3


def test_one_call_id_used_for_three_identical_calls_refuses_exactly_one(carrier: Carrier) -> None:
    batch = with_ids(call_message(*[("track_parcel", ARGS)] * 3), "call_0", "call_0", "call_0")
    model = ScriptedChatModel(replies=[batch, DONE])

    result = parcel_agent(model, carrier, Policy(max_calls=2)).invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert [m.status for m in tool_messages(result)] == ["error", "success", "success"]
    assert [m.tool_call_id for m in tool_messages(result)] == ["call_0_2", "call_0_0", "call_0_1"]
    assert guard_state_of(result).turn.refusals == 1


def test_one_call_id_for_different_calls_records_each_result_against_its_own_call(carrier: Carrier) -> None:
    # Three parcels under one id: each ToolMessage (all answering "call_0") is paired with its own call.
    numbers = ["FR-1", "FR-2", "FR-3"]
    batch = with_ids(call_message(*[("track_parcel", {"tracking_number": n}) for n in numbers]), *["call_0"] * 3)
    model = ScriptedChatModel(replies=[batch, DONE])

    result = parcel_agent(model, carrier, Policy()).invoke(USER, thread("t1"))

    assert sorted(carrier.calls) == numbers
    marks = guard_state_of(result).turn.marks
    assert len(marks) == 3 and all(mark.ok and mark.outcome for mark in marks.values())
