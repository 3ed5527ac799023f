"""Property tests: exact round-trips, the same decisions after a round-trip, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.call import call_key

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)

figures = st.floats(min_value=0, max_value=50) | st.floats(allow_nan=True, allow_infinity=True) | st.just(1e308)

events = st.lists(
    st.one_of(
        st.tuples(
            st.just("tool"),
            st.sampled_from(["a", "b", "c"]),
            json_values | st.text(max_size=12),
            st.none() | st.sampled_from(["i1", "i2", "i3", "i4"]),
            st.none() | st.booleans(),
        ),
        st.tuples(
            st.just("result"),
            st.sampled_from(["a", "b"]),
            st.booleans(),
            st.none() | st.sampled_from(["r1", "r2"]) | json_values,
            st.none() | st.sampled_from(["i1", "i2", "o1"]),
        ),
        st.tuples(st.just("llm"), figures, figures),
        st.tuples(st.just("turn"), st.sampled_from(["t1", "t2", None])),
        st.tuples(st.just("check")),
    ),
    max_size=40,
)

policies = st.fixed_dictionaries(
    {},
    optional={
        "count": st.sampled_from(["progress", "per_turn"]),
        "read_only": st.sets(st.sampled_from(["a", "b"]), max_size=1),
        "max_cycle_period": st.none() | st.integers(2, 4),
        "window": st.none() | st.integers(4, 6),
        "match": st.sampled_from(["tool", "tool_and_arguments"]),
        "max_calls": st.none() | st.integers(0, 3),
        "count_failures": st.booleans(),
        "max_refusals": st.none() | st.integers(0, 3),
        "max_errors_in_a_row": st.none() | st.integers(1, 3),
        "max_model_calls": st.none() | st.integers(1, 6),
        "max_model_seconds": st.none() | st.floats(1, 100),
        "max_cost_usd": st.none() | st.floats(0.001, 0.05),
        "max_keys": st.integers(1, 4),
        "ignore_arguments": st.sets(st.text(max_size=3), max_size=2),
    },
)


def apply(guard: StopRepeatedCalls, event: tuple[Any, ...]) -> object:
    kind = event[0]
    if kind == "tool":
        return guard.pre_tool_call(ToolCall(event[1], event[2], call_id=event[3], read_only=event[4]))
    if kind == "result":
        call = ToolCall(event[1], {}, call_id=event[4] if event[4] != "o1" else None)
        return guard.post_tool_call(call, ok=event[2], result=event[3], delivery_id="o1" if event[4] == "o1" else None)
    if kind == "llm":
        return guard.post_llm_call(seconds=event[1], cost_usd=event[2])
    if kind == "turn":
        return guard.pre_agent_turn(turn_id=event[1])
    return guard.pre_llm_call()


@settings(max_examples=150, deadline=None)
@given(policies, events, st.integers(0, 40))
def test_a_round_trip_at_any_point_decides_the_same(settings_: dict[str, Any], script: list[Any], cut: int) -> None:
    original = StopRepeatedCalls(**settings_)
    for event in script[:cut]:
        apply(original, event)
    restored = StopRepeatedCalls.model_validate_json(original.model_dump_json())
    assert restored == original
    assert restored.model_dump_json() == original.model_dump_json()
    for event in script[cut:]:
        assert apply(restored, event) == apply(original, event)
    assert restored == original


@settings(max_examples=200, deadline=None)
@given(json_values | st.text() | st.binary(max_size=20), st.text(max_size=10))
def test_arbitrary_arguments_never_raise(arguments: Any, name: str) -> None:
    guard = StopRepeatedCalls(max_calls=1, ignore_arguments={"x"})
    first = guard.pre_tool_call(ToolCall(name, arguments))
    second = guard.pre_tool_call(ToolCall(name, arguments))
    assert first is None and second is not None
    guard.post_tool_call(ToolCall(name, arguments), ok=False)


def test_a_dump_that_excludes_unset_fields_still_keeps_the_counters() -> None:
    # The OpenAI Agents SDK's RunState.to_json() and Temporal's OpenAI payload converter dump this way.
    guard = StopRepeatedCalls(match="tool", max_calls=1)
    guard.pre_agent_turn(turn_id="t1")
    guard.pre_tool_call(ToolCall("track_parcel", {"n": 1}))
    guard.pre_tool_call(ToolCall("track_parcel", {"n": 1}))
    restored = StopRepeatedCalls.model_validate(guard.model_dump(exclude_unset=True))
    assert restored == guard and restored.state.turn.refusals == 1 and restored.policy.match == "tool"
    fresh = StopRepeatedCalls.model_validate_json(StopRepeatedCalls().model_dump_json(exclude_unset=True))
    assert fresh == StopRepeatedCalls()


def test_deliveries_saved_as_lists_by_earlier_builds_load_and_decide_the_same() -> None:
    from repeat_hooks import GuardState, Policy
    from repeat_hooks.state import Delivery

    policy = Policy(max_calls=1)
    state = GuardState()
    first = ToolCall("track", {"n": 1}, call_id="c1")
    assert policy.decide_tool_call(state, first, turn_id="t1") is None
    refused = policy.decide_tool_call(state, ToolCall("track", {"n": 1}, call_id="c:2"), turn_id="t1")
    policy.record_model_call(state, turn_id="t1", delivery_id="model:1")
    saved = state.model_dump(mode="json")
    assert saved["deliveries"] == {
        "c1@1.0": f"01::{call_key('track', {'n': 1})}:track",  # flags, number, rule (if refused), key, tool
        "c:2@1.0": f"12:repeat:{call_key('track', {'n': 1})}:track",
        "model:1": "20:::",
    }
    earlier = {**saved, "deliveries": {ident: list(delivery) for ident, delivery in state.deliveries.items()}}
    assert earlier["deliveries"]["c:2@1.0"] == ["track", call_key("track", {"n": 1}), 2, True, False, "repeat", False]
    loaded = GuardState.model_validate_json(json.dumps(earlier))
    assert loaded == state and loaded.model_dump_json() == state.model_dump_json()
    assert loaded.deliveries["c:2@1.0"] == Delivery(
        tool="track", key=call_key("track", {"n": 1}), number=2, refused=True, settled=False, why="repeat"
    )
    again = policy.decide_tool_call(loaded, ToolCall("track", {"n": 1}, call_id="c:2"), turn_id="t1")
    assert again == refused is not None and loaded.turn.counts == state.turn.counts  # a second delivery


def test_a_tool_name_with_any_characters_round_trips_in_a_delivery() -> None:
    from repeat_hooks import GuardState, Policy

    policy, state = Policy(), GuardState()
    for name in ["a:b:c", "line\nbreak", "", "émoji 🚀", "x" * 2_000]:
        policy.decide_tool_call(state, ToolCall(name, {}, call_id=f"id:{len(name)}"))
    restored = GuardState.model_validate_json(state.model_dump_json())
    assert restored == state
    assert [delivery.tool for delivery in restored.deliveries.values()] == [
        delivery.tool for delivery in state.deliveries.values()
    ]


def test_a_turns_counters_are_set_plainly_and_a_misspelt_one_fails() -> None:
    from repeat_hooks.state import GuardState

    state = GuardState()
    state.turn.errors_in_a_row = 3  # written without pydantic's setattr: still dumped, even with exclude_unset
    assert state.turn.model_dump(exclude_unset=True)["errors_in_a_row"] == 3
    assert GuardState.model_validate_json(state.model_dump_json()) == state
    with pytest.raises(ValueError, match=r'^"Turn" object has no field "erors_in_a_row"$'):
        state.turn.erors_in_a_row = 1  # type: ignore[attr-defined]
