"""Turns: counters live for one turn; a new turn id resets them, the same one does not."""

from __future__ import annotations

from repeat_hooks import StopRepeatedCalls, ToolCall

CALL = ToolCall("track_parcel", {"tracking_number": "FR-7731"})


def test_pre_agent_turn_resets_counts_refusals_and_the_stop() -> None:
    guard = StopRepeatedCalls(max_calls=1, max_refusals=1)
    guard.pre_agent_turn(turn_id="t1")
    guard.pre_tool_call(CALL)
    assert guard.pre_tool_call(CALL) is not None
    assert guard.pre_llm_call() is not None
    guard.pre_agent_turn(turn_id="t2")
    assert guard.pre_llm_call() is None
    assert guard.pre_tool_call(CALL) is None
    assert (guard.state.turn.id, guard.state.turn.number) == ("t2", 2)


def test_the_same_turn_id_again_does_not_reset() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn(turn_id="t1")
    guard.pre_tool_call(CALL)
    guard.pre_agent_turn(turn_id="t1")  # delivered twice
    assert guard.pre_tool_call(CALL) is not None


def test_a_turn_without_id_always_resets() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn()
    guard.pre_tool_call(CALL)
    guard.pre_agent_turn()
    assert guard.pre_tool_call(CALL) is None
    assert guard.state.turn.number == 2


def test_a_new_turn_id_on_any_hook_resets_lazily() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    assert guard.pre_tool_call(CALL, turn_id="t1") is None
    assert guard.pre_tool_call(CALL, turn_id="t1") is not None
    # pre_agent_turn for t2 was lost (or ran on another instance): the first hook that sees t2 resets
    assert guard.pre_llm_call(turn_id="t2") is None
    assert guard.pre_tool_call(CALL, turn_id="t2") is None
    guard.post_llm_call(turn_id="t3")
    assert guard.state.turn.id == "t3" and guard.state.turn.model_calls == 1


def test_events_survive_turns_and_name_their_turn() -> None:
    guard = StopRepeatedCalls(max_calls=0)
    guard.pre_tool_call(CALL, turn_id="a")
    guard.pre_tool_call(CALL, turn_id="b")
    assert [(e.kind, e.turn_id, e.turn) for e in guard.events] == [("refusal", "a", 1), ("refusal", "b", 2)]
