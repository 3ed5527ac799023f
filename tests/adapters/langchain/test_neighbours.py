"""Next to LangChain's own middleware, in either order: call limits, model-call limits, summarization
(human approval: ``test_review``). The guard's story (2 calls reach the carrier, refusals, the stop) holds in
each case."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import (
    ModelCallLimitMiddleware,
    SummarizationMiddleware,
    ToolCallLimitMiddleware,
)
from langchain_core.messages import RemoveMessage
from langchain_parcels import ARGS, REFUSAL, STOPPED, USER, Carrier, parcel_agent, seed_004, thread
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
    # recursion limit; the guard counts those repeats too and ends the turn. A call the guard refused never
    # reaches the limit (it is no longer among the response's tool_calls), so only the 2 calls it allowed count
    # there: the 2nd is LangChain's to block.
    limit = ToolCallLimitMiddleware(tool_name="track_parcel", run_limit=1)
    model = looping_model()

    result = parcel_agent(model, carrier, middleware=ordered(guard_first, limit)).invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731"]
    assert "Tool call limit exceeded" in model.tool_results(2)[0]  # LangChain's own text, from its block
    assert model.tool_results(3) == model.tool_results(4) == [REFUSAL]
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
def test_model_call_limit_counts_only_the_real_model_calls_when_the_guard_stops(
    guard_first: bool, carrier: Carrier
) -> None:
    # The guard ends the turn through the agent's own end jump, before the model node: no model call is made,
    # so LangChain's limit counts 5 for 5 real calls (a stop answered in the model's place would count 6 and
    # trip the thread's limit of 11 one call early in the next turn).
    limit = ModelCallLimitMiddleware(thread_limit=11, exit_behavior="end")
    model = looping_model()
    agent = parcel_agent(model, carrier, middleware=ordered(guard_first, limit))

    first = agent.invoke(USER, thread("t1"))
    assert (model.calls, agent.get_state(thread("t1")).values["thread_model_call_count"]) == (5, 5)
    assert first["messages"][-1].content == STOPPED

    second = agent.invoke(USER, thread("t1"))
    assert (model.calls, agent.get_state(thread("t1")).values["thread_model_call_count"]) == (10, 10)
    assert second["messages"][-1].content == STOPPED  # the guard's stop, not the limit's
    assert carrier.calls == ["FR-7731"] * 4


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
