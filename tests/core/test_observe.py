"""Observers hear each fresh decision once, cannot change it, and never break the agent."""

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
    scope,
)


@pytest.fixture
def heard() -> Iterator[list[Observation]]:
    seen: list[Observation] = []
    remove = add_observer(seen.append)
    yield seen
    remove()


def _loop(policy: Policy, state: GuardState) -> list[object]:
    """One turn: three identical lookups, one model call each, the same result every time."""
    decisions: list[object] = []
    policy.start_turn(state, turn_id="t1")
    for step in range(3):
        decisions.append(policy.decide_model_call(state))
        policy.record_model_call(state, seconds=2.0, cost_usd=0.5, delivery_id=f"m{step}")
        call = ToolCall(name="track", arguments={"id": "FR-1"}, call_id=f"c{step}")
        decisions.append(policy.decide_tool_call(state, call))
        policy.record_tool_result(state, call, ok=True, result={"status": "in transit"})
    decisions.append(policy.decide_model_call(state))
    return decisions


def test_each_fresh_decision_is_heard_once_in_order(heard: list[Observation]) -> None:
    policy, state = Policy(max_calls=2, max_refusals=1), GuardState()

    _loop(policy, state)
    call = ToolCall(name="track", arguments={"id": "FR-1"}, call_id="c2")
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
        policy.decide_model_call(state)
        calls = [
            ToolCall(name="track", arguments={"id": "A"}, call_id="c#1"),
            ToolCall(name="track", arguments={"id": "B"}, call_id="c#1"),
            ToolCall(name="track", arguments={"id": "C"}),
        ]
        policy.decide_tool_calls(state, calls)
    finally:
        remove()
    decided = [observation.call for observation in seen if isinstance(observation, ToolCallDecided)]
    assert decided == calls


async def test_a_task_started_in_a_held_block_tells_what_it_decides_after_the_block() -> None:
    import asyncio

    from repeat_hooks.observe import held

    seen: list[Observation] = []
    remove = add_observer(seen.append)
    go = asyncio.Event()
    policy, state = Policy(), GuardState()

    async def later() -> None:
        await go.wait()
        policy.start_turn(state, turn_id="after")

    try:
        with held() as kept:
            policy.start_turn(state, turn_id="inside")
            task = asyncio.create_task(later())
        go.set()
        await task
    finally:
        remove()
    assert [o.where.turn_id for o in kept if isinstance(o, TurnStarted)] == ["inside"]
    assert [o.where.turn_id for o in seen if isinstance(o, TurnStarted)] == ["after"]


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
