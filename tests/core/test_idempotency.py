"""A hook call delivered twice (durable runtimes deliver at least once) is decided once."""

from __future__ import annotations

import pytest

from repeat_hooks import GuardState, Policy, StopRepeatedCalls, ToolCall
from repeat_hooks.state import MAX_DELIVERIES, RECENT_DELIVERIES


def call(call_id: str) -> ToolCall:
    return ToolCall("track_parcel", {"tracking_number": "FR-7731"}, call_id=call_id)


def test_a_redelivered_call_gets_the_same_decision_and_counts_once() -> None:
    guard = StopRepeatedCalls(max_calls=2)
    first = [guard.pre_tool_call(call(f"c{n}")) for n in range(4)]
    again = [guard.pre_tool_call(call(f"c{n}")) for n in range(4)]
    assert first == again
    assert [d is None for d in first] == [True, True, False, False]
    assert guard.state.turn.refusals == 2
    assert len(guard.events) == 2


def test_distinct_ids_are_distinct_calls() -> None:
    guard = StopRepeatedCalls(max_calls=2)
    assert [guard.pre_tool_call(call(f"c{n}")) is None for n in range(3)] == [True, True, False]


def test_a_redelivered_outcome_counts_once() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=2)
    guard.pre_tool_call(call("c1"))
    guard.post_tool_call(call("c1"), ok=False)
    guard.post_tool_call(call("c1"), ok=False)
    assert guard.state.turn.errors_in_a_row == 1
    assert guard.pre_llm_call() is None


def test_the_outcome_of_a_refused_call_is_ignored() -> None:
    guard = StopRepeatedCalls(max_calls=0, max_errors_in_a_row=1)
    guard.pre_tool_call(call("c1"))
    guard.post_tool_call(call("c1"), ok=False)
    assert guard.state.turn.errors_in_a_row == 0


def test_redelivery_after_a_round_trip_still_counts_once() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_tool_call(call("c1"))
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    assert restored.pre_tool_call(call("c1")) is None
    assert restored.pre_tool_call(call("c2")) is not None


def test_delivery_memory_is_bounded_and_forgets_oldest_first() -> None:
    guard = StopRepeatedCalls(max_calls=1_000)
    for n in range(MAX_DELIVERIES + 44):  # one response with more ids than the hard cap
        guard.pre_tool_call(ToolCall("t", {"n": n}, call_id=f"c{n}"))
    assert len(guard.state.deliveries) == MAX_DELIVERIES == 256
    assert "c43@0.0" not in guard.state.deliveries and "c44@0.0" in guard.state.deliveries


def search(number: int, *, call_id: str | None = None) -> ToolCall:
    return ToolCall("search", {"q": number}, call_id=call_id)


@pytest.mark.parametrize("batch", [True, False], ids=["decided-as-a-batch", "decided-one-by-one"])
def test_every_call_of_a_response_of_200_parallel_calls_is_delivered_again_and_counted_once(batch: bool) -> None:
    # 65 parallel calls were enough for the first one's second delivery to be refused (a 64-id memory).
    guard = StopRepeatedCalls(max_calls=1)
    calls = [search(number, call_id=f"call_{number}") for number in range(200)]
    first = guard.pre_tool_calls(calls) if batch else [guard.pre_tool_call(call) for call in calls]
    again = [guard.pre_tool_call(call) for call in calls]  # each per-call hook, after the batch
    for call in calls:
        guard.post_tool_call(call, ok=False, result="lost")
    for call in reversed(calls):
        guard.post_tool_call(call, ok=False, result="lost")  # each outcome delivered twice: recorded once

    assert first == again == [None] * 200
    turn = guard.state.turn
    assert sorted(set(turn.counts.values())) == [1] and len(turn.counts) == 200
    assert turn.refusals == 0 and turn.errors_in_a_row == 200


def test_an_outcome_delivered_on_its_own_counts_once() -> None:
    # Deployed runtimes deliver post_tool_call in another activity than its pre_tool_call.
    guard = StopRepeatedCalls(max_errors_in_a_row=2)
    guard.pre_tool_call(call("c1"))
    for _ in range(3):
        guard.post_tool_call(ToolCall("track_parcel", {}), ok=False, delivery_id="outcome-1")
    assert guard.state.turn.errors_in_a_row == 1
    guard.post_tool_call(ToolCall("track_parcel", {}), ok=False, delivery_id="outcome-2")
    assert guard.state.turn.errors_in_a_row == 2


def test_a_new_response_forgets_its_call_ids_and_keeps_the_newest_outcome_and_model_call_ids() -> None:
    policy, state = Policy(max_calls=1_000), GuardState()
    for response in range(3):
        assert policy.decide_model_call(state, turn_id="t1") is None
        policy.record_model_call(state, turn_id="t1", delivery_id=f"model-{response}")
        for number in range(50):
            call = search(number, call_id=f"call_{number}")  # models reuse call ids from one response to the next
            assert policy.decide_tool_call(state, call, turn_id="t1") is None
            policy.record_tool_result(state, search(number), ok=True, delivery_id=f"outcome-{response}-{number}")
        assert len(state.deliveries) <= RECENT_DELIVERIES + 101  # 64 kept from before, and this response's 101
    assert policy.decide_model_call(state, turn_id="t1") is None
    assert len(state.deliveries) == RECENT_DELIVERIES
    assert all(not delivery.key for delivery in state.deliveries.values())  # no call id of a past response
    assert "outcome-2-49" in state.deliveries and "outcome-1-35" not in state.deliveries
    policy.record_model_call(state, turn_id="t1", delivery_id="model-2")  # late, but among the newest 64: once
    policy.record_tool_result(state, search(49), ok=False, turn_id="t1", delivery_id="outcome-2-49")
    assert (state.turn.model_calls, state.turn.errors_in_a_row) == (3, 0)
    assert GuardState.model_validate_json(state.model_dump_json()) == state
    policy.start_turn(state, turn_id="t2")  # a new turn keeps them as a new response does
    assert len(state.deliveries) == RECENT_DELIVERIES
