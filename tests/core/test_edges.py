"""The rules at their edges: each test pins one boundary a one-line change to the core would move."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

from repeat_hooks import GuardState, RefusalKind, StopReason, StopRepeatedCalls, ToolCall
from repeat_hooks.call import MAX_ARGUMENT_CHARS, call_key, canonical_arguments
from repeat_hooks.messages import REFUSE_FORBIDDEN

SEARCH = ToolCall("search", {"q": "hammock"})


def mutating() -> bool:
    """Under mutmut, whose trampoline adds a frame: a warning then names the trampoline's line, not the caller's."""
    return "MUTANT_UNDER_TEST" in os.environ


def other(n: int) -> ToolCall:
    return ToolCall("fetch", {"page": n})


# -- budgets: non-finite and huge figures keep the state serializable ------------------------------


@pytest.mark.parametrize("figures", [{"cost_usd": math.inf}, {"seconds": math.inf}, {"seconds": 1e308}])
def test_infinite_or_overflowing_figures_keep_a_state_that_round_trips(figures: dict[str, float]) -> None:
    guard = StopRepeatedCalls(max_model_seconds=60, max_cost_usd=1.0)
    guard.post_llm_call(**figures)
    guard.post_llm_call(**figures)
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    assert restored == guard
    assert math.isfinite(restored.state.turn.model_seconds) and math.isfinite(restored.state.turn.cost_usd)
    stop = restored.pre_llm_call()
    assert stop is not None and stop.reason in (StopReason.TIME, StopReason.COST)


def test_nan_figures_count_as_nothing() -> None:
    guard = StopRepeatedCalls(max_model_seconds=1)
    guard.post_llm_call(seconds=math.nan, cost_usd=-1)
    assert guard.state.turn.model_seconds == 0 and guard.state.turn.cost_usd == 0
    assert guard.pre_llm_call() is None


def test_exactly_the_budget_is_not_over_it() -> None:
    guard = StopRepeatedCalls(max_model_seconds=30, max_cost_usd=0.5)
    guard.post_llm_call(seconds=30, cost_usd=0.5)
    assert guard.pre_llm_call() is None
    guard.post_llm_call(seconds=0.001)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.TIME


def test_exactly_max_model_calls_stops() -> None:
    guard = StopRepeatedCalls(max_model_calls=2)
    guard.post_llm_call()
    assert guard.pre_llm_call() is None
    guard.post_llm_call()
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.MAX_STEPS


def test_errors_in_a_row_stop_at_exactly_the_limit() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=2)
    guard.post_tool_call(other(1), ok=False, result="e1")
    assert guard.pre_llm_call() is None
    guard.post_tool_call(other(2), ok=False, result="e2")
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and "2 tool calls failed" in stop.message


def test_post_tool_call_records_a_success_by_default() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=2)
    guard.post_tool_call(other(1), ok=False)
    guard.post_tool_call(other(2))
    guard.post_tool_call(other(3), ok=False)
    assert guard.state.turn.errors_in_a_row == 1
    assert guard.pre_llm_call() is None


# -- a forbidden tool ------------------------------------------------------------------------------


def test_a_forbidden_tool_gets_its_own_message() -> None:
    guard = StopRepeatedCalls(limits={"delete_everything": 0})
    refusal = guard.pre_tool_call(ToolCall("delete_everything"))
    assert refusal is not None and refusal.message == REFUSE_FORBIDDEN.format(tool="delete_everything")
    assert "0 times" not in refusal.message


def test_a_custom_template_reads_limit_zero_as_zero() -> None:
    guard = StopRepeatedCalls(limits={"delete_everything": 0}, refusal_message="{tool}: at most {limit} calls")
    refusal = guard.pre_tool_call(ToolCall("delete_everything"))
    assert refusal is not None and refusal.message == "delete_everything: at most 0 calls"


# -- the sliding window: the last N calls, the current one included -------------------------------


def calls_at(positions: list[int], total: int) -> list[ToolCall]:
    return [SEARCH if n in positions else other(n) for n in range(total)]


def test_the_window_holds_the_current_call_and_the_n_minus_1_before_it() -> None:
    guard = StopRepeatedCalls(count="per_turn", window=8, max_calls=2)
    decisions = [guard.pre_tool_call(call) is None for call in calls_at([0, 4, 8], 9)]
    assert decisions[8] is True  # calls 1-8 hold two searches: 4 and 8
    guard = StopRepeatedCalls(count="per_turn", window=8, max_calls=2)
    decisions = [guard.pre_tool_call(call) is None for call in calls_at([1, 4, 8], 9)]
    assert decisions[8] is False  # calls 1-8 hold three


def test_the_window_works_with_progress_counting_too() -> None:
    guard = StopRepeatedCalls(window=3, max_calls=2, read_only={"fetch"})
    assert [guard.pre_tool_call(c) is None for c in (SEARCH, SEARCH, other(1), other(2), SEARCH)] == [True] * 5
    guard = StopRepeatedCalls(window=4, max_calls=2, read_only={"fetch"})
    assert [guard.pre_tool_call(c) is None for c in (SEARCH, SEARCH, other(1), SEARCH)] == [True, True, True, False]


def test_max_keys_eviction_keeps_the_window_consistent() -> None:
    guard = StopRepeatedCalls(count="per_turn", window=4, max_calls=2, max_keys=2)
    for call in (SEARCH, other(1), other(2), SEARCH, SEARCH):
        guard.pre_tool_call(call)
    state = guard.state
    assert len(state.turn.counts) <= 2
    assert set(state.turn.recent) <= set(state.turn.counts)
    assert sum(state.turn.counts.values()) == len(state.turn.recent)
    assert state.turn.counts[call_key("search", {"q": "hammock"})] == 2  # the evicted search started again


# -- keys ------------------------------------------------------------------------------------------


def test_the_tool_name_and_the_arguments_are_kept_apart_in_the_key() -> None:
    assert call_key("a", 12) != call_key("a1", 2)
    assert call_key("a", "1") != call_key("a1", None)


def test_argument_text_up_to_the_limit_is_parsed_and_past_it_is_not() -> None:
    at_limit = '"' + "x" * (MAX_ARGUMENT_CHARS - 2) + '"'
    assert len(at_limit) == MAX_ARGUMENT_CHARS
    assert canonical_arguments(at_limit) == at_limit  # parsed: the JSON string "xxx..."
    past = '"' + "x" * (MAX_ARGUMENT_CHARS - 1) + '"'
    assert canonical_arguments(past) != past  # not parsed: the text itself, quotes and all
    assert canonical_arguments(past) == canonical_arguments(past)


def test_json_text_of_a_string_differs_from_the_plain_string() -> None:
    assert canonical_arguments('"abc"') == '"abc"'
    assert canonical_arguments("abc") == '"abc"'  # text that is not JSON stays one string
    assert canonical_arguments('"[1]"') != canonical_arguments("[1]")


def test_an_object_twice_is_not_a_cycle_and_is_encoded_in_full() -> None:
    shared: dict[str, Any] = {"city": "Lyon", "request_id": 1}
    text = canonical_arguments({"from": shared, "to": shared}, {"request_id"})
    assert text == '{"from":{"city":"Lyon"},"to":{"city":"Lyon"}}'
    assert "<cycle>" not in text


# -- a new turn resets everything per turn ---------------------------------------------------------


def test_a_new_turn_resets_every_per_turn_counter() -> None:
    guard = StopRepeatedCalls(count="per_turn", window=4, max_calls=1, max_refusals=1)
    guard.pre_agent_turn(turn_id="t1")
    guard.pre_tool_call(SEARCH)
    guard.pre_tool_call(SEARCH)
    guard.post_tool_call(other(1), ok=False)
    guard.post_llm_call(seconds=3, cost_usd=0.25)
    assert guard.pre_llm_call() is not None
    guard.pre_agent_turn(turn_id="t2")
    assert guard.state.model_dump(include=set(PER_TURN)) == GuardState().model_dump(include=set(PER_TURN))
    assert guard.state.turn.number == 2 and guard.state.turn.id == "t2"


PER_TURN = (
    "counts",
    "marks",
    "changes",
    "runs",
    "recent",
    "refusals",
    "responses",
    "refused_responses",
    "refused_in",
    "last_refused",
    "errors_in_a_row",
    "last_failed",
    "model_calls",
    "model_seconds",
    "cost_usd",
    "stop",
)


def test_a_tool_both_exempt_and_limited_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match=r"wait is both in exempt .* and in limits"):
        StopRepeatedCalls(exempt={"wait"}, limits={"wait": 0})


def test_hostile_objects_and_odd_ids_never_break_the_guard() -> None:
    class Hostile:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("boom")

    guard = StopRepeatedCalls(max_calls=1)
    call = ToolCall(42, {"x": Hostile()}, call_id=7)  # type: ignore[arg-type]
    assert call.name == "42" and call.call_id == "7"
    assert guard.pre_tool_call(call) is None
    guard.post_tool_call(call, result=Hostile())
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    # its outcome was recorded: the same id again is a new call (an SDK answering call_0 every time), refused
    assert restored.pre_tool_call(ToolCall("42", {"x": Hostile()}, call_id="7")) is not None
    assert restored.pre_tool_call(ToolCall("42", {"x": Hostile()}, call_id="8")) is not None


# -- pinned by mutation testing: each of these moved a rule by one ---------------------------------


def test_the_guards_hooks_pass_the_turn_id_on() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    guard.pre_agent_turn(turn_id="t1")
    guard.post_llm_call()
    assert guard.pre_llm_call(turn_id="t1") is not None
    assert guard.pre_llm_call(turn_id="t2") is None  # a new turn id starts that turn
    guard.post_tool_call(other(1), ok=False, turn_id="t3")
    assert guard.state.turn.id == "t3" and guard.state.turn.errors_in_a_row == 1
    guard.post_llm_call(turn_id="t4")
    assert guard.state.turn.id == "t4" and guard.state.turn.model_calls == 1


def test_post_llm_call_counts_nothing_but_the_call_by_default() -> None:
    guard = StopRepeatedCalls()
    guard.post_llm_call()
    assert (guard.state.turn.model_calls, guard.state.turn.model_seconds, guard.state.turn.cost_usd) == (1, 0.0, 0.0)


def test_stop_of_reads_the_current_stop_only_for_its_own_turn() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    guard.pre_agent_turn(turn_id="t1")
    guard.post_llm_call()
    stop = guard.pre_llm_call()
    assert stop is not None and guard.stop_of("t1") == stop
    assert guard.stop_of("t0") is None
    guard.pre_agent_turn(turn_id="t2")
    assert guard.stop_of("t2") is None and guard.stop_of("t1") == stop  # from the kept event


def test_events_keep_the_newest_64() -> None:
    from repeat_hooks.state import MAX_EVENTS

    guard = StopRepeatedCalls(count="per_turn", max_calls=0, max_refusals=None)
    for n in range(MAX_EVENTS + 6):
        guard.pre_tool_call(ToolCall("t", {"n": n}))
    assert len(guard.events) == MAX_EVENTS
    assert guard.events[0].count == 1 and guard.state.turn.refusals == MAX_EVENTS + 6


def test_an_event_that_is_a_refusal_is_no_stop() -> None:
    guard = StopRepeatedCalls(max_calls=0)
    guard.pre_tool_call(SEARCH)
    assert guard.events[-1].kind == "refusal" and guard.events[-1].as_stop() is None


def test_the_turn_ended_refusal_names_the_reason() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    guard.post_llm_call()
    guard.pre_llm_call()
    refusal = guard.pre_tool_call(SEARCH)
    assert refusal is not None and "(max_steps)" in refusal.message and refusal.reason is RefusalKind.TURN_ENDED


def test_an_outcome_delivered_twice_by_its_own_id_counts_once() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=5)
    for _ in range(3):
        guard.post_tool_call(other(1), ok=False, delivery_id="outcome-1")
    assert guard.state.turn.errors_in_a_row == 1
    assert guard.pre_tool_call(ToolCall("fetch", {"page": 1}, call_id="outcome-1")) is None  # not a call's id


def test_a_model_call_delivered_twice_counts_once_and_responses_are_numbered() -> None:
    guard = StopRepeatedCalls()
    for _ in range(3):
        guard.post_llm_call(seconds=1, delivery_id="m1")
    assert guard.state.turn.model_calls == 1 and guard.state.turn.model_seconds == 1
    assert guard.pre_llm_call() is None and guard.pre_llm_call() is None
    assert guard.state.turn.responses == 2


def test_an_exempt_tool_that_ran_restarts_the_other_counts_unless_read_only() -> None:
    wait = ToolCall("wait", {"s": 1})
    for read_only, expected in ((set(), True), ({"wait"}, False)):
        guard = StopRepeatedCalls(exempt={"wait"}, read_only=read_only)
        for _ in range(2):
            guard.pre_tool_call(SEARCH)
            guard.post_tool_call(SEARCH, result="r")
        guard.post_tool_call(wait, result=None)
        assert (guard.pre_tool_call(SEARCH) is None) is expected
    guard = StopRepeatedCalls(exempt={"wait"})
    guard.post_tool_call(wait, ok=False)
    assert guard.state.turn.changes == 0  # a failed wait changed nothing
    guard.post_tool_call(wait)
    guard.post_tool_call(wait)
    assert guard.state.turn.changes == 2


def test_per_turn_counting_records_failures_only_to_take_them_back() -> None:
    guard = StopRepeatedCalls(count="per_turn", max_calls=1, count_failures=False, window=4)
    assert guard.pre_tool_call(SEARCH) is None
    guard.post_tool_call(SEARCH, ok=False)
    assert guard.state.turn.counts == {} and guard.state.turn.recent == []
    assert guard.pre_tool_call(SEARCH) is None
    guard.post_tool_call(SEARCH, ok=True)
    assert list(guard.state.turn.counts.values()) == [1] and guard.pre_tool_call(SEARCH) is not None


def test_taking_a_failure_back_lowers_its_count_by_one() -> None:
    guard = StopRepeatedCalls(count="per_turn", max_calls=3, count_failures=False, window=5)
    for _ in range(3):
        guard.pre_tool_call(SEARCH)
    guard.post_tool_call(SEARCH, ok=False)
    turn = guard.state.turn
    assert list(turn.counts.values()) == [2] and turn.recent.count(turn.recent[0]) == 2


def test_a_window_drops_the_oldest_call_of_the_same_key() -> None:
    guard = StopRepeatedCalls(count="per_turn", window=3, max_calls=2)
    decisions = [guard.pre_tool_call(c) is None for c in (SEARCH, other(1), SEARCH, SEARCH, SEARCH)]
    # the 4th call: the window (calls 2-4) holds 2 searches; the 5th: calls 3-5 hold 3
    assert decisions == [True, True, True, True, False]
    assert guard.state.turn.counts[call_key("search", {"q": "hammock"})] == 3


def test_a_new_result_inside_a_window_keeps_one_entry_for_its_call() -> None:
    guard = StopRepeatedCalls(window=4, max_calls=2)
    for result in ("a", "b", "c"):
        guard.pre_tool_call(SEARCH)
        guard.post_tool_call(SEARCH, result=result)
    assert guard.state.turn.recent == [call_key("search", {"q": "hammock"})]


def test_runs_keep_two_passes_of_the_longest_cycle_newest_last() -> None:
    guard = StopRepeatedCalls(max_cycle_period=2)
    for n in range(9):
        guard.pre_tool_call(other(n))
        guard.post_tool_call(other(n), result=n)
    assert len(guard.state.turn.runs) == 4
    assert guard.state.turn.runs[-1].startswith(call_key("fetch", {"page": 8}))
    assert guard.state.turn.runs[0].startswith(call_key("fetch", {"page": 5}))


def test_memory_store_bounds_and_copies() -> None:
    import asyncio

    from repeat_hooks import MemoryStore

    with pytest.raises(ValueError, match="max_sessions"):
        MemoryStore(0)
    store = MemoryStore(1)
    assert store.evictions == 0
    store.update_now("a", lambda state: state.start("x"))
    store.update_now("b", lambda state: state.start("y"))
    store.update_now("c", lambda state: None)
    assert len(store) == 1 and store.evictions == 2
    loaded = asyncio.run(store.load("c"))
    assert loaded is not None
    loaded.turn.counts["k"] = 1
    again = asyncio.run(store.load("c"))
    assert again is not None and again.turn.counts == {}


# -- withdrawn calls ----------------------------------------------------------------------------------------


def test_a_call_rejected_again_and_again_is_refused_without_being_asked_about() -> None:
    """A withdrawn call (a human or a guardrail rejected it before it ran) counts as a rejection: the third ask
    for the same rejected call is refused (``RefusalKind.REJECTED``), so nobody is asked about it without end;
    a change of state in between starts its count again, as for any call."""
    from repeat_hooks import Policy, RefusalKind

    policy, state = Policy(max_calls=2), GuardState()
    refund = ToolCall("refund", {"order": "A1"})
    for _ in range(2):
        assert policy.decide_tool_call(state, refund) is None
        policy.record_rejection(state, refund)
    refused = policy.decide_tool_call(state, refund)
    assert refused is not None and refused.reason is RefusalKind.REJECTED
    assert refused.message.startswith("Refused: refund with these exact arguments was already rejected 2 times")
    assert state.turn.errors_in_a_row == 0, "a rejection is not a failure"

    note = ToolCall("add_note", {"text": "customer called"})
    assert policy.decide_tool_call(state, note) is None
    policy.record_tool_result(state, note, ok=True, result="noted")  # it may change what refund does
    assert policy.decide_tool_call(state, refund) is None


def test_per_turn_a_rejected_call_counts_as_the_call_it_was() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(count="per_turn"), GuardState()
    track = ToolCall("track", {"n": 1})
    assert policy.decide_tool_call(state, track) is None
    policy.record_rejection(state, track)
    assert list(state.turn.counts.values()) == [1]


def test_a_call_withdrawn_by_its_id_marks_what_its_decision_counted() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(), GuardState()
    assert policy.decide_tool_call(state, ToolCall("track", {"n": 1}, call_id="c1")) is None
    policy.record_rejection(state, ToolCall("track", {"n": 2}, call_id="c1"))  # edited, then rejected
    (key,) = state.turn.counts
    assert key == policy._key(ToolCall("track", {"n": 1})) and state.turn.marks[key].outcome == "-"
    policy.record_rejection(state, ToolCall("track", {"n": 1}, call_id="c1"))  # settled: nothing more
    assert state.turn.counts == {key: 1}


def test_a_withdrawal_in_a_new_turn_starts_that_turn_and_takes_back_nothing_of_the_last() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(), GuardState()
    track = ToolCall("track", {"n": 1})
    assert policy.decide_tool_call(state, track, turn_id="t1") is None
    policy.record_rejection(state, track, turn_id="t2")
    assert state.turn.id == "t2" and sum(state.turn.counts.values()) == 0 and not state.turn.marks


# -- digest keys --------------------------------------------------------------------------------------------


def _states_holding_digests() -> list[GuardState]:
    from repeat_hooks import Policy

    track = ToolCall("track", {"n": 1})
    counted = GuardState()  # a call counted
    Policy(count="per_turn").decide_tool_call(counted, track)
    failed = GuardState()  # a failed run, taken out of its count but kept for cycles
    policy = Policy(count_failures=False)
    policy.decide_tool_call(failed, track)
    policy.record_tool_result(failed, track, ok=False, result="boom")
    remembered = GuardState()  # only a withdrawn call's delivery holds its digest
    withdrawn = ToolCall("track", {"n": 1}, call_id="c1")
    Policy(count="per_turn").decide_tool_call(remembered, withdrawn, turn_id="t1")
    Policy(count="per_turn").record_rejection(remembered, withdrawn, turn_id="t1")
    return [counted, failed, remembered]


@pytest.mark.parametrize("state", _states_holding_digests(), ids=["counted", "failed", "remembered"])
def test_a_state_with_any_digest_made_without_a_key_is_refused_under_one(state: GuardState) -> None:
    from repeat_hooks import GuardSetupError, Policy

    keyed = Policy(digest_key="a secret of sixteen+ chars")
    with pytest.raises(GuardSetupError) as raised:
        keyed.decide_tool_call(state, ToolCall("track", {"n": 1}))
    assert str(raised.value) == (
        "this conversation's state was written under no digest_key, and this policy has this digest_key: give "
        "every process that serves it the same Policy(digest_key=...) (a new key starts conversations afresh: "
        "delete their stored states)"
    )


# -- odd figures and flags from an adapter ------------------------------------------------------------------


def test_a_bad_figure_is_logged_by_its_kind_and_counted_as_zero(caplog: pytest.LogCaptureFixture) -> None:
    guard = StopRepeatedCalls()
    with caplog.at_level("WARNING", logger="repeat_hooks"):
        guard.post_llm_call(seconds=0.0, cost_usd=0)  # nothing spent: nothing to say
        assert caplog.messages == []
        guard.post_llm_call(seconds=-2.5, cost_usd="3")  # type: ignore[arg-type]
        guard.post_llm_call(cost_usd=object())  # type: ignore[arg-type]
    assert caplog.messages == [
        "repeat_hooks: post_llm_call got a float -2.5 for seconds, not a figure >= 0: counted as 0",
        "repeat_hooks: post_llm_call got a object for cost_usd, not a figure >= 0: counted as 0",
    ]
    assert (guard.state.turn.model_seconds, guard.state.turn.cost_usd) == (0.0, 3.0)


def test_an_ok_that_is_not_a_bool_is_read_as_one() -> None:
    class Hostile:
        def __bool__(self) -> bool:
            raise RuntimeError("no")

    guard = StopRepeatedCalls(max_errors_in_a_row=5)
    guard.pre_tool_call(SEARCH)
    guard.post_tool_call(SEARCH, 1)  # type: ignore[arg-type]
    assert guard.state.turn.errors_in_a_row == 0
    guard.pre_tool_call(SEARCH)
    guard.post_tool_call(SEARCH, Hostile())  # type: ignore[arg-type]
    assert guard.state.turn.errors_in_a_row == 1


# -- digests with and without a key -------------------------------------------------------------------------


def test_a_digest_key_changes_every_digest_the_state_holds() -> None:
    from repeat_hooks import Policy
    from repeat_hooks.result import outcome_digest

    plain, keyed = Policy(), Policy(digest_key="a secret of sixteen+ chars")
    states = GuardState(), GuardState()
    for policy, state in zip((plain, keyed), states, strict=True):
        for _ in range(2):
            assert policy.decide_tool_call(state, SEARCH) is None
            policy.record_tool_result(state, SEARCH, result="3 hammocks")
        assert policy.decide_tool_call(state, SEARCH) is not None  # keyed or not, the 3rd is refused
    unkeyed, macs = states
    # without a key the state's digests are the public ones; with one, none of them
    assert list(unkeyed.turn.counts) == [call_key("search", {"q": "hammock"})]
    assert [mark.outcome for mark in unkeyed.turn.marks.values()] == [outcome_digest(True, "3 hammocks")]
    assert set(macs.turn.counts).isdisjoint(unkeyed.turn.counts)
    assert {m.outcome for m in macs.turn.marks.values()}.isdisjoint(m.outcome for m in unkeyed.turn.marks.values())


def test_a_policy_copied_with_new_settings_is_validated_and_uses_its_new_key() -> None:
    # pydantic's model_copy skips validation: a key given this way was kept but never used (digests stayed
    # public), and a clash or a misspelt setting passed.
    from repeat_hooks import Policy

    copied = Policy(max_calls=3).model_copy(update={"digest_key": "a secret of sixteen+ chars"})
    assert copied == Policy(max_calls=3, digest_key="a secret of sixteen+ chars")
    state = GuardState()
    copied.decide_tool_call(state, SEARCH)
    assert list(state.turn.counts) != [call_key("search", {"q": "hammock"})]  # keyed, not the public digest
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Policy().model_copy(update={"digest_key": "short"})
    with pytest.raises(ValueError, match="did you mean max_calls"):
        Policy().model_copy(update={"max_cals": 3})
    with pytest.raises(ValueError, match="both in read_only and in destructive"):
        Policy(read_only={"search"}).model_copy(update={"destructive": {"search"}})
    assert Policy(max_calls=3).model_copy() == Policy(max_calls=3)


def test_every_hook_checks_the_state_s_key_before_using_it() -> None:
    from repeat_hooks import GuardSetupError, Policy

    keyed, plain = Policy(digest_key="a secret of sixteen+ chars"), Policy()
    firsts = [
        lambda policy, state: policy.decide_model_call(state),
        lambda policy, state: policy.record_model_call(state),
        lambda policy, state: policy.record_tool_result(state, SEARCH, result="x"),
    ]
    for first in firsts:
        written = GuardState()
        keyed.decide_tool_call(written, SEARCH)
        with pytest.raises(GuardSetupError, match="written under another digest_key, and this policy has no"):
            first(plain, written)
        first(keyed, written)  # its own key: fine
        fresh = GuardState()
        first(keyed, fresh)  # a fresh state takes the key
        assert fresh.key_id is not None and keyed.decide_tool_call(fresh, SEARCH) is None
        unkeyed = GuardState()
        plain.decide_tool_call(unkeyed, SEARCH)
        first(plain, unkeyed)  # no key on either side: nothing to check
        assert unkeyed.key_id is None


def test_the_defaults_of_the_recording_verbs() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(), GuardState()
    policy.record_model_call(state)
    assert (state.turn.model_calls, state.turn.model_seconds, state.turn.cost_usd) == (1, 0.0, 0.0)
    policy.decide_tool_call(state, SEARCH)
    policy.record_tool_result(state, SEARCH)
    assert state.turn.errors_in_a_row == 0


def test_a_key_s_fingerprint_is_stable_across_releases() -> None:
    from repeat_hooks import Policy

    state = GuardState()
    Policy(digest_key="a secret of sixteen+ chars").decide_model_call(state)
    assert state.key_id == "27020404"  # what this release writes: a later one must still recognise it


@pytest.mark.parametrize("size", [64, 65, 100])
def test_keys_of_any_length_key_the_digests(size: int) -> None:
    import hashlib

    from repeat_hooks import Policy

    key = b"k" * size
    state = GuardState()
    Policy(digest_key=key).decide_tool_call(state, SEARCH)
    used = key if size <= 64 else hashlib.blake2b(key).digest()  # BLAKE2b takes keys of up to 64 bytes
    assert list(state.turn.counts) == [call_key("search", {"q": "hammock"}, key=used)]


def test_per_turn_counting_ignores_results() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(count="per_turn", max_calls=2), GuardState()
    for n in range(2):
        assert policy.decide_tool_call(state, SEARCH) is None
        policy.record_tool_result(state, SEARCH, result=f"{n} hammocks")  # new every time: no matter
    assert policy.decide_tool_call(state, SEARCH) is not None


def test_an_exempt_call_or_a_refused_one_is_rejected_without_a_mark() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(max_calls=1, exempt={"sleep"}), GuardState()
    sleep = ToolCall("sleep", {"s": 1}, call_id="s1")
    assert policy.decide_tool_call(state, sleep) is None
    policy.record_rejection(state, sleep)
    assert state.turn.marks == {}  # exempt: never counted, never marked
    track = ToolCall("track", {"n": 1}, call_id="t1")
    assert policy.decide_tool_call(state, track) is None
    policy.record_tool_result(state, track, ok=True, result="in transit")
    assert policy.decide_tool_call(state, ToolCall("track", {"n": 1}, call_id="t2")) is not None  # refused
    (key,) = state.turn.counts
    before = state.turn.marks[key]
    policy.record_rejection(state, ToolCall("track", {"n": 1}, call_id="t2"))  # it never ran: nothing to reject
    assert state.turn.marks[key] == before


def test_a_rejection_keeps_what_its_call_had_seen_changed_and_unreadable() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(max_calls=3), GuardState()
    track = ToolCall("track", {"n": 1})
    assert policy.decide_tool_call(state, track) is None
    policy.record_tool_result(state, track, ok=True, result=object())  # a result with no stable form: opaque
    (key,) = state.turn.counts
    seen = state.turn.marks[key]
    assert seen.opaque == 1
    assert policy.decide_tool_call(state, track) is None
    policy.record_rejection(state, track)
    rejected = state.turn.marks[key]
    assert (rejected.changes, rejected.opaque, rejected.ok, rejected.outcome) == (seen.changes, 1, False, "-")


def test_a_rejection_is_recorded_in_the_turn_it_names() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn(turn_id="t1")
    call = ToolCall("refund", {"order": 1}, call_id="r1")
    assert guard.pre_tool_call(call) is None
    guard.post_tool_rejected(call, turn_id="t1")
    assert guard.state.turn.id == "t1" and next(iter(guard.state.turn.marks.values())).outcome == "-"
    guard.post_tool_rejected(call, turn_id="t2")  # another turn: it starts, and holds nothing of t1
    assert guard.state.turn.id == "t2" and guard.state.turn.marks == {}


def test_the_old_withdraw_verb_names_the_callers_line_and_keeps_the_turn() -> None:
    from repeat_hooks import Policy

    policy, state = Policy(), GuardState()
    call = ToolCall("refund", {"order": 1}, call_id="r1")
    policy.decide_tool_call(state, call, turn_id="t1")
    with pytest.warns(DeprecationWarning) as seen:
        policy.withdraw_tool_call(state, call, turn_id="t1")
    assert seen[0].filename == __file__ or mutating(), "the warning names the caller's line"
    assert state.turn.id == "t1"
    assert next(iter(state.turn.marks.values())).outcome == "-"


def test_a_batch_decision_is_found_among_other_calls_sharing_its_id() -> None:
    """One id used for three different calls of one response: each per-call hook finds its own decision,
    whatever order the deliveries of the others were kept in."""
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn()
    assert guard.pre_tool_call(ToolCall("track", {"n": 1}, call_id="x")) is None
    guard.pre_llm_call()
    batch = [
        ToolCall("track", {"n": 2}, call_id="x"),
        ToolCall("ship", {}, call_id="x"),
        ToolCall("track", {"n": 1}, call_id="x"),
    ]
    decided = guard.pre_tool_calls(batch)
    assert [refusal is None for refusal in decided] == [True, True, False]
    again = [guard.pre_tool_call(call) for call in reversed(batch)]  # the per-call hooks, in another order
    assert [refusal is None for refusal in again] == [False, True, True]
    assert again[0] is not None and again[0].message == decided[2].message  # the same refusal, not a new count


def test_an_odd_delivery_id_deduplicates_as_its_text() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=2)
    guard.pre_agent_turn()
    call = ToolCall("track", {"n": 1})
    for delivery in ("é-1", "é-1", "d" * 1001, "d" * 1001, 7, 7):
        guard.post_tool_call(call, ok=False, result="down", delivery_id=delivery)  # type: ignore[arg-type]
    assert guard.state.turn.errors_in_a_row == 3  # each delivered twice, counted once
