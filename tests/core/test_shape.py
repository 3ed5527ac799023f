"""The core's shape: a guard that holds its policy, verbs that say what they do, typed refusal kinds, the
stop rules as a table, and states saved by 0.1 that still load."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import ValidationError

from repeat_hooks import GuardState, Policy, RefusalKind, StopReason, StopRepeatedCalls, ToolCall
from repeat_hooks.messages import REFUSAL_MESSAGES
from repeat_hooks.state import Turn
from repeat_hooks.stop_rules import STOP_RULES, Feed, HookPoint

DATA = Path(__file__).parent / "data"


def test_the_guard_holds_a_policy_and_is_not_one() -> None:
    guard = StopRepeatedCalls(max_calls=3, match="tool")
    assert not isinstance(guard, Policy)
    assert guard.policy == Policy(max_calls=3, match="tool")
    assert StopRepeatedCalls(policy=Policy(max_calls=3, match="tool")) == guard


def test_settings_both_as_keywords_and_in_a_policy_are_refused() -> None:
    with pytest.raises(ValidationError, match="either as keywords or as policy=Policy"):
        StopRepeatedCalls(policy=Policy(), max_calls=3)  # type: ignore[call-arg]


def test_a_misspelt_setting_names_the_right_one() -> None:
    with pytest.raises(ValidationError, match="max_cals is not a setting; did you mean max_calls"):
        StopRepeatedCalls(max_cals=3)  # type: ignore[call-arg]


def test_a_guard_saved_by_0_1_loads_and_decides_as_it_would_have() -> None:
    guard = StopRepeatedCalls.model_validate_json((DATA / "guard_0_1.json").read_text())
    assert guard.policy.match == "tool" and guard.policy.limits == {"place_order": 1}
    turn = guard.state.turn
    assert (turn.id, turn.number, turn.refusals, turn.model_calls, turn.model_seconds) == ("t1", 1, 2, 1, 1.5)
    assert guard.pre_tool_call(ToolCall("track", {"n": 2}), turn_id="t1") is not None  # match="tool": 4th track
    assert guard.pre_tool_call(ToolCall("track"), turn_id="t2") is None  # a new turn counts afresh
    assert StopRepeatedCalls.model_validate_json(guard.model_dump_json()) == guard


def test_a_state_saved_by_0_1_loads() -> None:
    state = GuardState.model_validate_json((DATA / "state_0_1.json").read_text())
    assert state.turn.id == "t1" and state.turn.counts and state.turn.marks
    assert "d1" in state.deliveries and [event.kind for event in state.events] == ["refusal", "refusal"]


def test_a_new_turn_replaces_every_per_turn_counter() -> None:
    guard = StopRepeatedCalls(max_calls=1, max_refusals=1)
    guard.pre_agent_turn(turn_id="t1")
    for _ in range(2):
        guard.pre_tool_call(ToolCall("track"))
        guard.post_tool_call(ToolCall("track"), ok=False, result="timeout")
    guard.post_llm_call(2.0, 0.5)
    assert guard.pre_llm_call() is not None
    guard.pre_agent_turn(turn_id="t2")
    assert guard.state.turn == Turn(id="t2", number=2)
    assert len(guard.events) == 2  # events and deliveries are kept across turns


def test_ids_are_keyword_only_everywhere() -> None:
    for function in (
        StopRepeatedCalls.pre_agent_turn,
        StopRepeatedCalls.pre_tool_call,
        StopRepeatedCalls.post_tool_call,
        StopRepeatedCalls.pre_llm_call,
        StopRepeatedCalls.post_llm_call,
        Policy.start_turn,
        Policy.decide_tool_call,
        Policy.decide_tool_calls,
        Policy.record_tool_result,
        Policy.decide_model_call,
        Policy.record_model_call,
    ):
        for name in ("turn_id", "delivery_id"):
            parameter = inspect.signature(function).parameters.get(name)
            assert parameter is None or parameter.kind is inspect.Parameter.KEYWORD_ONLY, (function, name)
    with pytest.raises(TypeError):
        ToolCall("track", {}, "c1")  # type: ignore[misc]


def test_every_refusal_says_which_rule_refused_it() -> None:
    guard = StopRepeatedCalls(limits={"send": 0}, max_refusals=None)
    refused = guard.pre_tool_call(ToolCall("send"))
    assert refused is not None and refused.reason is RefusalKind.FORBIDDEN
    assert guard.events[-1].reason is RefusalKind.FORBIDDEN
    for _ in range(2):
        guard.pre_tool_call(ToolCall("track"))
        guard.post_tool_call(ToolCall("track"), ok=False, result="timeout")
    failure = guard.pre_tool_call(ToolCall("track"))
    assert failure is not None and failure.reason is RefusalKind.FAILURE
    with pytest.deprecated_call(match=r"Refusal.kind is deprecated: use Refusal.reason"):
        assert failure.kind is RefusalKind.FAILURE
    with pytest.deprecated_call(match=r"GuardEvent.refusal is deprecated: use GuardEvent.reason"):
        assert guard.events[-1].refusal is RefusalKind.FAILURE
    assert set(REFUSAL_MESSAGES) == set(RefusalKind) - {RefusalKind.REPEAT, RefusalKind.TURN_ENDED}


def test_a_refused_call_after_a_stop_says_the_turn_ended() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    guard.post_llm_call()
    stop = guard.pre_llm_call()
    refusal = guard.pre_tool_call(ToolCall("track"))
    assert stop is not None and refusal is not None
    assert refusal.reason is RefusalKind.TURN_ENDED and "(max_steps)" in refusal.message
    assert guard.stop == stop


def test_texts_read_right_for_one() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_tool_call(ToolCall("track"))
    refusal = guard.pre_tool_call(ToolCall("track"))
    assert refusal is not None and "1 times" not in refusal.message and "once" in refusal.message


def test_the_stop_rules_table_names_real_settings_and_counters() -> None:
    for rule in STOP_RULES:
        assert rule.setting in Policy.model_fields and rule.counter in Turn.model_fields
        assert rule.tool is None or rule.tool in Turn.model_fields
    assert [rule.reason for rule in STOP_RULES] == [
        StopReason.IGNORED_REFUSALS,
        StopReason.TOO_MANY_ERRORS,
        StopReason.REPEATED_ANSWER,
        StopReason.MAX_STEPS,
        StopReason.TIME,
        StopReason.COST,
    ]


@pytest.mark.parametrize(
    ("settings", "points", "feeds"),
    [
        ({}, {"pre_agent_turn", "pre_tool_call", "post_tool_call", "pre_llm_call"}, {"outcomes"}),
        ({"count": "per_turn", "max_refusals": None}, {"pre_agent_turn", "pre_tool_call"}, set()),
        ({"count": "per_turn", "max_refusals": None, "count_failures": False}, None, {"outcomes"}),
        ({"count": "per_turn", "max_model_calls": 5}, None, {"model_calls"}),
        (
            {"count": "per_turn", "warn": True},
            {"pre_agent_turn", "pre_tool_call", "post_tool_call", "pre_llm_call"},
            {"warnings"},
        ),
        (
            {"count": "per_turn", "max_same_answers": 3},
            {"pre_agent_turn", "pre_tool_call", "pre_llm_call", "post_llm_call"},
            {"answers"},
        ),
        (
            {"max_cost_usd": 1.0, "max_model_seconds": 30},
            {"pre_agent_turn", "pre_tool_call", "post_tool_call", "pre_llm_call", "post_llm_call"},
            {"outcomes", "cost", "seconds"},
        ),
    ],
)
def test_a_policy_says_which_hook_points_and_figures_it_needs(
    settings: dict[str, object], points: set[str] | None, feeds: set[str]
) -> None:
    policy = Policy(**settings)  # type: ignore[arg-type]
    if points is not None:
        assert {str(point) for point in policy.hook_points()} == points
    assert {str(feed) for feed in policy.feeds()} == feeds
    if Feed.MODEL_CALLS in policy.feeds():
        assert HookPoint.POST_LLM_CALL in policy.hook_points()


def test_call_ids_kept_by_0_1_are_recognised_after_the_upgrade() -> None:
    guard = StopRepeatedCalls.model_validate_json((DATA / "guard_0_1.json").read_text())
    # 0.1 decided c1 in turn t1 (and ran it); the same delivery again is recognised, not counted afresh
    assert any(ident.startswith("c1@") for ident in guard.state.deliveries)


def test_load_state_takes_a_whole_guard_dump_too() -> None:
    from repeat_hooks.kit import load_state

    saved = (DATA / "guard_0_1.json").read_text()
    assert load_state(saved).turn.id == "t1"
    assert load_state(StopRepeatedCalls.model_validate_json(saved)).turn.number == 1
    assert load_state(StopRepeatedCalls().model_dump_json()) == GuardState()


def test_settings_given_to_the_state_or_misspelt_name_the_fix() -> None:
    with pytest.raises(ValidationError, match="a GuardState holds one conversation's counts, not settings"):
        GuardState(max_calls=2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="max_cals is not a setting; did you mean max_calls"):
        Policy(max_cals=2)  # type: ignore[call-arg]


def test_a_batch_with_a_new_turn_id_starts_that_turn() -> None:
    guard = StopRepeatedCalls(max_calls=2, count="per_turn")
    track = ToolCall("track", {"parcel": "P1"})

    def response(calls: list[ToolCall], turn_id: str) -> list[object]:
        assert guard.pre_llm_call() is None
        guard.post_llm_call()
        return list(guard.pre_tool_calls(calls, turn_id=turn_id))

    assert response([track, track], "t1") == [None, None]
    assert response([track], "t2") == [None]  # a new turn: counted afresh
    assert guard.state.turn.id == "t2"
    refused = response([track, track], "t2")
    assert refused[0] is None and refused[1] is not None


def test_a_stop_event_kept_without_its_message_is_no_stop() -> None:
    from repeat_hooks import GuardEvent

    event = GuardEvent(kind="stop", reason=StopReason.MAX_STEPS, tool=None, count=5, limit=5, turn_id="t1", turn=1)
    assert event.as_stop() is None
    kept = event.model_copy(update={"message": "Stopped: too many steps."})
    stop = kept.as_stop()
    assert stop is not None and (stop.message, stop.reason) == ("Stopped: too many steps.", StopReason.MAX_STEPS)
