"""A hook call delivered twice (durable runtimes deliver at least once) is decided once."""

from __future__ import annotations

from repeat_hooks import StopRepeatedCalls, ToolCall


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
    for n in range(300):
        guard.pre_tool_call(ToolCall("t", {"n": n}, call_id=f"c{n}"))
    assert "c0@0.0" not in guard.state.deliveries and "c299@0.0" in guard.state.deliveries


def test_an_outcome_delivered_on_its_own_counts_once() -> None:
    # Deployed runtimes deliver post_tool_call in another activity than its pre_tool_call.
    guard = StopRepeatedCalls(max_errors_in_a_row=2)
    guard.pre_tool_call(call("c1"))
    for _ in range(3):
        guard.post_tool_call(ToolCall("track_parcel", {}), ok=False, delivery_id="outcome-1")
    assert guard.state.turn.errors_in_a_row == 1
    guard.post_tool_call(ToolCall("track_parcel", {}), ok=False, delivery_id="outcome-2")
    assert guard.state.turn.errors_in_a_row == 2
