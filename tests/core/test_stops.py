"""Ending the turn: each rule, its reason, its final message, and what happens after."""

from __future__ import annotations

import logging

import pytest

from repeat_hooks import RefusalKind, StopReason, StopRepeatedCalls, ToolCall

CALL = ToolCall("track_parcel", {"tracking_number": "FR-7731"})


def refuse(guard: StopRepeatedCalls, times: int) -> None:
    for _ in range(times):
        assert guard.pre_tool_call(CALL) is not None


def test_ignored_refusals_end_the_turn_at_the_next_model_call() -> None:
    guard = StopRepeatedCalls(max_calls=0, max_refusals=3)
    for _ in range(2):
        assert guard.pre_llm_call() is None
        refuse(guard, 1)
    assert guard.pre_llm_call() is None
    refuse(guard, 1)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert (
        stop.message
        == "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
    )


def test_refusals_in_one_model_response_count_once() -> None:
    """5 parallel calls in one response, 3 refused: the model has seen none of them yet, so the turn goes on."""
    guard = StopRepeatedCalls(max_calls=2, max_refusals=3)
    assert guard.pre_llm_call() is None
    decisions = [guard.pre_tool_call(CALL) for _ in range(5)]
    assert [d is None for d in decisions] == [True, True, False, False, False]
    assert guard.state.turn.refusals == 3 and guard.state.turn.refused_responses == 1
    assert guard.pre_llm_call() is None  # the model now reads the 3 refusals
    refuse(guard, 1)  # ...and asks again: the 2nd response it got refused
    assert guard.pre_llm_call() is None
    refuse(guard, 2)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert guard.state.turn.refused_responses == 3 and guard.state.turn.refusals == 6


def test_max_refusals_zero_ends_the_turn_at_the_first_refusal_as_a_repeated_call() -> None:
    guard = StopRepeatedCalls(max_calls=1, max_refusals=0)
    assert guard.pre_tool_call(CALL) is None
    assert guard.pre_llm_call() is None
    refuse(guard, 1)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.REPEATED_CALL


def test_max_refusals_none_never_ends_the_turn() -> None:
    guard = StopRepeatedCalls(max_calls=0, max_refusals=None)
    refuse(guard, 100)
    assert guard.pre_llm_call() is None


def test_model_calls_end_the_turn_with_max_steps() -> None:
    guard = StopRepeatedCalls(max_model_calls=2)
    guard.post_llm_call()
    assert guard.pre_llm_call() is None
    guard.post_llm_call()
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert stop.message == "I stopped: this turn reached its limit of 2 model calls."


def test_time_and_cost_use_recorded_figures() -> None:
    timed = StopRepeatedCalls(max_model_seconds=3)
    for seconds in (1.06, 0.877):
        timed.post_llm_call(seconds=seconds)
    assert timed.pre_llm_call() is None
    timed.post_llm_call(seconds=1.373)  # 3.31 s > 3 s
    stop = timed.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.TIME

    costly = StopRepeatedCalls(max_cost_usd=0.0005)
    costly.post_llm_call(cost_usd=0.0005)
    assert costly.pre_llm_call() is None  # at the cap is not over it
    costly.post_llm_call(cost_usd=0.0002)
    stop = costly.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.COST
    assert stop.message == "I stopped: this turn used up its budget of 0.0005 US dollars."


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "soon", None])
def test_bad_budget_figures_count_as_zero(bad: object) -> None:
    guard = StopRepeatedCalls(max_model_seconds=1, max_cost_usd=1)
    guard.post_llm_call(seconds=bad, cost_usd=bad)  # type: ignore[arg-type]
    assert (guard.state.turn.model_calls, guard.state.turn.model_seconds, guard.state.turn.cost_usd) == (1, 0.0, 0.0)
    assert guard.pre_llm_call() is None


def test_one_reason_when_several_rules_trip_behaviour_first() -> None:
    guard = StopRepeatedCalls(max_calls=0, max_refusals=1, max_errors_in_a_row=1, max_model_calls=1)
    refuse(guard, 1)
    guard.post_tool_call(ToolCall("other"), ok=False)
    guard.post_llm_call()
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert [e.kind for e in guard.events].count("stop") == 1


def test_a_stopped_turn_stays_stopped_and_refuses_further_calls() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    guard.post_llm_call()
    first = guard.pre_llm_call()
    assert first is not None and guard.pre_llm_call() == first
    refusal = guard.pre_tool_call(ToolCall("anything", {"n": 1}))
    assert refusal is not None and refusal.reason is RefusalKind.TURN_ENDED
    assert "turn has ended (max_steps)" in refusal.message
    assert [e.kind for e in guard.events] == ["stop"]


def test_custom_stop_messages_replace_the_defaults() -> None:
    guard = StopRepeatedCalls(
        match="tool",
        max_calls=0,
        max_refusals=1,
        stop_messages={StopReason.IGNORED_REFUSALS: "I stopped checking {tool}: the status did not change."},
    )
    refuse(guard, 1)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.message == "I stopped checking track_parcel: the status did not change."


def test_refusals_and_stops_are_logged_without_arguments(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="repeat_hooks")
    guard = StopRepeatedCalls(max_calls=0, max_refusals=1)
    guard.pre_tool_call(ToolCall("send", {"secret": "hunter2"}), turn_id="t9")
    guard.pre_llm_call()
    records = [r for r in caplog.records if r.name == "repeat_hooks"]
    assert [r.levelname for r in records] == ["INFO", "WARNING"]
    assert "refusal: forbidden tool=send count=1 limit=0 turn=t9" in records[0].getMessage()
    assert "stop: ignored_refusals" in records[1].getMessage()
    assert all("hunter2" not in r.getMessage() for r in records)
    assert [(e.kind, e.reason.value, e.tool) for e in guard.events] == [
        ("refusal", "forbidden", "send"),
        ("stop", "ignored_refusals", "send"),
    ]


def test_a_past_turns_stop_stays_readable_from_its_event() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    guard.post_llm_call(turn_id="t1")
    stop = guard.pre_llm_call(turn_id="t1")
    assert stop is not None and guard.stop_of("t1") == stop
    guard.pre_agent_turn(turn_id="t2")
    assert guard.state.turn.stop is None
    assert guard.stop_of("t1") == stop
    assert guard.stop_of("t2") is None
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    assert restored.stop_of("t1") == stop


def answer(guard: StopRepeatedCalls, text: str) -> None:
    assert guard.pre_llm_call() is None
    guard.post_llm_call(answer=text)


def test_the_same_answer_in_a_row_ends_the_turn_with_repeated_answer() -> None:
    """A loop around the agent re-prompts it; it says the same thing each time: the 3rd same answer in a row ends
    the turn at the next model call (volatile tokens masked, surrounding space ignored), with its count."""
    guard = StopRepeatedCalls(max_same_answers=3)
    answer(guard, "Your parcel is in transit (checked 2026-12-02T07:00:01Z).")
    answer(guard, "  Your parcel is in transit (checked 2026-12-02T07:00:09Z).\n")
    answer(guard, "Your parcel is in transit (checked 2026-12-02T07:01:00Z).")
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.REPEATED_ANSWER
    assert stop.message == (
        "I stopped: I gave the same answer 3 times in a row, and it would not change in this turn. Ask me again later."
    )
    assert guard.events[-1].count == 3 and guard.events[-1].limit == 3
    assert "transit" not in guard.model_dump_json()  # a digest, never the text


def test_a_tool_call_or_another_answer_between_starts_the_count_again() -> None:
    guard = StopRepeatedCalls(max_same_answers=2)
    answer(guard, "done")
    assert guard.pre_llm_call() is None  # a response that calls a tool: something happened
    assert guard.pre_tool_call(CALL) is None
    guard.post_tool_call(CALL, result="in transit")
    guard.post_llm_call()
    answer(guard, "done")
    answer(guard, "done, really")
    answer(guard, "done")
    assert guard.pre_llm_call() is None
    guard.post_llm_call(answer="done")
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason is StopReason.REPEATED_ANSWER


def test_answers_count_per_turn_once_per_response_and_only_when_set() -> None:
    guard = StopRepeatedCalls(max_same_answers=2)
    answer(guard, "done")
    guard.post_llm_call(answer="done")  # the same response recorded twice (no delivery id): one answer
    guard.pre_agent_turn()
    answer(guard, "done")  # a new turn: counted afresh
    assert guard.pre_llm_call() is None
    off = StopRepeatedCalls()
    for _ in range(5):
        answer(off, "done")
    assert off.pre_llm_call() is None and off.state.turn.same_answers == 0
    with pytest.raises(ValueError, match="greater than or equal to 2"):
        StopRepeatedCalls(max_same_answers=1)


def test_an_adapter_that_feeds_no_answers_refuses_the_setting_at_setup() -> None:
    from repeat_hooks import GuardSetupError
    from repeat_hooks.kit import check_budgets

    with pytest.raises(GuardSetupError, match=r"Policy\(max_same_answers=...\) could never trip: MyGuard cannot feed"):
        check_budgets(StopRepeatedCalls(max_same_answers=3).policy, owner="MyGuard", cost=None, clock=None)
