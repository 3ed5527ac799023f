"""``Policy(warn=True)``: a note after the last result a rule lets through, when the same call made next would be
refused. It changes no decision, and what it says is true."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repeat_hooks import GuardSetupError, Policy, StopRepeatedCalls, ToolCall
from repeat_hooks.kit import check_budgets

TRACK = ToolCall("track_parcel", {"tracking_number": "FR-7731"})
NOTE = (
    "Note: track_parcel has now run 2 times like this with nothing changed in between; the same call again will be "
    "refused. Use this result, try something different, or give your answer with what you know."
)


def run(guard: StopRepeatedCalls, call: ToolCall, result: Any = "in transit", ok: bool = True) -> str | None:
    """One response with one call: the refusal's text, or the note after its result (``""``: neither)."""
    assert guard.pre_llm_call() is None
    refusal = guard.pre_tool_call(call)
    if refusal is not None:
        return refusal.message
    return guard.post_tool_call(call, ok, result=result) or ""


def test_the_last_run_before_a_refusal_carries_the_note_and_the_next_is_refused() -> None:
    guard = StopRepeatedCalls(warn=True)
    assert run(guard, TRACK) == ""
    assert run(guard, TRACK) == NOTE
    assert run(guard, TRACK).startswith("Refused")  # type: ignore[union-attr]


def test_no_note_when_the_result_changed_or_something_ran_between() -> None:
    guard = StopRepeatedCalls(warn=True)
    run(guard, TRACK, "in transit")
    assert run(guard, TRACK, "delivered") == ""  # a new result: progress, its count restarts
    assert run(guard, ToolCall("reroute_parcel", {"to": "depot"})) == ""
    assert run(guard, TRACK, "delivered") == ""  # a change ran since: counted afresh
    assert run(guard, TRACK, "delivered") == NOTE


def test_a_write_that_succeeded_is_warned_at_once() -> None:
    guard = StopRepeatedCalls(warn=True, destructive={"place_order"})
    order = ToolCall("place_order", {"item": "box"})
    note = run(guard, order, {"order": 1001})
    assert note is not None and note.startswith("Note: place_order has now run once like this")
    assert run(guard, order, {"order": 1002}).startswith("Refused: place_order already succeeded")  # type: ignore[union-attr]


def test_failures_and_per_turn_counts_are_warned_too() -> None:
    guard = StopRepeatedCalls(warn=True)
    run(guard, TRACK, "carrier timeout", ok=False)
    assert run(guard, TRACK, "carrier timeout", ok=False) == NOTE
    per_turn = StopRepeatedCalls(warn=True, count="per_turn", max_calls=3, window=4)
    notes = [run(per_turn, TRACK, f"run {n}") for n in range(4)]
    assert notes[:2] == ["", ""] and notes[2] is not None and notes[2].startswith("Note: track_parcel has now run 3")
    assert notes[3].startswith("Refused")  # type: ignore[union-attr]


def test_off_by_default_and_never_for_exempt_or_unlimited_tools() -> None:
    assert [run(StopRepeatedCalls(), TRACK) for _ in range(2)] == ["", ""]
    exempt = StopRepeatedCalls(warn=True, exempt={"track_parcel"})
    assert [run(exempt, TRACK) for _ in range(3)] == ["", "", ""]
    unlimited = StopRepeatedCalls(warn=True, max_calls=None)
    assert [run(unlimited, TRACK) for _ in range(3)] == ["", "", ""]


def test_an_adapter_that_cannot_hand_the_note_refuses_the_setting_at_setup() -> None:
    with pytest.raises(GuardSetupError, match=r"Policy\(warn=True\) needs MyGuard to hand the model a note"):
        check_budgets(Policy(warn=True), owner="MyGuard", cost=None, clock=None)


CALLS = [ToolCall("track_parcel", {"n": 1}), ToolCall("track_parcel", {"n": 2}), ToolCall("reroute", {})]
STEP = st.tuples(st.integers(0, 2), st.sampled_from(["a", "b"]), st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(STEP, max_size=14),
    count=st.sampled_from(["progress", "per_turn"]),
    max_calls=st.integers(1, 3),
    window=st.sampled_from([None, 5]),
)
def test_warnings_change_no_decision_and_are_true(
    steps: list[tuple[int, str, bool]], count: str, max_calls: int, window: int | None
) -> None:
    """The same calls run and are refused with ``warn=True`` as without; and a note means the same call made next
    (nothing between) is refused."""
    settings_ = {"count": count, "max_calls": max_calls, "window": window, "read_only": {"track_parcel"}}
    plain, warned = StopRepeatedCalls(**settings_), StopRepeatedCalls(**settings_, warn=True)
    for index, result, ok in steps:
        call = CALLS[index]
        for guard in (plain, warned):
            guard.pre_llm_call()
        decisions = [plain.pre_tool_call(call), warned.pre_tool_call(call)]
        assert (decisions[0] is None) == (decisions[1] is None)
        if decisions[0] is not None:
            continue
        plain.post_tool_call(call, ok, result=result)
        note = warned.post_tool_call(call, ok, result=result)
        if note is not None:
            probe = warned.model_copy(deep=True)
            probe.pre_llm_call()
            assert probe.pre_tool_call(call) is not None, note
    assert plain.state.turn.counts == warned.state.turn.counts
