"""Which calls are the same call, and hostile arguments that must never break the guard."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.call import call_key, canonical_arguments


@pytest.mark.parametrize(
    "arguments",
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}, '{"b": 2, "a": 1}', ' {"a":1,"b":2}\n', b'{"b":2,"a":1}'],
)
def test_equivalent_spellings_have_one_canonical_form(arguments: Any) -> None:
    assert canonical_arguments(arguments) == '{"a":1,"b":2}'


def test_keys_are_sorted_at_every_depth() -> None:
    assert canonical_arguments({"z": {"b": [{"d": 1, "c": 2}], "a": None}}) == '{"z":{"a":null,"b":[{"c":2,"d":1}]}}'


def test_ignored_fields_drop_at_any_depth_and_nowhere_else() -> None:
    text = canonical_arguments(
        {"request_id": 1, "q": {"request_id": 2, "x": [{"request_id": 3, "y": 4}]}}, {"request_id"}
    )
    assert text == '{"q":{"x":[{"y":4}]}}'
    assert canonical_arguments(["request_id"], {"request_id"}) == '["request_id"]'


def test_the_slow_path_writes_what_json_dumps_writes() -> None:
    value = {"b": [1, 2.5, "é", None, True, {"y": "\n", "x": -0.0}], "a": "\u2028"}
    assert canonical_arguments(value, {"absent"}) == canonical_arguments(value)


def test_a_key_is_a_digest_that_holds_no_argument_value() -> None:
    key = call_key("send_payment", {"card": "4111 1111 1111 1111"})
    assert len(key) == 32 and "4111" not in key
    guard = StopRepeatedCalls()
    guard.pre_tool_call(ToolCall("send_payment", {"card": "4111 1111 1111 1111"}, call_id="c1"))
    guard.pre_tool_call(ToolCall("send_payment", {"card": "4111 1111 1111 1111"}))
    guard.pre_tool_call(ToolCall("send_payment", {"card": "4111 1111 1111 1111"}))
    dumped = guard.model_dump_json()
    assert "4111" not in dumped and "send_payment" in dumped


def test_match_tool_ignores_arguments() -> None:
    assert call_key("t", {"a": 1}, by_arguments=False) == call_key("t", {"a": 2}, by_arguments=False)
    assert call_key("t", {"a": 1}) != call_key("t", {"a": 2})
    assert call_key("t", {}) != call_key("u", {})


def deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def cyclic() -> Any:
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    return value


@dataclass
class Point:
    x: int
    y: int


HOSTILE = {
    "not json": "track FR-7731 please",
    "broken json": '{"a": 1',
    "nan": {"x": math.nan, "y": math.inf, "z": -math.inf},
    "nan text": '{"x": NaN}',
    "bytes": b"\xff\xfe raw",
    "ten megabytes": "x" * 10_000_000,
    "ten megabytes of json": '{"a": "' + "x" * 10_000_000 + '"}',
    "deep": deep(10_000),
    "deep json text": "[" * 10_000 + "]" * 10_000,
    "deep dicts": {"a": deep(3_000), "b": {"c": deep(20_000)}},
    "cycle": cyclic(),
    "set": {"tags": {"b", "a"}},
    "mixed keys": {1: "a", "1": "b", None: 2, (1, 2): 3},
    "object": {"when": object()},
    "dataclass": {"p": Point(1, 2)},
    "none": None,
    "number": 42,
    "surrogate": "\ud800",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_arguments_never_raise_and_get_a_stable_key(name: str) -> None:
    arguments = HOSTILE[name]
    guard = StopRepeatedCalls()
    decisions = [guard.pre_tool_call(ToolCall("tool", arguments)) for _ in range(3)]
    assert [d is None for d in decisions] == [True, True, False], "the same hostile call is still the same call"
    assert call_key("tool", arguments) == call_key("tool", arguments)
    guard.post_tool_call(ToolCall("tool", arguments), ok=False)


def test_sets_are_keyed_by_content_not_order() -> None:
    assert canonical_arguments({"s": {"a", "b", "c"}}) == canonical_arguments({"s": {"c", "b", "a"}})


def test_a_cycle_and_a_deep_value_have_readable_canonical_forms() -> None:
    assert canonical_arguments(cyclic()) == '{"a":1,"self":"<cycle>"}'
    assert canonical_arguments(deep(3)) == "[[[0]]]"
    assert canonical_arguments(deep(5_000)) == "[" * 5_000 + "0" + "]" * 5_000


@dataclass
class Node:
    name: str
    next: Any = None


def test_a_cycle_through_objects_is_caught() -> None:
    node = Node("a")
    node.next = Node("b", node)
    assert canonical_arguments({"n": node}) == '{"n":{"name":"a","next":{"name":"b","next":"<cycle>"}}}'


# -- values JSON cannot hold, pinned one by one ------------------------------------------------------


def test_a_pydantic_model_is_keyed_by_its_json_dump() -> None:
    from pydantic import BaseModel

    class Parcel(BaseModel):
        number: str
        weight: float

    assert canonical_arguments({"p": Parcel(number="FR-1", weight=1.5)}) == '{"p":{"number":"FR-1","weight":1.5}}'


def test_a_dataclass_is_keyed_by_its_fields_and_a_class_by_its_name() -> None:
    @dataclass
    class Point:
        x: int
        y: int

    assert canonical_arguments({"p": Point(1, 2)}) == '{"p":{"x":1,"y":2}}'
    assert canonical_arguments({"p": Point}).startswith('{"p":"<')


def test_sets_are_keyed_in_sorted_order() -> None:
    # A set is written as the list of its members in canonical order (JSON has no sets; the model reads a list).
    assert canonical_arguments({"s": {3, 1, 2}}) == canonical_arguments({"s": {2, 3, 1}}) == '{"s":[1,2,3]}'
    assert canonical_arguments({"s": frozenset({"b", "a"})}) == '{"s":["a","b"]}'


def test_nested_sets_grow_linearly_and_never_raise() -> None:
    nested: frozenset[object] = frozenset()
    for level in range(30):  # each level used to escape the one below again: 30 levels took 4 GB
        nested = frozenset({nested, level})
    assert len(canonical_arguments(nested)) < 400
    deep: frozenset[object] = frozenset()
    for _ in range(2_000):
        deep = frozenset({deep})
    assert canonical_arguments(deep)  # too deep for the stack: a stand-in, never RecursionError


def test_ints_past_the_digit_limit_and_unreadable_containers_never_raise() -> None:
    assert canonical_arguments({"n": 10**5000}) != canonical_arguments({"n": 10**5000 + 1})

    class Hostile(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("no")

    assert canonical_arguments({"a": Hostile(a=1)}) == '"<unreadable builtins.dict>"'


def test_invalid_utf8_bytes_are_replaced_not_refused() -> None:
    assert canonical_arguments(b'{"q": "\xff"}') == '{"q":"\ufffd"}'
    assert canonical_arguments({"b": b"\xffok"}) == '{"b":"\ufffdok"}'


@pytest.mark.parametrize(("text", "canonical"), [("null", "null"), ("true", "true"), ("false", "false")])
def test_json_literals_in_text_are_parsed(text: str, canonical: str) -> None:
    assert canonical_arguments(text) == canonical
    assert canonical_arguments(text + "x") == f'"{text}x"'


def test_object_keys_of_other_types_are_written_as_json_writes_them() -> None:
    value = {2: "a", None: "b", 1.5: "c", False: "d", "s": "e"}
    assert canonical_arguments(value, {"absent"}) == '{"1.5":"c","2":"a","false":"d","null":"b","s":"e"}'
    assert canonical_arguments({(1, 2): "t"}) == '{"[1,2]":"t"}'


def test_lone_surrogates_never_raise() -> None:
    assert len(call_key("a", "\ud800")) == 32
    from repeat_hooks.result import outcome_digest

    assert len(outcome_digest(True, "\udfff")) == 16


def test_an_outcome_digest_tells_success_from_failure_and_markup_from_objects() -> None:
    from repeat_hooks.result import UNKNOWN_OUTCOME, outcome_digest

    assert outcome_digest(True, "x") != outcome_digest(False, "x")
    assert outcome_digest(True, '"<b>bold</b>"') != UNKNOWN_OUTCOME  # markup, not an object stand-in
    assert outcome_digest(True, '"<b>bold</b>"') == outcome_digest(True, '"<b>bold</b>"')
    assert outcome_digest(True, {"v": object()}) == UNKNOWN_OUTCOME


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_name_or_id_with_no_text_is_named_by_its_type() -> None:
    call = ToolCall(Unprintable(), {"a": 1}, call_id=Unprintable())  # type: ignore[arg-type]
    assert call.name == call.call_id == f"<{__name__}.Unprintable>"


def test_nan_and_infinities_keep_their_names_beside_values_json_lacks() -> None:
    nan, inf = float("nan"), float("inf")
    assert canonical_arguments({"s": {1}, "x": [nan, inf, -inf, 0.5]}) == '{"s":[1],"x":[NaN,Infinity,-Infinity,0.5]}'


def test_odd_dict_keys_get_a_stable_text() -> None:
    # A frozenset key used to be written with the memory address of its members' stand-ins: never the same call.
    assert canonical_arguments({frozenset({2, 1}): "x"}) == canonical_arguments({frozenset({1, 2}): "x"})
    assert canonical_arguments({frozenset({2, 1}): "x"}) == '{"[1,2]":"x"}'
    assert canonical_arguments({b"id": 1}) == '{"id":1}'  # bytes keys were quoted twice


def test_a_withdrawal_under_another_digest_key_is_refused_loudly() -> None:
    # It used to compute the call's key under the wrong key, find nothing, and leave the count as it was.
    from repeat_hooks import GuardSetupError, GuardState, Policy

    keyed, plain = Policy(digest_key="a secret of sixteen+ chars"), Policy()
    call = ToolCall("place_order", {"sku": "H-1"}, call_id="c1")
    state = GuardState()
    assert keyed.decide_tool_call(state, call) is None
    with pytest.raises(GuardSetupError, match=r"^this conversation's state was written under another digest_key"):
        plain.record_rejection(state, call)
    assert list(state.turn.counts.values()) == [1] and state.turn.marks[next(iter(state.turn.counts))].outcome is None
    keyed.record_rejection(state, call)
    assert [mark.outcome for mark in state.turn.marks.values()] == ["-"]  # marked as rejected, under its key


def test_a_state_holding_only_a_call_s_delivery_is_still_keyed() -> None:
    # A delivery keeps its call's digest: a state under no key and a policy with one do not mix, whatever part
    # of the state holds the digest (here a remembered delivery alone).
    from repeat_hooks import GuardSetupError, GuardState, Policy
    from repeat_hooks.state import Delivery

    state = GuardState()
    call = ToolCall("track", {"n": 1}, call_id="c1")
    state.remember(
        "c1@0.0",
        Delivery(
            tool="track", key=call_key("track", {"n": 1}), number=1, refused=False, settled=True, why="", taken=False
        ),
    )
    assert state.turn.counts == {} and state.turn.marks == {}
    with pytest.raises(GuardSetupError, match="written under no digest_key, and this policy has this digest_key"):
        Policy(digest_key="a secret of sixteen+ chars").decide_tool_call(state, call)


def test_a_long_id_is_kept_as_its_head_and_a_digest_of_the_whole_within_the_name_bound() -> None:
    from repeat_hooks.call import MAX_NAME_CHARS, as_text

    long, longer = "x" * 2000, "x" * 2000 + "y"
    text = as_text(long)
    assert len(text) == 993 <= MAX_NAME_CHARS and text.startswith("x" * 960 + "~") and "x" not in text[961:]
    assert as_text(longer) != text and as_text(long) == text  # distinct values stay distinct; the same, the same
    assert as_text("é-1") == "é-1" and as_text("\udcff") == "\\udcff"  # text kept; a lone surrogate escaped
    assert as_text(42) == "42" and as_text("x" * 1000) == "x" * 1000
