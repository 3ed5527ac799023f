"""Budgets from what the model reports, and misuse that must fail loudly with the right spelling."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_parcels import ARGS, USER, Carrier, parcel_agent, seed_004, thread
from repeat_hooks_langchain import RepeatGuardMiddleware, guard_state_of, stop_of, token_prices
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message, keep_calling

from repeat_hooks import Policy, StopReason, StopRepeatedCalls


def distinct_calls(messages: Any) -> AIMessage:
    """Tracks a new parcel every time: never a repeat, so only budgets can end the turn."""
    return call_message(("track_parcel", {"tracking_number": f"FR-{len(messages)}"}))


def test_usage_metadata_counts_toward_the_cost_budget(carrier: Carrier) -> None:
    # 1000 input and 500 output tokens per response at $2 / $8 per million: $0.006 a call.
    model = ScriptedChatModel(then=distinct_calls, usage=(1000, 500))
    guard = RepeatGuardMiddleware(Policy(max_calls=None, max_cost_usd=0.01), cost=token_prices(2.0, 8.0))

    result = parcel_agent(model, carrier, middleware=[guard]).invoke(USER, thread("t1"))

    assert model.calls == 2  # $0.012 spent after 2 calls: over the budget, no 3rd call
    assert len(carrier.calls) == 2
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.COST
    assert guard_state_of(result).cost_usd == pytest.approx(0.012)
    assert result["messages"][-1].content == stop.message


def test_cached_input_tokens_are_charged_at_their_own_price() -> None:
    cost = token_prices(2.0, 8.0, cached_input_usd_per_million=0.5)
    usage: Any = {
        "input_tokens": 1000,
        "output_tokens": 0,
        "total_tokens": 1000,
        "input_token_details": {"cache_read": 800},
    }
    assert cost(usage) == pytest.approx((200 * 2.0 + 800 * 0.5) / 1_000_000)
    with pytest.raises(ValueError, match=">= 0"):
        token_prices(-1.0, 8.0)


def test_max_model_calls_ends_the_turn_before_the_next_call(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=distinct_calls)

    result = parcel_agent(model, carrier, Policy(max_calls=None, max_model_calls=3)).invoke(USER, thread("t1"))

    assert model.calls == 3 and len(carrier.calls) == 3
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS


def test_a_cost_budget_without_prices_fails_at_setup() -> None:
    with pytest.raises(ValueError, match=r"cost=token_prices\(input_usd_per_million"):
        RepeatGuardMiddleware(Policy(max_cost_usd=1.0))


def test_a_time_budget_without_a_clock_fails_at_setup() -> None:
    with pytest.raises(ValueError, match=r"clock=time.monotonic"):
        RepeatGuardMiddleware(Policy(max_model_seconds=30), clock=None)


def test_a_cost_budget_with_a_model_that_reports_no_usage_fails_at_the_first_call(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))  # no usage_metadata
    guard = RepeatGuardMiddleware(Policy(max_cost_usd=1.0), cost=token_prices(2.0, 8.0))

    with pytest.raises(ValueError, match="no usage_metadata, so the budget could never trip"):
        parcel_agent(model, carrier, middleware=[guard]).invoke(USER, thread("t1"))
    assert carrier.calls == []


def test_settings_passed_to_the_middleware_instead_of_the_policy_fail_with_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"RepeatGuardMiddleware\(Policy\(max_calls=2\)\)"):
        RepeatGuardMiddleware(seed_004(), max_calls=2)  # type: ignore[call-arg]


def test_a_policy_passed_wrong_fails_with_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"a Policy instance: RepeatGuardMiddleware\(Policy\(max_calls=2\)\)"):
        RepeatGuardMiddleware(Policy)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"not a StopRepeatedCalls: the counts live in each thread's graph state"):
        RepeatGuardMiddleware(StopRepeatedCalls(max_calls=2))
    with pytest.raises(TypeError, match=r"got dict: write RepeatGuardMiddleware\(Policy\("):
        RepeatGuardMiddleware({"max_calls": 2})  # type: ignore[arg-type]


def test_the_middleware_given_twice_is_refused_by_create_agent(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    with pytest.raises(AssertionError, match="duplicate middleware"):
        create_agent(model, tools=[carrier.tool], middleware=[RepeatGuardMiddleware(seed_004())] * 2)
    with pytest.raises(AssertionError, match="duplicate middleware"):
        create_agent(
            model,
            tools=[carrier.tool],
            middleware=[RepeatGuardMiddleware(seed_004()), RepeatGuardMiddleware(Policy(max_calls=5))],
        )


def test_a_state_key_written_by_someone_else_fails_loudly(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    agent.invoke(USER, thread("t1"))
    agent.update_state(thread("t1"), {"repeat_guard": {"turn": "not a number"}})

    with pytest.raises(ValueError, match="only RepeatGuardMiddleware may write it"):
        agent.invoke(USER, thread("t1"))


def test_the_caller_cannot_pass_counters_in_the_input(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)
    assert "repeat_guard" not in agent.get_input_jsonschema()["properties"]
    assert "repeat_guard" in agent.get_output_jsonschema()["properties"]


def test_structured_output_calls_are_the_answer_not_tool_calls(carrier: Carrier) -> None:
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class ParcelStatus(BaseModel):
        """Where a parcel is."""

        tracking_number: str
        status: str

    status = {"tracking_number": "FR-7731", "status": "in transit"}
    model = ScriptedChatModel(replies=[call_message(("ParcelStatus", status))])
    guard = RepeatGuardMiddleware(Policy(max_calls=0, max_refusals=1))  # would refuse any tool call
    agent = create_agent(model, tools=[carrier.tool], middleware=[guard], response_format=ToolStrategy(ParcelStatus))

    result = agent.invoke(USER)

    assert result["structured_response"] == ParcelStatus(**status)
    assert stop_of(result) is None and guard_state_of(result).refusals == 0


@pytest.mark.parametrize("hint", [True, None], ids=["read-only-hint", "no-hint"])
def test_a_read_only_hint_in_tool_metadata_keeps_other_counts_running(carrier: Carrier, hint: bool | None) -> None:
    # MCP's readOnlyHint, as langchain-mcp-adapters puts it in BaseTool.metadata.
    @tool
    def check_weather(city: str) -> str:
        """Today's weather."""
        return f"{city}: sunny"

    check_weather.metadata = None if hint is None else {"readOnlyHint": hint}

    track = ("track_parcel", ARGS)
    model = ScriptedChatModel(
        replies=[
            call_message(track),
            call_message(track),
            call_message(("check_weather", {"city": "Lyon"})),
            call_message(track),
            AIMessage(content="done"),
        ]
    )
    agent = parcel_agent(model, carrier, Policy(max_calls=2), tools=[check_weather])  # count="progress"

    agent.invoke(USER, thread("t1"))

    if hint:  # the weather changes nothing: the 3rd identical track_parcel in a row is refused
        assert carrier.calls == ["FR-7731"] * 2
        assert model.tool_results(4)[0].startswith("Refused")
    else:  # an unknown tool may have changed something: the count restarts and the call runs
        assert carrier.calls == ["FR-7731"] * 3
