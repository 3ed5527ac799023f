"""Per-turn limits: how many same calls run, per-tool overrides, exempt tools, windows, failures."""

from __future__ import annotations

from repeat_hooks import GuardState, StopRepeatedCalls, ToolCall
from repeat_hooks.state import MAX_DELIVERIES


def allowed(guard: StopRepeatedCalls, *calls: ToolCall) -> list[bool]:
    return [guard.pre_tool_call(call) is None for call in calls]


def track(number: str = "FR-7731", call_id: str | None = None) -> ToolCall:
    return ToolCall("track_parcel", {"tracking_number": number}, call_id=call_id)


def test_default_refuses_the_third_identical_call() -> None:
    guard = StopRepeatedCalls()
    assert allowed(guard, track(), track(), track(), track()) == [True, True, False, False]


def test_different_arguments_are_different_calls() -> None:
    guard = StopRepeatedCalls()
    assert allowed(guard, *(track(f"FR-{n}") for n in range(20))) == [True] * 20


def test_per_tool_limit_overrides_max_calls() -> None:
    guard = StopRepeatedCalls(limits={"place_order": 1})
    order = ToolCall("place_order", {"sku": "A"})
    assert allowed(guard, order, order, track(), track(), track()) == [True, False, True, True, False]


def test_limit_zero_forbids_a_tool() -> None:
    guard = StopRepeatedCalls(limits={"delete_everything": 0})
    assert allowed(guard, ToolCall("delete_everything")) == [False]


def test_exempt_tools_are_never_refused_nor_counted() -> None:
    guard = StopRepeatedCalls(exempt={"wait_for_job"}, max_calls=1)
    wait = ToolCall("wait_for_job", {"job": 7})
    assert allowed(guard, *[wait] * 50) == [True] * 50
    assert guard.state.turn.counts == {}


def test_refusals_carry_the_tool_count_and_limit_in_the_message() -> None:
    guard = StopRepeatedCalls(max_calls=1, refusal_message="no more {tool}: call {count} of at most {limit}")
    guard.pre_tool_call(track())
    refusal = guard.pre_tool_call(track())
    assert refusal is not None and refusal.message == "no more track_parcel: call 2 of at most 1"


def test_failures_count_unless_count_failures_is_off() -> None:
    counting = StopRepeatedCalls(max_calls=1)
    forgiving = StopRepeatedCalls(max_calls=1, count_failures=False)
    for guard in (counting, forgiving):
        assert guard.pre_tool_call(track()) is None
        guard.post_tool_call(track(), ok=False)
    assert counting.pre_tool_call(track()) is not None
    assert forgiving.pre_tool_call(track()) is None  # the earlier call failed: a retry is not a repeat
    forgiving.post_tool_call(track(), ok=True)
    assert forgiving.pre_tool_call(track()) is not None  # a repeat of a success is


def test_failure_uncounting_uses_the_delivery_when_there_is_one() -> None:
    guard = StopRepeatedCalls(max_calls=1, count_failures=False)
    for n in range(5):
        assert guard.pre_tool_call(track(call_id=f"c{n}")) is None
        guard.post_tool_call(ToolCall("track_parcel", "arguments not passed again", call_id=f"c{n}"), ok=False)
    assert guard.state.turn.counts == {}


def test_failure_uncounting_within_a_window() -> None:
    guard = StopRepeatedCalls(max_calls=1, count_failures=False, window=3)
    for _ in range(4):
        assert guard.pre_tool_call(track()) is None
        guard.post_tool_call(track(), ok=False)
    assert guard.state.turn.recent == []


def test_errors_in_a_row_end_the_turn_and_a_success_resets_them() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=3)
    for n, ok in enumerate([False, False, True, False, False]):
        guard.post_tool_call(track(str(n)), ok=ok)
    assert guard.state.turn.errors_in_a_row == 2 and guard.pre_llm_call() is None
    guard.post_tool_call(track("x"), ok=False)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason == "too_many_errors"
    assert stop.message == "I stopped: 3 tool calls failed in a row, the last one track_parcel. Try again later."


def test_distinct_keys_are_capped_oldest_used_first() -> None:
    guard = StopRepeatedCalls(max_keys=3, max_calls=1)
    assert allowed(guard, track("A"), track("B"), track("C"), track("A"), track("D")) == [True, True, True, False, True]
    assert len(guard.state.turn.counts) == 3
    # A was used again after B, so B was the one forgotten: B runs again, A is still remembered
    assert allowed(guard, track("A")) == [False]
    assert allowed(guard, track("B")) == [True]


def test_state_stays_bounded_under_many_distinct_calls() -> None:
    guard = StopRepeatedCalls(max_keys=100)
    for n in range(5_000):
        guard.pre_tool_call(ToolCall("search", {"q": n}, call_id=f"c{n}"))
    assert len(guard.state.turn.counts) == 100
    assert len(guard.state.deliveries) == MAX_DELIVERIES
    assert len(guard.model_dump_json()) < 40_000


def test_a_failure_taken_back_leaves_the_window_and_the_count_as_before() -> None:
    """``count_failures=False``: a failed call is taken back out of its count, and out of the window, newest
    first, so the calls before it keep their places."""
    from repeat_hooks import Policy

    policy, state = Policy(count_failures=False, window=3, max_calls=2, count="per_turn"), GuardState()
    track, ship = ToolCall("track", {"n": 1}), ToolCall("ship", {"n": 1})
    for call, ok in ((track, True), (ship, True), (track, False)):
        assert policy.decide_tool_call(state, call) is None
        policy.record_tool_result(state, call, ok=ok, result="r")
    assert state.turn.counts == {policy._key(track): 1, policy._key(ship): 1}
    assert state.turn.recent == [policy._key(track), policy._key(ship)]
    assert policy.decide_tool_call(state, track) is None
    assert state.turn.counts[policy._key(track)] == 2  # counted once before: this is its second


def test_a_count_of_three_taken_back_is_two_and_a_count_of_one_is_gone() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(count_failures=False, max_calls=5, count="per_turn"), GuardState()
    track = ToolCall("track", {"n": 1})
    key = policy._key(track)
    for _ in range(2):
        assert policy.decide_tool_call(state, track) is None
        policy.record_tool_result(state, track, ok=True, result="same")
    assert policy.decide_tool_call(state, track) is None
    policy.record_tool_result(state, track, ok=False, result="down")
    assert state.turn.counts[key] == 2
    fresh = GuardState()
    assert policy.decide_tool_call(fresh, track) is None
    policy.record_tool_result(fresh, track, ok=False, result="down")
    assert key not in fresh.turn.counts
