"""Hostile inputs and hostile stores: the hooks never raise, every map stays bounded, every accepted input
round-trips, and a stored state someone else wrote is refused with one documented exception."""

from __future__ import annotations

import json
import math
import random
import time
from typing import Any

import pytest

from repeat_hooks import GuardState, Policy, StateCorrupt, StopRepeatedCalls, ToolCall
from repeat_hooks.kit import load_state
from repeat_hooks.state import MAX_DELIVERIES, MAX_EVENTS, MAX_KEYS


class Raises:
    """An object every one of whose conversions raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(name)

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")

    def __float__(self) -> float:
        raise RuntimeError("float")

    def __bool__(self) -> bool:
        raise RuntimeError("bool")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        return 1


class BadMapping(dict):  # type: ignore[type-arg]
    def items(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("items")

    def __len__(self) -> int:
        raise RuntimeError("len")


class BadKey:
    def __lt__(self, other: object) -> bool:
        raise RuntimeError("lt")

    def __hash__(self) -> int:
        return 7


def nested_sets(depth: int) -> Any:
    value: Any = frozenset()
    for level in range(depth):
        value = frozenset({value, level})
    return value


def nested_lists(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def hostile(rng: random.Random) -> Any:
    """One hostile value of the kinds the attack on the core used."""
    kind = rng.randrange(14)
    if kind == 0:
        return 10 ** rng.randrange(4_300, 6_000)  # past the int-to-text digit limit
    if kind == 1:
        return nested_sets(rng.randrange(1, 40))
    if kind == 2:
        return nested_lists(rng.randrange(500, 3_000))
    if kind == 3:
        return BadMapping(a=1)
    if kind == 4:
        return {BadKey(): 1, BadKey(): 2}
    if kind == 5:
        return Raises()
    if kind == 6:
        return rng.choice([math.nan, math.inf, -math.inf, 1e308, -0.0, 2**1100])
    if kind == 7:
        return "\ud800" + "x" * rng.randrange(10)  # a lone surrogate
    if kind == 8:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    if kind == 9:
        cyclic: list[Any] = []
        cyclic.append(cyclic)
        return cyclic
    if kind == 10:
        return "x" * (2_000_000 if rng.random() < 0.03 else rng.randrange(1, 50_000))
    if kind == 11:
        return rng.choice([0, 1, -1, 3.5, True, None, "", object()])
    if kind == 12:
        return {"a": [Raises(), {"b": {1, 2, 3}}], 5: b"\xff"}
    return json.dumps({"q": "[" * rng.randrange(1, 5_000)})


POLICIES = [
    {},
    {"count": "per_turn", "window": 5},
    {"count_failures": False, "max_errors_in_a_row": 2},
    {"match": "tool", "max_refusals": 0},
    {"max_cost_usd": 1.0, "max_model_seconds": 2.0, "max_model_calls": 3},
]


@pytest.mark.slow
def test_ten_thousand_hostile_values_never_raise_and_stay_fast() -> None:
    rng = random.Random(19)
    slowest = 0.0
    guards = [StopRepeatedCalls(**settings) for settings in POLICIES]
    for number in range(10_000):
        guard = guards[number % len(guards)]
        value = hostile(rng)
        started = time.perf_counter()
        name = value if number % 7 == 0 else rng.choice(["track", "\udcff", "place"])
        call = ToolCall(name, value, call_id=rng.choice([None, value, number, "", "c1"]), read_only=value)
        guard.pre_tool_call(call, turn_id=rng.choice([None, value, 5, "t"]))
        guard.post_tool_call(call, value, result=value, delivery_id=rng.choice([None, value, 7]))
        guard.pre_llm_call(turn_id=rng.choice([None, 5]))
        guard.post_llm_call(value, value, delivery_id=rng.choice([None, number]))
        if number % 500 == 0:
            assert StopRepeatedCalls.model_validate_json(guard.model_dump_json()) == guard
        slowest = max(slowest, time.perf_counter() - started)
    # Linear work: the slowest round (a 2 MB string through four hooks) takes ~0.1 s on a quiet machine; the
    # bound is loose for loaded CI machines, and still catches the exponential cases (30 nested sets: GBs, 4 s+).
    assert slowest < 10.0, f"one hook round took {slowest:.2f} s"
    for guard in guards:  # every state the hostile inputs produced still round-trips exactly
        assert StopRepeatedCalls.model_validate_json(guard.model_dump_json()) == guard


def test_ids_of_any_type_round_trip_and_keep_their_meaning() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn(turn_id=5)  # type: ignore[arg-type]
    assert guard.pre_tool_call(ToolCall("track", call_id=42), turn_id=5) is None  # type: ignore[arg-type]
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    assert restored.state.turn.id == "5" and restored.state.turn.number == 1  # 5 and "5" are one turn
    assert restored.pre_tool_call(ToolCall("track", call_id=42), turn_id="5") is None  # redelivered: same decision
    guard.post_llm_call(1.0, 0.0, delivery_id=9)  # type: ignore[arg-type]
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    restored.post_llm_call(1.0, 0.0, delivery_id="9")
    assert restored.state.turn.model_calls == 1


def test_surrogates_in_names_and_ids_round_trip() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    call = ToolCall("tr\ud800ck", {"q": "\udfff"}, call_id="c\ud800")
    assert guard.pre_tool_call(call, turn_id="t\udc00") is None
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    assert restored == guard
    assert restored.pre_tool_call(call, turn_id="t\udc00") is None  # the same delivery, after a reload


def test_a_non_bool_outcome_means_the_same_before_and_after_a_reload() -> None:
    guard = StopRepeatedCalls(max_errors_in_a_row=1)
    guard.pre_tool_call(ToolCall("track"))
    guard.post_tool_call(ToolCall("track"), 0)  # type: ignore[arg-type]
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())
    stop = restored.pre_llm_call()
    assert stop is not None and stop.reason.value == "too_many_errors"


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings", [{"window": 4}, {"count_failures": False}, {"count": "per_turn"}, {}, {"max_keys": 50}]
)
def test_every_map_stays_bounded_after_100k_distinct_calls(settings: dict[str, Any]) -> None:
    policy = Policy(**settings)
    state = GuardState()
    for number in range(100_000):
        call = ToolCall("search", {"n": number}, call_id=f"c{number}")
        if policy.decide_tool_call(state, call) is None:
            policy.record_tool_result(state, call, ok=number % 3 != 0, result=number)
    turn = state.turn
    assert len(turn.counts) <= policy.max_keys and len(turn.marks) <= policy.max_keys
    assert set(turn.marks) <= set(turn.counts)
    assert len(turn.recent) <= (policy.window or 0) and len(turn.runs) <= 2 * 8
    assert len(state.deliveries) <= MAX_DELIVERIES and len(state.events) <= MAX_EVENTS
    assert len(state.model_dump_json()) < 300_000


def good_state() -> dict[str, Any]:
    guard = StopRepeatedCalls()
    guard.pre_tool_call(ToolCall("track"))
    guard.post_llm_call(1.0, 0.1)
    return json.loads(guard.state.model_dump_json())  # type: ignore[no-any-return]


def with_turn(**fields: Any) -> dict[str, Any]:
    state = good_state()
    state["turn"].update(fields)
    return state


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        (b'{"turn": {"id": "\xff\xfe"}}', "invalid UTF-8"),
        (json.dumps(with_turn(cost_usd=1.0)).replace("1.0", "NaN"), "a NaN cost"),
        (with_turn(refusals=10**400), "a count past any JSON integer"),
        (with_turn(counts={f"k{n}": 1 for n in range(MAX_KEYS + 1)}), "more keys than any turn holds"),
        ({**good_state(), "events": [good_state()["events"] or {}] * (MAX_EVENTS + 1)}, "10,000 events"),
        ({**good_state(), "planted": 1}, "an unknown field"),
        (with_turn(injected="x"), "an unknown turn field"),
        ("x" * 16_000_001, "a state longer than any the guard writes"),
    ],
)
def test_a_state_someone_else_wrote_is_refused_as_corrupt(stored: Any, why: str) -> None:
    with pytest.raises(StateCorrupt, match="delete it to start this conversation's counts afresh"):
        load_state(stored)


def test_post_llm_call_takes_any_figure() -> None:
    guard = StopRepeatedCalls(max_cost_usd=1.0)
    guard.post_llm_call(10**400, Raises())  # type: ignore[arg-type]
    assert guard.state.turn.model_seconds == 1.7976931348623157e308 and guard.state.turn.cost_usd == 0.0
    guard.post_llm_call(0, 10**400)
    stop = guard.pre_llm_call()
    assert stop is not None and stop.reason.value == "cost"
    assert StopRepeatedCalls.model_validate_json(guard.model_dump_json()) == guard


# -- digests nobody can reverse ---------------------------------------------------------------------------


def guess_pin(digests: set[str], key: bytes = b"") -> str | None:
    """What an attacker holding the stored digests does: try every 6-digit PIN."""
    from repeat_hooks.call import call_key

    for pin in range(1_000_000):
        if call_key("unlock", {"pin": f"{pin:06d}"}, key=key) in digests:
            return f"{pin:06d}"
    return None


@pytest.mark.slow
def test_without_a_key_a_short_argument_can_be_recovered_from_the_state() -> None:
    guard = StopRepeatedCalls()
    guard.pre_tool_call(ToolCall("unlock", {"pin": "000042"}))
    assert "000042" not in guard.model_dump_json()  # no raw value...
    assert guess_pin(set(guard.state.turn.counts)) == "000042"  # ...but an unkeyed digest can be guessed


@pytest.mark.slow
def test_with_a_digest_key_the_state_holds_macs_and_never_the_key() -> None:
    key = b"k" * 32
    guard = StopRepeatedCalls(digest_key=key)
    guard.pre_tool_call(ToolCall("unlock", {"pin": "000042"}))
    saved = guard.model_dump_json()
    assert "kkkk" not in saved and "digest_key" not in saved and "000042" not in saved
    digests = set(guard.state.turn.counts)
    assert guess_pin({d for d in digests}, key=b"") is None  # guesses without the key never match
    restored = StopRepeatedCalls.model_validate_json(saved, context={"digest_key": key})
    assert restored.pre_tool_call(ToolCall("unlock", {"pin": "000042"})) is None  # same counts: 2nd call
    assert restored.pre_tool_call(ToolCall("unlock", {"pin": "000042"})) is not None


def test_a_state_written_under_another_key_is_refused_loudly() -> None:
    from repeat_hooks import GuardSetupError

    guard = StopRepeatedCalls(digest_key="a secret of sixteen+ chars")
    guard.pre_tool_call(ToolCall("track"))
    forgot = StopRepeatedCalls.model_validate_json(guard.model_dump_json())  # restored without its key
    with pytest.raises(GuardSetupError, match=r"written under another digest_key, and this policy has no digest_key"):
        forgot.pre_tool_call(ToolCall("track"))
    fresh = StopRepeatedCalls(digest_key="another secret of 16+ chars")
    fresh.pre_agent_turn(turn_id="t1")
    assert fresh.pre_tool_call(ToolCall("track")) is None  # a new conversation takes the key
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Policy(digest_key=b"short")


def test_a_surrogate_turn_id_is_one_turn_from_start_to_end() -> None:
    guard = StopRepeatedCalls()
    guard.pre_agent_turn(turn_id="t\udfff")
    call = ToolCall("track")
    decisions = [guard.pre_tool_call(call, turn_id="t\udfff") is None for _ in range(3)]
    assert decisions == [True, True, False] and guard.state.turn.number == 1


def test_a_huge_tool_name_keeps_the_state_small_and_loadable() -> None:
    from repeat_hooks import GuardState

    guard = StopRepeatedCalls()
    name = "t" * 3_000_000
    for _ in range(5):
        guard.pre_tool_call(ToolCall(name, call_id="x" * 2_000_000), turn_id="u" * 2_000_000)
    saved = guard.state.model_dump_json()
    assert len(saved) < 50_000 and GuardState.model_validate_json(saved) == guard.state
    assert ToolCall(name + "a").name != ToolCall(name + "b").name  # long names stay distinct


def stored_with(deliveries: Any) -> str:
    """A state the guard wrote, its deliveries replaced by ``deliveries``."""
    guard = StopRepeatedCalls()
    guard.pre_agent_turn()
    guard.pre_tool_call(ToolCall("track", {"id": 1}, call_id="c1"))
    raw = json.loads(guard.state.model_dump_json())
    raw["deliveries"] = deliveries
    return json.dumps(raw)


def test_stored_deliveries_are_kept_as_the_guard_wrote_them_and_anything_else_is_refused() -> None:
    guard = StopRepeatedCalls()
    guard.pre_agent_turn()
    guard.pre_tool_call(ToolCall("track", {"id": 1}, call_id="c1"))
    written = json.loads(guard.state.model_dump_json())["deliveries"]
    assert list(written) == ["c1@1.0"] and written["c1@1.0"].endswith(":track")  # packed text: digests, the name
    assert load_state(stored_with(written)).deliveries["c1@1.0"].tool == "track"
    packed = written["c1@1.0"]
    for hostile in (
        {"c1@1.0": "not a delivery"},  # not the packed form
        {"c1@1.0": packed.replace(":track", ":" + "t" * 1200)},  # a tool name longer than any the guard keeps
        {"c" * 4001: packed},  # a delivery id longer than any the guard writes
        {f"c{n}@1.0": packed for n in range(MAX_DELIVERIES + 1)},  # more than the guard keeps
        {"c1@1.0": 7},
    ):
        with pytest.raises(StateCorrupt):
            load_state(stored_with(hostile))
    assert len(load_state(stored_with({f"c{n}@1.0": packed for n in range(MAX_DELIVERIES)})).deliveries) == 256


def test_a_stopped_turn_is_found_by_its_id_among_the_kept_events() -> None:
    guard = StopRepeatedCalls(max_model_calls=1)
    for turn in ("t1", "t2"):
        guard.pre_agent_turn(turn_id=turn)
        guard.pre_llm_call()
        guard.post_llm_call()
        assert guard.pre_llm_call() is not None  # the second model call of each turn: stopped
    first = guard.state.stop_of("t1")
    assert first is not None and first.reason.value == "max_steps"
    assert guard.state.stop_of("t2") == guard.state.turn.stop and guard.state.stop_of("t3") is None
    guard.pre_agent_turn(turn_id="t4")
    assert guard.state.stop_of("t4") is None and guard.state.stop_of() is None  # not stopped (yet)


def test_events_since_are_the_events_after_the_one_given() -> None:
    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn()
    call = ToolCall("track", {"id": 1})
    for _ in range(4):
        guard.pre_tool_call(call)
    events = guard.state.events
    assert len(events) == 3
    assert guard.state.events_since(events[0]) == events[1:] and guard.state.events_since(events[1]) == events[2:]
    assert guard.state.events_since(events[-1]) == [] and guard.state.events_since(None) == events


def test_deliveries_equal_the_mapping_they_hold_and_nothing_else() -> None:
    from repeat_hooks.state import Deliveries, Delivery

    one = Delivery(tool="track", key="k", number=1, refused=False, settled=False, why="")
    deliveries = Deliveries({"c1@1.0": one})
    assert deliveries == {"c1@1.0": one} and deliveries == Deliveries({"c1@1.0": one})
    assert deliveries != {"c1@1.0": one._replace(number=2)}
    assert deliveries != {}
    assert deliveries != [("c1@1.0", one)]  # not a mapping
    assert Deliveries() == {} and Deliveries() != Deliveries({"c1@1.0": one})
