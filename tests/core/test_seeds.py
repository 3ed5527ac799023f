"""Each seed document's guard, reproduced as a repeat-hooks configuration."""

from __future__ import annotations

from typing import Any

import pytest

from repeat_hooks import RefusalKind, StopReason, StopRepeatedCalls, ToolCall

from .recorded import Step, play

# --- seed 000: the trading agent's LoopGuard(maximum_identical_calls=3) ---------------------------


def test_seed_000_identical_calls_refused_past_three() -> None:
    guard = StopRepeatedCalls(count="per_turn", max_calls=3)
    guard.pre_agent_turn(turn_id="t1")
    order = {"symbol": "ACME", "side": "buy", "quantity": 10}
    decisions = [guard.pre_tool_call(ToolCall("place_order", dict(reversed(order.items())))) for _ in range(5)]
    assert [d is None for d in decisions] == [True, True, True, False, False]
    refusal = decisions[3]
    assert refusal is not None and refusal.reason is RefusalKind.REPEAT
    assert "place_order" in refusal.message and "3 times" in refusal.message
    assert "earlier results" in refusal.message
    # other arguments are another call; a new turn forgets
    assert guard.pre_tool_call(ToolCall("place_order", {**order, "quantity": 11})) is None
    guard.pre_agent_turn(turn_id="t2")
    assert guard.pre_tool_call(ToolCall("place_order", order)) is None


# --- seed 001: tool-loop-guard, window 8, threshold 3, canonical JSON, ignored request_id ----------


def seed_001() -> StopRepeatedCalls:
    return StopRepeatedCalls(count="per_turn", window=8, max_calls=2, ignore_arguments={"request_id"})


def test_seed_001_third_repeat_in_window_trips() -> None:
    guard = seed_001()
    args = {"q": "anthropic prompt cache"}
    assert guard.pre_tool_call(ToolCall("search", args)) is None
    assert guard.pre_tool_call(ToolCall("search", '{"q": "anthropic prompt cache"}')) is None
    refusal = guard.pre_tool_call(ToolCall("search", args))
    assert refusal is not None
    event = guard.events[-1]
    assert (event.tool, event.count, event.limit) == ("search", 3, 2)


def test_seed_001_repeats_spread_wider_than_the_window_do_not_trip() -> None:
    guard = seed_001()
    args = {"q": "x"}
    for round_ in range(4):
        assert guard.pre_tool_call(ToolCall("search", args)) is None, round_
        for other in range(4):  # 4 other calls: the previous search slides toward the window's edge
            assert guard.pre_tool_call(ToolCall("fetch", {"page": round_ * 10 + other})) is None


def test_seed_001_key_order_and_spacing_do_not_matter() -> None:
    guard = seed_001()
    assert guard.pre_tool_call(ToolCall("f", {"a": 1, "b": 2})) is None
    assert guard.pre_tool_call(ToolCall("f", {"b": 2, "a": 1})) is None
    assert guard.pre_tool_call(ToolCall("f", '{"b": 2, "a": 1}')) is not None


def test_seed_001_request_id_is_ignored_at_any_depth() -> None:
    guard = seed_001()
    for n in range(2):
        call = ToolCall("f", {"request_id": f"r{n}", "query": {"text": "a", "request_id": n}})
        assert guard.pre_tool_call(call) is None
    assert guard.pre_tool_call(ToolCall("f", {"request_id": "r9", "query": {"text": "a"}})) is not None


# --- seed 002: "Control the execution loop", the five recorded gemma3:4b runs and T-90601 ----------

SEED_002: dict[str, Any] = {
    "count": "per_turn",  # every identical call in the run counts
    "max_calls": 1,  # a repeat of a success is refused...
    "count_failures": False,  # ...a repeat after a failure is not
    "max_refusals": 0,  # and the refusal ends the run: repeated_call
    "max_errors_in_a_row": 3,
    "max_model_calls": 8,
    "max_model_seconds": 120,
    "max_cost_usd": 0.05,
}


def seconds(cumulative: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)]


def t_80001() -> list[Step]:
    times = seconds([3.3, 10.0, 16.2, 20.1, 24.0, 28.0, 31.9, 35.9, 40.0, 44.0, 48.0, 52.0])
    calls = [Step("get_order", {"order_id": "LK-615204"}, ok=False)]
    calls += [Step("get_customer_orders")] * 11
    return [Step(c.tool, c.arguments, c.ok, seconds=t) for c, t in zip(calls, times, strict=True)]


def t_80009() -> list[Step]:
    order = Step("get_order", {"order_id": "LK-55190"}, ok=False, seconds=2.0)
    search = Step("search_policy", {"query": "invalid order id"}, seconds=2.0)
    return [order, search] * 6


def t_90608() -> list[Step]:
    return [Step("get_customer_orders", ok=False, seconds=2.8)] * 11


def t_64872() -> list[Step]:
    times = seconds([6.0, 13.5, 21.5, 30.5, 39.1, 49.5, 59.9, 70.3, 80.7, 91.1, 101.5, 111.9])
    resolution = {"outcome": "resolve", "rule": "W7", "actions": [{"create_return_label": {"sku": None}}]}
    calls = [
        Step("search_policy", {"query": "double charge terracotta pots"}),
        Step("get_payments", {"order_id": "LK-739156"}),
    ]
    calls += [Step("finish", resolution, ok=False)] * 6 + [Step("no_usable_step", ok=False)] * 4
    return [Step(c.tool, c.arguments, c.ok, seconds=t) for c, t in zip(calls, times, strict=True)]


def t_80005() -> list[Step]:
    refused = Step("finish", {"outcome": "refund", "rule": "W2"}, ok=False, seconds=7.0)
    return [
        Step("get_order", {"order_id": "LK-55017"}, seconds=6.9),
        refused,
        refused,
        refused,
        Step("finish", {"outcome": "reply_only", "rule": "W4"}, seconds=5.0),
    ]


def t_90601() -> list[Step]:
    return [
        Step("get_order", {"order_id": "LK-645001"}, ok=False, seconds=1.1),  # service_timeout (simulated)
        Step("get_order", {"order_id": "LK-645001"}, seconds=0.9),
        Step("finish", {"outcome": "reship", "rule": "W5"}, seconds=1.4),
    ]


@pytest.mark.parametrize(
    ("ticket", "steps", "reason", "model_calls"),
    [
        ("T-80001", t_80001, "repeated_call", 3),
        ("T-80009", t_80009, "repeated_call", 4),
        ("T-90608", t_90608, "too_many_errors", 3),
        ("T-64872", t_64872, "too_many_errors", 5),
        ("T-80005", t_80005, "too_many_errors", 4),
        ("T-90601", t_90601, "finished", 3),
    ],
)
def test_seed_002_recorded_runs_stop_where_the_lesson_says(
    ticket: str, steps: Any, reason: str, model_calls: int
) -> None:
    run = play(StopRepeatedCalls(**SEED_002), steps())
    assert (run.reason, run.model_calls) == (reason, model_calls), ticket


def test_seed_002_the_repeat_is_refused_before_it_runs() -> None:
    run = play(StopRepeatedCalls(**SEED_002), t_80001())
    assert run.ran == ["get_order", "get_customer_orders"]
    assert run.model_seconds == pytest.approx(16.2)


def test_seed_002_without_the_repeat_rule_t80001_runs_to_the_step_limit() -> None:
    run = play(StopRepeatedCalls(**{**SEED_002, "max_calls": None}), t_80001())
    assert (run.reason, run.model_calls) == ("max_steps", 8)
    assert run.model_seconds == pytest.approx(35.9)


def test_seed_002_without_the_error_rule_t90608_runs_to_the_step_limit() -> None:
    run = play(StopRepeatedCalls(**{**SEED_002, "max_errors_in_a_row": None}), t_90608())
    assert (run.reason, run.model_calls) == ("max_steps", 8)


def test_seed_002_a_30_second_budget_stops_t64872_on_recorded_time() -> None:
    run = play(StopRepeatedCalls(**{**SEED_002, "max_model_seconds": 30}), t_64872())
    assert (run.reason, run.model_calls) == ("time", 4)
    assert run.model_seconds == pytest.approx(30.5)


def test_seed_002_any_same_call_rule_stops_t80009_one_call_earlier() -> None:
    run = play(StopRepeatedCalls(**{**SEED_002, "count_failures": True}), t_80009())
    assert (run.reason, run.model_calls) == ("repeated_call", 3)


def test_seed_002_the_cost_cap_stops_after_the_call_that_crossed_it() -> None:
    steps = [Step("search_policy", {"query": str(n)}, cost_usd=0.0003) for n in range(6)]
    run = play(StopRepeatedCalls(**{**SEED_002, "max_cost_usd": 0.0005}), steps)
    assert (run.reason, run.model_calls) == ("cost", 2)


# --- seed 003: LoopControlAgent, a re-delivered message counts once, limits switch off --------------


def test_seed_003_a_message_redelivered_under_one_id_counts_once() -> None:
    guard = StopRepeatedCalls(max_model_calls=2)
    guard.pre_agent_turn(turn_id="flow")
    for delivery in ["m1", "m1", "m1", "m2", "m2"]:  # streaming: partials and a duplicated final
        guard.post_llm_call(delivery_id=delivery)
    assert guard.state.turn.model_calls == 2
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.MAX_STEPS


def test_seed_003_a_message_without_id_always_counts() -> None:
    guard = StopRepeatedCalls(max_model_calls=3)
    for _ in range(3):
        guard.post_llm_call()
    assert guard.pre_llm_call() is not None


def test_seed_003_none_switches_the_limit_off() -> None:
    # seed 003's "<= 0 disables" is spelled None here; a negative limit is a configuration error.
    guard = StopRepeatedCalls(max_model_calls=None, max_calls=None, max_refusals=None)
    for n in range(1_000):
        guard.post_llm_call(delivery_id=f"m{n}")
        assert guard.pre_tool_call(ToolCall("loop", {})) is None
    assert guard.pre_llm_call() is None


# --- seed 004: the Mistral how-to, per tool, 2 calls run, 3 refusals end the turn ------------------


def test_seed_004_story() -> None:
    guard = StopRepeatedCalls(count="per_turn", match="tool", max_calls=2, max_refusals=3)
    guard.pre_agent_turn(turn_id="turn-1")
    reached: list[str] = []
    messages: list[str] = []
    for _ in range(10):
        if guard.pre_llm_call() is not None:
            break
        refusal = guard.pre_tool_call(ToolCall("track_parcel", {"tracking_number": "FR-7731"}))
        if refusal is None:
            reached.append("FR-7731")
        else:
            messages.append(refusal.message)
    assert len(reached) == 2 and len(messages) == 3
    assert messages[0].startswith("Refused: you already called track_parcel 2 times in this turn")
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert "track_parcel" in stop.message
    guard.pre_agent_turn(turn_id="turn-2")
    assert guard.pre_llm_call() is None
    assert guard.pre_tool_call(ToolCall("track_parcel", {"tracking_number": "FR-7731"})) is None


def test_seed_004_counts_per_tool_whatever_the_arguments() -> None:
    guard = StopRepeatedCalls(count="per_turn", match="tool", max_calls=2)
    assert guard.pre_tool_call(ToolCall("track_parcel", {"tracking_number": "A"})) is None
    assert guard.pre_tool_call(ToolCall("track_parcel", {"tracking_number": "B"})) is None
    assert guard.pre_tool_call(ToolCall("track_parcel", {"tracking_number": "C"})) is not None
    assert guard.pre_tool_call(ToolCall("other_tool", {})) is None
