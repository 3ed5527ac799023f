"""Progress-aware counting (the default): a repeat is refused only when nothing has changed since its last run."""

from __future__ import annotations

from typing import Any

import pytest

from repeat_hooks import Policy, RefusalKind, StopRepeatedCalls, ToolCall
from repeat_hooks.messages import REFUSE_CYCLE, REFUSE_NO_PROGRESS, REFUSE_SAME_FAILURE

STATUS = ToolCall("get_status", {"line": 7})
FIX = ToolCall("reset_modem", {"line": 7})
LOOKUP = ToolCall("get_order", {"id": "A1"})


def run(guard: StopRepeatedCalls, call: ToolCall, result: Any = "same", ok: bool = True) -> bool:
    """One call as an adapter makes it: ``pre_tool_call``, then ``post_tool_call`` if it ran; ``True`` if it ran."""
    if guard.pre_tool_call(call) is not None:
        return False
    guard.post_tool_call(call, ok=ok, result=result)
    return True


def test_the_default_counts_progress() -> None:
    assert Policy().count == "progress"


def test_the_third_back_to_back_identical_call_is_refused() -> None:
    guard = StopRepeatedCalls()
    assert [run(guard, STATUS) for _ in range(4)] == [True, True, False, False]
    refusal = guard.pre_tool_call(STATUS)
    assert refusal is not None and refusal.message == REFUSE_NO_PROGRESS.format(tool="get_status", limit=2)


def test_a_call_that_may_change_state_restarts_the_other_counts() -> None:
    guard = StopRepeatedCalls()
    ran = [run(guard, call) for call in (STATUS, STATUS, FIX, STATUS, STATUS, STATUS)]
    assert ran == [True, True, True, True, True, False]


def test_a_read_only_call_restarts_nothing() -> None:
    by_setting = StopRepeatedCalls(read_only={"get_order"})
    assert [run(by_setting, call) for call in (STATUS, STATUS, LOOKUP, STATUS)] == [True, True, True, False]
    by_hint = StopRepeatedCalls()
    hinted = ToolCall("get_order", {"id": "A1"}, read_only=True)
    assert [run(by_hint, call) for call in (STATUS, STATUS, hinted, STATUS)] == [True, True, True, False]


def test_the_sdks_hint_wins_over_the_setting() -> None:
    guard = StopRepeatedCalls(read_only={"reset_modem"})
    writes = ToolCall("reset_modem", {"line": 7}, read_only=False)
    assert [run(guard, call) for call in (STATUS, STATUS, writes, STATUS)] == [True, True, True, True]


def test_a_failed_call_restarts_nothing() -> None:
    guard = StopRepeatedCalls()
    assert run(guard, STATUS) and run(guard, STATUS)
    assert run(guard, FIX, result="modem busy", ok=False)
    assert not run(guard, STATUS)


def test_a_new_result_is_progress_and_restarts_the_calls_own_count() -> None:
    guard = StopRepeatedCalls()
    results = ["queued", "in transit", "out for delivery", "delivered", "delivered", "delivered"]
    assert [run(guard, STATUS, result) for result in results] == [True] * 5 + [False]


def test_results_are_compared_by_canonical_json_and_never_stored() -> None:
    guard = StopRepeatedCalls()
    assert run(guard, STATUS, {"status": "late", "eta": 3, "secret": "s3cr3t-token"})
    assert run(guard, STATUS, '{"eta": 3, "secret": "s3cr3t-token", "status": "late"}')
    assert not run(guard, STATUS, {"status": "late", "eta": 3})
    assert "s3cr3t" not in guard.model_dump_json()


def test_the_same_failure_back_to_back_is_refused_with_its_own_text() -> None:
    guard = StopRepeatedCalls()
    assert run(guard, STATUS, "Error: line 7 unknown", ok=False)
    assert run(guard, STATUS, "Error: line 7 unknown", ok=False)
    refusal = guard.pre_tool_call(STATUS)
    assert refusal is not None and refusal.message == REFUSE_SAME_FAILURE.format(tool="get_status", limit=2)


def test_an_error_cycle_is_refused_at_its_third_pass() -> None:
    guard = StopRepeatedCalls()
    for _ in range(2):
        assert run(guard, STATUS, "Error: line 7 unknown", ok=False)
        assert run(guard, FIX, "done")
    refusal = guard.pre_tool_call(STATUS)
    assert refusal is not None and refusal.message == REFUSE_CYCLE.format(tool="get_status", count=2)


def test_a_retry_after_a_different_fix_each_time_is_never_refused() -> None:
    guard = StopRepeatedCalls()
    tests = ToolCall("run_tests", {})
    for attempt in range(5):
        assert run(guard, tests, "FAILED test_parse: AssertionError", ok=False)
        assert run(guard, ToolCall("edit_file", {"path": "parse.py", "patch": f"fix {attempt}"}), "edited")
    assert run(guard, tests, "5 passed")


def test_a_different_failure_is_progress() -> None:
    guard = StopRepeatedCalls()
    for attempt, error in enumerate(("Error: timeout", "Error: busy", "Error: timeout")):
        assert run(guard, STATUS, error, ok=False)
        assert run(guard, FIX, f"reset {attempt}")
    assert run(guard, STATUS, "ok")


def test_a_retry_after_a_failure_that_then_succeeds_counts_afresh() -> None:
    guard = StopRepeatedCalls()
    assert run(guard, STATUS, "Error: timeout", ok=False)
    assert run(guard, STATUS, "ok")
    assert run(guard, STATUS, "ok")
    assert not run(guard, STATUS, "ok")


@pytest.mark.parametrize("period", [2, 3, 4])
def test_a_cycle_is_refused_at_the_start_of_its_third_identical_pass(period: int) -> None:
    guard = StopRepeatedCalls()
    calls = [ToolCall(f"step_{n}", {"n": n}) for n in range(period)]
    for _ in range(2):
        assert [run(guard, call) for call in calls] == [True] * period
    refusal = guard.pre_tool_call(calls[0])
    assert refusal is not None and refusal.reason is RefusalKind.CYCLE
    assert refusal.message == REFUSE_CYCLE.format(tool="step_0", count=period)
    assert guard.events[-1].count == period


@pytest.mark.parametrize("period", [2, 3])
def test_a_cycle_that_goes_on_after_its_refusal_runs_no_more(period: int) -> None:
    """A-B-A-B, refused at the third A: the model goes on with B, A, B... Each call it would have repeated with
    nothing changed is refused too (before, the refused call's hole broke the pattern: over 20 responses 12 of 15
    calls ran), and the turn ends for ignored refusals as for a plain repeat."""
    guard = StopRepeatedCalls(max_refusals=None)
    calls = [ToolCall(f"step_{n}", {"n": n}) for n in range(period)]
    ran = [run(guard, calls[index % period]) for index in range(10 * period)]
    assert ran == [True] * (2 * period) + [False] * (8 * period)
    assert guard.events[0].reason is RefusalKind.CYCLE  # then cycle or repeat: refused calls count too
    assert {event.reason for event in guard.events} <= {RefusalKind.CYCLE, RefusalKind.REPEAT}
    stopping = StopRepeatedCalls()  # max_refusals=3: the 3rd refused response ends the turn
    for index in range(2 * period + 3):
        guard_call = calls[index % period]
        assert stopping.pre_llm_call() is None
        run(stopping, guard_call)
    stop = stopping.pre_llm_call()
    assert stop is not None and stop.reason.value == "ignored_refusals"


def test_a_cycle_refused_then_broken_by_a_change_runs_again() -> None:
    guard = StopRepeatedCalls()
    for _ in range(2):
        assert run(guard, STATUS) and run(guard, FIX)
    assert not run(guard, STATUS)  # the cycle, refused
    assert run(guard, ToolCall("reboot", {"line": 7}), "rebooting")  # something that may change the world ran
    assert run(guard, STATUS, "online")  # so the status may differ: it runs, and it did


def test_a_cycle_longer_than_max_cycle_period_is_not_a_cycle() -> None:
    guard = StopRepeatedCalls(max_cycle_period=3)
    calls = [ToolCall(f"step_{n}", {"n": n}) for n in range(4)]
    for _ in range(2):
        assert [run(guard, call) for call in calls] == [True] * 4
    assert guard.pre_tool_call(calls[0]) is None


def test_no_cycle_when_a_pass_returned_something_new() -> None:
    guard = StopRepeatedCalls()
    for status in ("offline", "online"):
        assert run(guard, STATUS, status) and run(guard, FIX)
    assert guard.pre_tool_call(STATUS) is None


def test_cycle_detection_can_be_switched_off() -> None:
    guard = StopRepeatedCalls(max_cycle_period=None)
    for _ in range(3):
        assert run(guard, STATUS) and run(guard, FIX)
    assert guard.state.turn.runs == []


def test_a_redelivered_cycle_refusal_gets_the_same_text() -> None:
    guard = StopRepeatedCalls()
    for _ in range(2):
        assert run(guard, STATUS) and run(guard, FIX)
    again = ToolCall("get_status", {"line": 7}, call_id="c9")
    first, second = guard.pre_tool_call(again), guard.pre_tool_call(again)
    assert first is not None and first == second and first.message.startswith("Refused: the last 2 calls")
    assert guard.state.turn.refusals == 1


def test_an_exempt_tool_between_polls_restarts_their_count() -> None:
    guard = StopRepeatedCalls(exempt={"wait"})
    wait = ToolCall("wait", {"seconds": 30})
    for _ in range(5):
        assert run(guard, STATUS, "running") and run(guard, wait, None)


def test_per_turn_counting_counts_every_repeat_of_the_turn() -> None:
    guard = StopRepeatedCalls(count="per_turn")
    assert [run(guard, call) for call in (STATUS, FIX, STATUS, FIX, STATUS)] == [True, True, True, True, False]
    refusal = guard.pre_tool_call(STATUS)
    assert refusal is not None and "in this turn" in refusal.message


def test_parallel_identical_calls_refuse_exactly_the_excess() -> None:
    guard = StopRepeatedCalls()
    assert guard.pre_llm_call() is None
    decisions = [guard.pre_tool_call(STATUS) for _ in range(4)]
    assert [d is None for d in decisions] == [True, True, False, False]
    for _ in range(2):
        guard.post_tool_call(STATUS, result="same")
    assert guard.pre_tool_call(STATUS) is not None


def test_a_write_running_in_parallel_restarts_the_reads_beside_it() -> None:
    guard = StopRepeatedCalls()
    assert guard.pre_tool_call(STATUS) is None and guard.pre_tool_call(STATUS) is None
    assert guard.pre_tool_call(FIX) is None
    guard.post_tool_call(STATUS, result="same")
    guard.post_tool_call(FIX, result="done")
    guard.post_tool_call(STATUS, result="same")
    assert run(guard, STATUS)  # the fix ran after the reads had started: the status may differ now


def test_a_neighbour_in_the_same_response_that_ran_first_restarts_no_count() -> None:
    """A CLI that runs a response's calls one after another (a hook per call, each after the previous one's result):
    the model chose them together, so a write among them restarts no count before the next response; the next
    response's calls see it."""
    guard = StopRepeatedCalls()
    assert guard.pre_llm_call() is None
    assert [run(guard, STATUS), run(guard, STATUS)] == [True, True]
    guard.post_llm_call()
    assert guard.pre_llm_call() is None
    assert [run(guard, FIX, "done"), run(guard, STATUS), run(guard, STATUS)] == [True, False, False]  # one response
    guard.post_llm_call()
    assert guard.pre_llm_call() is None
    assert [run(guard, STATUS), run(guard, STATUS), run(guard, STATUS)] == [True, True, False]  # it saw the fix now


def test_a_calls_own_runs_in_one_response_count_as_the_same_call() -> None:
    guard = StopRepeatedCalls()
    assert guard.pre_llm_call() is None
    assert [run(guard, FIX, "done") for _ in range(3)] == [True, True, False]
    guard.post_llm_call()
    assert guard.pre_llm_call() is None
    assert not run(guard, FIX, "done")  # its own runs are no change to itself


def test_a_write_repeated_with_only_failures_between_is_refused() -> None:
    guard = StopRepeatedCalls()
    outcomes = [run(guard, FIX, "done"), run(guard, STATUS, "Error", ok=False), run(guard, FIX, "done")]
    assert outcomes == [True, True, True]
    assert run(guard, STATUS, "Error 2", ok=False)
    assert not run(guard, FIX, "done")  # the failures changed nothing


def test_a_write_repeated_with_nothing_else_between_is_refused() -> None:
    guard = StopRepeatedCalls()
    assert [run(guard, FIX, "done") for _ in range(3)] == [True, True, False]


def test_a_new_turn_forgets_progress() -> None:
    guard = StopRepeatedCalls()
    guard.pre_agent_turn(turn_id="t1")
    for _ in range(2):
        assert run(guard, STATUS) and run(guard, FIX)
    guard.pre_agent_turn(turn_id="t2")
    assert guard.state.turn.marks == {} and guard.state.turn.runs == [] and guard.state.turn.changes == 0
    assert run(guard, STATUS)


def test_max_keys_forgets_the_marks_with_the_counts() -> None:
    guard = StopRepeatedCalls(max_keys=2)
    for n in range(5):
        assert run(guard, ToolCall("lookup", {"n": n}))
    assert len(guard.state.turn.counts) == len(guard.state.turn.marks) == 2
    assert set(guard.state.turn.counts) == set(guard.state.turn.marks)


def test_ignore_results_makes_a_new_order_id_the_same_result() -> None:
    order = ToolCall("place_order", {"item": "hammock"})
    plain = StopRepeatedCalls()
    assert [run(plain, order, {"order_id": n, "status": "placed"}) for n in range(4)] == [True] * 4
    guarded = StopRepeatedCalls(ignore_results={"order_id", "checked_at"})
    outcomes = [run(guarded, order, {"order_id": n, "status": "placed", "checked_at": n}) for n in range(4)]
    assert outcomes == [True, True, False, False]


def test_a_result_with_no_stable_form_is_new_every_time_up_to_the_cap() -> None:
    class Screenshot:  # an image, an SDK object: nothing to compare
        pass

    guard = StopRepeatedCalls()
    shot, click = ToolCall("screenshot", {}), ToolCall("click", {"id": "next"})
    for _ in range(6):  # a change between: each screenshot may show something new, so no cap
        assert run(guard, shot, Screenshot()) and run(guard, click, "clicked")
    assert [run(guard, shot, Screenshot()) for _ in range(7)] == [True] * 5 + [False] * 2  # nothing between
    assert guard.events[-1].reason is RefusalKind.OPAQUE
    assert "5 times" in guard.pre_tool_call(shot).message  # type: ignore[union-attr]
    uncapped = StopRepeatedCalls(max_opaque_runs=None)
    assert all(run(uncapped, shot, Screenshot()) for _ in range(10))


def test_a_call_id_reused_by_another_call_is_decided_afresh() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn(turn_id="t1")
    assert guard.pre_tool_call(ToolCall("track", {"n": 1}, call_id="call_2")) is None
    assert guard.pre_tool_call(ToolCall("track", {"n": 1}, call_id="call_3")) is not None
    guard.pre_agent_turn(turn_id="t2")
    assert guard.pre_tool_call(ToolCall("get_weather", {"city": "Paris"}, call_id="call_3")) is None
    assert guard.state.turn.refusals == 0


def test_a_custom_refusal_text_is_used_for_cycles_too() -> None:
    guard = StopRepeatedCalls(refusal_message="Nein: {tool} ({count})")
    for _ in range(2):
        assert run(guard, STATUS) and run(guard, FIX)
    refusal = guard.pre_tool_call(STATUS)
    assert refusal is not None and refusal.message == "Nein: get_status (2)"


def test_a_cycle_of_eight_calls_is_caught_by_default() -> None:
    guard = StopRepeatedCalls()
    calls = [ToolCall(f"step_{n}", {}) for n in range(8)]
    for _ in range(2):
        assert all(run(guard, call) for call in calls)
    assert guard.pre_tool_call(calls[0]) is not None


def test_the_window_never_lets_a_tight_loop_through() -> None:
    a, b, c = ToolCall("A"), ToolCall("B"), ToolCall("C")
    guard = StopRepeatedCalls(window=5, read_only={"C"})
    outcomes = [run(guard, call, 1) for call in (a, a, b, a, c, a, a)]
    assert outcomes == [True, True, True, True, True, True, False]
