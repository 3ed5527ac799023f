"""Budgets from what the model reports, tools' effect hints, and misuse that must fail loudly with the right
spelling."""

from __future__ import annotations

import re
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_parcels import ARGS, USER, Carrier, parcel_agent, seed_004, thread
from repeat_hooks_langchain import (
    Policy,
    RepeatGuardMiddleware,
    StopReason,
    TokenPrices,
    guard_state_of,
    stop_of,
)
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, call_message, keep_calling

from repeat_hooks import GuardSetupError, StateCorrupt, StopRepeatedCalls


def distinct_calls(messages: Any) -> AIMessage:
    """Tracks a new parcel every time: never a repeat, so only budgets can end the turn."""
    return call_message(("track_parcel", {"tracking_number": f"FR-{len(messages)}"}))


def test_usage_metadata_counts_toward_the_cost_budget(carrier: Carrier) -> None:
    # 1000 input and 500 output tokens per response at $2 / $8 per million: $0.006 a call.
    model = ScriptedChatModel(then=distinct_calls, usage=(1000, 500))
    guard = RepeatGuardMiddleware(Policy(max_calls=None, max_cost_usd=0.01), cost=TokenPrices(2.0, 8.0))

    result = parcel_agent(model, carrier, middleware=[guard]).invoke(USER, thread("t1"))

    assert model.calls == 2  # $0.012 spent after 2 calls: over the budget, no 3rd call
    assert len(carrier.calls) == 2
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.COST
    assert guard_state_of(result).turn.cost_usd == pytest.approx(0.012)
    assert result["messages"][-1].content == stop.message


def test_cached_input_tokens_are_charged_at_their_own_price() -> None:
    cost = TokenPrices(2.0, 8.0, cached_input_usd_per_million=0.5)
    usage: Any = {
        "input_tokens": 1000,
        "output_tokens": 0,
        "total_tokens": 1000,
        "input_token_details": {"cache_read": 800},
    }
    assert cost(usage) == pytest.approx((200 * 2.0 + 800 * 0.5) / 1_000_000)
    with pytest.raises(ValueError, match=">= 0"):
        TokenPrices(-1.0, 8.0)


def test_max_model_calls_ends_the_turn_before_the_next_call(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=distinct_calls)

    result = parcel_agent(model, carrier, Policy(max_calls=None, max_model_calls=3)).invoke(USER, thread("t1"))

    assert model.calls == 3 and len(carrier.calls) == 3
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS


def test_a_cost_budget_without_prices_fails_at_setup() -> None:
    with pytest.raises(GuardSetupError, match=r"max_cost_usd=.*cost=TokenPrices\(input_usd_per_million"):
        RepeatGuardMiddleware(Policy(max_cost_usd=1.0))


def test_a_time_budget_without_a_clock_fails_at_setup() -> None:
    with pytest.raises(GuardSetupError, match=r"max_model_seconds=.*clock=repeat_hooks.kit.monotonic"):
        RepeatGuardMiddleware(Policy(max_model_seconds=30), clock=None)


def test_a_cost_budget_with_a_model_that_reports_no_usage_fails_at_the_first_call(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))  # no usage_metadata
    guard = RepeatGuardMiddleware(Policy(max_cost_usd=1.0), cost=TokenPrices(2.0, 8.0))

    with pytest.raises(GuardSetupError, match="no usage_metadata, so the budget could never trip"):
        parcel_agent(model, carrier, middleware=[guard]).invoke(USER, thread("t1"))
    assert carrier.calls == []


def test_the_policy_is_given_as_a_policy_or_as_keywords_or_not_at_all() -> None:
    assert RepeatGuardMiddleware().policy == Policy()
    assert RepeatGuardMiddleware(max_calls=2, max_refusals=3).policy == Policy(max_calls=2, max_refusals=3)
    assert RepeatGuardMiddleware(seed_004()).policy == seed_004()


def test_settings_given_both_ways_or_misspelled_fail_with_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"a Policy or the settings as keywords, not both: put max_calls inside"):
        RepeatGuardMiddleware(seed_004(), max_calls=2)
    with pytest.raises(TypeError, match=r"unknown setting 'max_call' \(did you mean max_calls\?\)"):
        RepeatGuardMiddleware(max_call=2)


def test_a_policy_passed_wrong_fails_with_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"not the class Policy: pass RepeatGuardMiddleware\(Policy\(\.\.\.\)\)"):
        RepeatGuardMiddleware(Policy)
    with pytest.raises(TypeError, match=r"not a StopRepeatedCalls \(which holds one conversation's counts\)"):
        RepeatGuardMiddleware(StopRepeatedCalls(max_calls=2))
    with pytest.raises(TypeError, match=r"not dict: RepeatGuardMiddleware\(Policy\(\.\.\.\)\)"):
        RepeatGuardMiddleware({"max_calls": 2})


def test_a_tool_named_in_the_policy_that_the_agent_lacks_fails_at_the_first_model_call(carrier: Carrier) -> None:
    # A model that would answer at once, without a tool call: the typo is still caught, before the model is
    # called (the model call's request carries the agent's tools).
    model = ScriptedChatModel(then=answer("It is in transit."))
    agent = parcel_agent(model, carrier, Policy(limits={"track_parcels": 1}))

    with pytest.raises(GuardSetupError, match=r"limits=...\) names 'track_parcels'.*did you mean 'track_parcel'"):
        agent.invoke(USER, thread("t1"))
    assert model.calls == 0 and carrier.calls == []


class OfferOnlyTracking(AgentMiddleware[Any, Any, Any]):
    """A tool selector: offers the model only ``track_parcel``."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request.override(tools=[t for t in request.tools if t.name == "track_parcel"]))


@tool
def cancel_parcel(tracking_number: str) -> str:
    """Cancel a parcel."""
    return "cancelled"


def test_a_tool_selector_listed_after_the_guard_leaves_the_check_every_tool(carrier: Carrier) -> None:
    # The selector narrows the model call's tools inside the guard: the policy names a tool the agent has but
    # this model call was not offered: no error, and the limit still applies.
    model = ScriptedChatModel(replies=[keep_calling("track_parcel", ARGS)] * 2 + [answer("done")])
    guard = RepeatGuardMiddleware(Policy(limits={"cancel_parcel": 0, "track_parcel": 1}))
    agent = parcel_agent(model, carrier, middleware=[guard, OfferOnlyTracking()], tools=[cancel_parcel])

    result = agent.invoke(USER, thread("t1"))

    assert model.tools_offered == ["track_parcel"]
    assert carrier.calls == ["FR-7731"] and model.tool_results(2)[0].startswith("Refused")
    assert result["messages"][-1].content == "done"


def test_a_tool_selector_listed_before_the_guard_that_hides_a_named_tool_fails_naming_the_order(
    carrier: Carrier,
) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    guard = RepeatGuardMiddleware(Policy(limits={"cancel_parcel": 0}))
    agent = parcel_agent(model, carrier, middleware=[OfferOnlyTracking(), guard], tools=[cancel_parcel])

    with pytest.raises(GuardSetupError, match=r"names 'cancel_parcel'.*list that middleware after the guard"):
        agent.invoke(USER, thread("t1"))
    assert model.calls == 0 and carrier.calls == []


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


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_a_state_key_written_by_someone_else_is_an_outage_logged_with_the_key(
    carrier: Carrier, fail: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The kit's outage rule, as for a store that fails: logged (naming the key and how to recover), then
    # fail="open" lets the calls run unguarded, fail="closed" ends the turn with the store-down stop.
    track = keep_calling("track_parcel", ARGS)
    model = ScriptedChatModel(replies=[track] * 4 + [answer("done"), track, answer("done")])
    agent = parcel_agent(model, carrier, middleware=[RepeatGuardMiddleware(seed_004(), fail=fail)])  # type: ignore[arg-type]
    agent.invoke(USER, thread("t1"))
    agent.update_state(thread("t1"), {"repeat_guard": {"turn": "not a number"}})
    carrier.calls.clear()

    result = agent.invoke(USER, thread("t1"))

    assert re.search(r"only RepeatGuardMiddleware may write it.*delete it", caplog.text)
    stop = stop_of(result)
    if fail == "open":
        assert stop is None and result["messages"][-1].content == "done" and carrier.calls == ["FR-7731"]
    else:
        assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE and carrier.calls == []
        assert result["messages"][-1].content == stop.message
    with pytest.raises(StateCorrupt, match=r"only RepeatGuardMiddleware may write it"):
        guard_state_of(result)


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
    assert stop_of(result) is None and guard_state_of(result).turn.refusals == 0


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


@pytest.mark.parametrize(
    "annotations",
    [{"destructiveHint": True, "idempotentHint": False}, {"destructiveHint": None, "idempotentHint": None}, None],
    ids=["destructive-not-idempotent", "annotations-unset", "no-annotations"],
)
def test_a_destructive_write_is_not_sent_twice_when_the_tool_says_so(annotations: dict[str, Any] | None) -> None:
    # MCP's effect hints, as langchain-mcp-adapters puts them in BaseTool.metadata (unset ones as None).
    placed: list[str] = []

    @tool
    def place_order(item: str) -> str:
        """Order an item."""
        placed.append(item)
        return f"order ORD-{len(placed)} placed: {item}"  # a new receipt every time

    place_order.metadata = annotations
    model = ScriptedChatModel(replies=[call_message(("place_order", {"item": "box"}))] * 3 + [answer("Ordered.")])
    agent = create_agent(model, tools=[place_order], middleware=[RepeatGuardMiddleware()])

    agent.invoke(USER)

    if annotations and annotations["destructiveHint"]:  # the order went through: never sent again unchanged
        assert placed == ["box"]
        assert [model.tool_results(n)[0][:8] for n in (2, 3)] == ["Refused:"] * 2
    else:  # nothing says it is a write, and each receipt is new: progress, so it runs
        assert placed == ["box"] * 3


def test_reading_the_stop_of_an_agent_without_the_guard_says_the_middleware_is_missing(carrier: Carrier) -> None:
    agent = create_agent(ScriptedChatModel(then=answer("In transit.")), tools=[carrier.tool])
    result = agent.invoke(USER)

    for read in (stop_of, guard_state_of):
        with pytest.raises(GuardSetupError, match=r"runs without RepeatGuardMiddleware \(create_agent\(model, tools"):
            read(result)


def test_stop_of_something_other_than_a_result_says_what_it_reads(carrier: Carrier) -> None:
    agent = create_agent(ScriptedChatModel(then=answer("In transit.")), tools=[carrier.tool])
    result = agent.invoke(USER)
    with pytest.raises(GuardSetupError, match=r"stop_of takes what invoke / ainvoke returned .*; got list"):
        stop_of(result["messages"])  # type: ignore[arg-type]


def test_the_0_2_module_refusal_still_imports_each_name_with_a_warning_naming_its_home() -> None:
    from repeat_hooks_langchain import calls

    with pytest.deprecated_call(match=r"refusal\.refuse is deprecated: use repeat_hooks_langchain\.calls\.refuse"):
        from repeat_hooks_langchain.refusal import refuse
    assert refuse is calls.refuse
    from repeat_hooks_langchain import refusal

    with pytest.raises(AttributeError, match=r"refusal\.kept_positions is gone: refuse\(\.\.\.\) keeps the calls"):
        refusal.kept_positions  # noqa: B018
