"""Observers hear each fresh decision once, after whoever commits the state tells them; they cannot change a
decision and never break the agent. The policy itself tells nobody."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from repeat_hooks import GuardState, Policy, ToolCall
from repeat_hooks.observe import (
    ModelCallDecided,
    ModelCallRecorded,
    Observation,
    ToolCallDecided,
    ToolResultRecorded,
    TurnStarted,
    add_observer,
    current_scope,
    publishing,
    scope,
)


@pytest.fixture
def heard() -> Iterator[list[Observation]]:
    seen: list[Observation] = []
    remove = add_observer(seen.append)
    yield seen
    remove()


def _loop(policy: Policy, state: GuardState) -> list[object]:
    """One turn: three identical lookups, one model call each, the same result every time; each verb committed
    at once (as the hook and an in-process store do), so observers hear it after it."""
    decisions: list[object] = []
    with publishing(state):
        policy.start_turn(state, turn_id="t1")
    for step in range(3):
        with publishing(state):
            decisions.append(policy.decide_model_call(state))
        with publishing(state):
            policy.record_model_call(state, seconds=2.0, cost_usd=0.5, delivery_id=f"m{step}")
        call = ToolCall(name="track", arguments={"id": "FR-1"}, call_id=f"c{step}")
        with publishing(state):
            decisions.append(policy.decide_tool_call(state, call))
        with publishing(state):
            policy.record_tool_result(state, call, ok=True, result={"status": "in transit"})
    with publishing(state):
        decisions.append(policy.decide_model_call(state))
    return decisions


def test_each_fresh_decision_is_heard_once_in_order(heard: list[Observation]) -> None:
    policy, state = Policy(max_calls=2, max_refusals=1), GuardState()

    _loop(policy, state)
    call = ToolCall(name="track", arguments={"id": "FR-1"}, call_id="c2")
    with publishing(state):
        policy.decide_tool_call(state, call)  # a second delivery of a decided call: not heard again
        policy.record_model_call(state, delivery_id="m1")  # a second delivery of a model call: not heard again

    kinds = [type(seen).__name__ for seen in heard]
    assert kinds == [
        "TurnStarted",
        *["ModelCallDecided", "ModelCallRecorded", "ToolCallDecided", "ToolResultRecorded"] * 2,
        *["ModelCallDecided", "ModelCallRecorded", "ToolCallDecided"],  # refused: no result
        "ModelCallDecided",  # the stop
    ]
    decided = [seen for seen in heard if isinstance(seen, ToolCallDecided)]
    assert [seen.refusal is None for seen in decided] == [True, True, False]
    assert {seen.key for seen in decided} == {decided[0].key}
    assert decided[2].model_seconds == 2.0 and decided[2].model_cost_usd == 0.5
    assert [seen.where.response for seen in decided] == [1, 2, 3]
    stop = heard[-1]
    assert isinstance(stop, ModelCallDecided) and stop.stop is not None
    assert stop.where.turn_id == "t1" and stop.where.turn == 1
    results = [seen for seen in heard if isinstance(seen, ToolResultRecorded)]
    assert [seen.result for seen in results] == [{"status": "in transit"}] * 2
    recorded = [seen for seen in heard if isinstance(seen, ModelCallRecorded)]
    assert [(seen.seconds, seen.cost_usd) for seen in recorded] == [(2.0, 0.5)] * 3
    assert isinstance(heard[0], TurnStarted)


def test_an_observer_changes_no_decision_and_one_that_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    quiet = _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    def broken(seen: Observation) -> None:
        raise RuntimeError("exporter down")

    remove = add_observer(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
            observed = _loop(Policy(max_calls=2, max_refusals=1), GuardState())
    finally:
        remove()

    assert observed == quiet
    assert "observer" in caplog.text and "exporter down" in caplog.text


def test_an_observer_added_twice_is_refused_and_removing_stops_it() -> None:
    seen: list[Observation] = []
    remove = add_observer(seen.append)
    try:
        with pytest.raises(ValueError, match="already observing"):
            add_observer(seen.append)
    finally:
        remove()
    remove()  # harmless
    _loop(Policy(), GuardState())
    assert seen == []
    with pytest.raises(TypeError, match="function of one Observation, not str"):
        add_observer("print")  # type: ignore[arg-type]


def test_scope_names_the_conversation_and_agent_and_nests() -> None:
    assert current_scope().conversation_id is None
    with scope(conversation_id="c-1", agent_name="tracker"):
        with scope(agent_name="helper"):
            assert (current_scope().conversation_id, current_scope().agent_name) == ("c-1", "helper")
        assert current_scope().agent_name == "tracker"
    assert current_scope().agent_name is None


def test_a_batch_is_heard_with_the_ids_the_model_gave() -> None:
    """``decide_tool_calls`` tells calls of one response apart by position (``#1``, ``c#1``); observers hear
    the calls as the model gave them."""
    seen: list[Observation] = []
    remove = add_observer(seen.append)
    try:
        policy, state = Policy(), GuardState()
        calls = [
            ToolCall(name="track", arguments={"id": "A"}, call_id="c#1"),
            ToolCall(name="track", arguments={"id": "B"}, call_id="c#1"),
            ToolCall(name="track", arguments={"id": "C"}),
        ]
        with publishing(state):
            policy.decide_model_call(state)
            policy.decide_tool_calls(state, calls)
    finally:
        remove()
    decided = [observation.call for observation in seen if isinstance(observation, ToolCallDecided)]
    assert decided == calls


def test_the_policy_tells_nobody_until_the_state_is_committed(heard: list[Observation]) -> None:
    """A verb on a state that nobody commits is heard by nobody (a replay, a state rebuilt from an SDK's history,
    an attempt a store throws away); a committed change is heard once, after it; one that raises, never."""
    policy, state = Policy(), GuardState()
    policy.start_turn(state, turn_id="t1")
    policy.decide_tool_call(state, ToolCall("track"))
    assert heard == [] and state.news is None

    with publishing(state):
        policy.decide_tool_call(state, ToolCall("track", {"n": 2}))
        assert heard == [] and state.news is not None and len(state.news) == 1  # kept until the block ends
    assert [type(seen).__name__ for seen in heard] == ["ToolCallDecided"] and state.news is None

    with pytest.raises(RuntimeError, match="not committed"), publishing(state):
        policy.decide_tool_call(state, ToolCall("track", {"n": 3}))
        raise RuntimeError("not committed")
    assert len(heard) == 1 and state.news is None


def test_held_is_deprecated_and_holds_nothing() -> None:
    from repeat_hooks.observe import held

    with pytest.deprecated_call(match="the policy tells nobody"), held() as kept:
        Policy().start_turn(GuardState(), turn_id="t1")
    assert kept == []


def test_an_observer_that_keeps_failing_logs_one_traceback(caplog: pytest.LogCaptureFixture) -> None:
    def broken(seen: Observation) -> None:
        raise RuntimeError("exporter down")

    remove = add_observer(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
            _loop(Policy(max_calls=2, max_refusals=1), GuardState())
    finally:
        remove()
    failures = [record for record in caplog.records if "observer" in record.getMessage()]
    assert len(failures) > 2
    assert [record.exc_info is not None for record in failures] == [True] + [False] * (len(failures) - 1)
    # Each line names the observer; the later ones the error too (they have no traceback to show it).
    assert failures[0].getMessage() == f"repeat_hooks observer {broken!r} failed; the decision stands"
    assert failures[1].getMessage() == (
        f"repeat_hooks observer {broken!r} failed again (RuntimeError('exporter down')); the decision stands"
    )

    # Removed and added again, it is a new observer: its first failure shows its traceback again.
    caplog.clear()
    remove = add_observer(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
            _loop(Policy(), GuardState())
    finally:
        remove()
    assert caplog.records and caplog.records[0].exc_info is not None
