"""Next to LangChain's own middleware, in either order: call limits, model-call limits, summarization,
human approval. The guard's story (2 calls reach the carrier, refusals, the stop) holds in each case."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    SummarizationMiddleware,
    ToolCallLimitMiddleware,
)
from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage
from langchain_parcels import ARGS, REFUSAL, STOPPED, USER, Carrier, parcel_agent, seed_004, thread
from langgraph.types import Command
from repeat_hooks_langchain import RepeatGuardMiddleware, guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, keep_calling

from repeat_hooks import StopReason

ORDERS = pytest.mark.parametrize("guard_first", [True, False], ids=["guard-first", "guard-last"])


def ordered(guard_first: bool, other: Any) -> list[Any]:
    guard = RepeatGuardMiddleware(seed_004())
    return [guard, other] if guard_first else [other, guard]


def looping_model() -> ScriptedChatModel:
    return ScriptedChatModel(then=keep_calling("track_parcel", ARGS))


@ORDERS
def test_tool_call_limit_blocks_on_its_own_count_and_the_guard_still_ends_the_turn(
    guard_first: bool, carrier: Carrier
) -> None:
    # LangChain's limit (by tool name, per run) would let the model loop on blocked calls until the
    # recursion limit; the guard counts those repeats too and ends the turn.
    limit = ToolCallLimitMiddleware(tool_name="track_parcel", run_limit=3)
    model = looping_model()

    result = parcel_agent(model, carrier, middleware=ordered(guard_first, limit)).invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model.tool_results(3) == [REFUSAL]
    assert "Tool call limit exceeded" in model.tool_results(4)[0]  # LangChain's own text, from its block
    assert result["messages"][-1].content == STOPPED
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert model.calls == 5


@ORDERS
def test_model_call_limit_that_trips_first_ends_the_turn_with_its_message(guard_first: bool, carrier: Carrier) -> None:
    limit = ModelCallLimitMiddleware(run_limit=3, exit_behavior="end")
    model = looping_model()

    result = parcel_agent(model, carrier, middleware=ordered(guard_first, limit)).invoke(USER, thread("t1"))

    assert model.calls == 3
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert "limit" in str(result["messages"][-1].content).lower()
    assert stop_of(result) is None
    assert guard_state_of(result).turn.refusals == 1


@ORDERS
def test_model_call_limit_above_the_guard_leaves_the_stop_to_the_guard(guard_first: bool, carrier: Carrier) -> None:
    limit = ModelCallLimitMiddleware(run_limit=10, exit_behavior="end")
    model = looping_model()

    result = parcel_agent(model, carrier, middleware=ordered(guard_first, limit)).invoke(USER, thread("t1"))

    assert (model.calls, len(carrier.calls), result["messages"][-1].content) == (5, 2, STOPPED)


@ORDERS
def test_summarization_rewriting_the_history_mid_turn_loses_no_count(guard_first: bool, carrier: Carrier) -> None:
    summarizer = ScriptedChatModel(then=answer("The user wants FR-7731 tracked; it is in transit."))
    summarize = SummarizationMiddleware(summarizer, trigger=("messages", 6), keep=("messages", 2))
    model = looping_model()

    result = parcel_agent(model, carrier, middleware=ordered(guard_first, summarize)).invoke(USER, thread("t1"))

    assert summarizer.calls >= 1  # the history was summarized during the turn
    assert not any(isinstance(m, RemoveMessage) for m in result["messages"])
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert result["messages"][-1].content == STOPPED
    state = guard_state_of(result)
    assert (state.turn.refusals, state.turn.model_calls) == (3, 5)


@ORDERS
def test_human_approval_then_the_guard_refuses_the_approved_repeat(guard_first: bool, carrier: Carrier) -> None:
    approval = HumanInTheLoopMiddleware(interrupt_on={"track_parcel": True})
    model = looping_model()
    agent = parcel_agent(model, carrier, middleware=ordered(guard_first, approval))

    result = agent.invoke(USER, thread("t1"))
    interrupts = 0
    while result.get("__interrupt__"):
        interrupts += 1
        assert interrupts < 10, "the turn never ended"
        result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread("t1"))

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)][2:] == [REFUSAL] * 3
    assert result["messages"][-1].content == STOPPED
    assert guard_state_of(result).turn.number == 1  # resuming is not a new turn


@ORDERS
def test_a_call_the_reviewer_rejects_never_runs_but_the_model_asked_for_it(guard_first: bool, carrier: Carrier) -> None:
    # Every call the model asks for counts, whoever answers it: asking again after a rejection is a repeat.
    approval = HumanInTheLoopMiddleware(interrupt_on={"track_parcel": True})
    model = ScriptedChatModel(
        replies=[keep_calling("track_parcel", ARGS)] * 3 + [AIMessage(content="OK, I will stop tracking it.")]
    )
    agent = parcel_agent(model, carrier, middleware=ordered(guard_first, approval))

    agent.invoke(USER, thread("t1"))
    agent.invoke(Command(resume={"decisions": [{"type": "reject", "message": "Not now."}]}), thread("t1"))
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread("t1"))
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread("t1"))

    assert carrier.calls == ["FR-7731"]  # the rejected call never ran; the approved 3rd ask was refused
    answers = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answers[0] == "User rejected the tool call for `track_parcel` with reason: Not now."
    assert answers[1:] == ["FR-7731: in transit, hub Lyon", REFUSAL]
    assert result["messages"][-1].content == "OK, I will stop tracking it."
