"""Results as the model reads them: types JSON lacks, volatile tokens, values with no stable form; effect
hints; one model response decided as a batch; call ids an SDK gets wrong."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from repeat_hooks import Policy, RefusalKind, StopRepeatedCalls, ToolCall
from repeat_hooks.call import batch_call_ids
from repeat_hooks.result import UNKNOWN_OUTCOME, error_text, model_view, outcome_digest


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Box:
    size: decimal.Decimal


class Order(BaseModel):
    number: str
    placed: datetime.date


def run(guard: StopRepeatedCalls, call: ToolCall, result: Any) -> bool:
    if guard.pre_tool_call(call) is not None:
        return False
    guard.post_tool_call(call, result=result)
    return True


@pytest.mark.parametrize(
    "value",
    [
        datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.timezone.utc),
        datetime.date(2026, 12, 1),
        uuid.UUID("5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"),
        decimal.Decimal("1.25"),
        Colour.RED,
        Box(decimal.Decimal("2")),
        Order(number="A1", placed=datetime.date(2026, 1, 2)),
        {"tags": {"b", "a", "c"}},
        frozenset({frozenset({1, 2}), frozenset({3})}),
        b"\x89PNG raw bytes",
    ],
)
def test_a_constant_result_in_a_type_json_lacks_is_the_same_result(value: Any) -> None:
    guard = StopRepeatedCalls()
    call = ToolCall("lookup", {"q": 1})
    assert outcome_digest(True, {"v": value}) != UNKNOWN_OUTCOME
    assert [run(guard, call, {"v": value}) for _ in range(3)] == [True, True, False]


def test_sets_compare_whatever_their_order() -> None:
    assert outcome_digest(True, {"b", "a"}) == outcome_digest(True, {"a", "b"})
    assert model_view({"s": {3, 1, 2}}) == {"s": [1, 2, 3]}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("req 5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f ok", "req 9E8D7C6B-5A4F-4E3D-8C2B-1A0F9E8D7C6B ok"),
        ("trace 0123456789abcdef0123", "trace fedcba9876543210fedc"),
        ("at 2026-12-01T10:00:00Z", "at 2026-12-01T10:00:07.123456+01:00"),
        ("at 2026-12-01 10:00", "at 2026-12-02 11:30"),
        ({"checked_at": "2026-12-01T10:00:00"}, {"checked_at": "2026-12-01T10:00:01"}),
        (  # what an SDK that str()s a result writes
            "{'at': datetime.datetime(2026, 12, 1, 11, 18, 22, 532104), 'status': 'in transit'}",
            "{'at': datetime.datetime(2026, 12, 1, 11, 19, 5), 'status': 'in transit'}",
        ),
        ("<Thing object at 0x7f3a2b1c9d00>", "<Thing object at 0x7f3a2b1ca1f0>"),  # Strands' str() of an object
        ({"checked_at": 1733040000, "status": "x"}, {"checked_at": 1733040063, "status": "x"}),  # epoch seconds
        ({"timestamp": 1733040000123}, {"timestamp": 1733040063456}),  # epoch milliseconds
        ({"generatedAt": 1733040000.25}, {"generatedAt": 1733040001.5}),
        ({"hits": 3, "took": 5}, {"hits": 3, "took": 7}),  # a search engine's own timing
        ({"rows": [1], "elapsed_ms": 12}, {"rows": [1], "elapsed_ms": 40}),
        ("Query OK, took 0.23s", "Query OK, took 1.02s"),
        ("===== 5 passed, 1 warning in 0.23s =====", "===== 5 passed, 1 warning in 0.31s ====="),  # pytest
        ("1 failed, 2 passed in 0.5s", "1 failed, 2 passed in 0.9s"),
        ("..\n-----\nRan 5 tests in 0.002s\n\nOK", "..\n-----\nRan 5 tests in 0.004s\n\nOK"),  # unittest
        ("build ok\nTook 0.5s", "build ok\nTook 0.7s"),  # a line's first word
        ("Elapsed: 12 ms", "Elapsed: 15 ms"),
        ("elapsed: 12 ms", "elapsed: 15 ms"),
        ("Done in 1.20s.", "Done in 1.31s."),  # yarn
        (
            "Finished in 0.01 seconds (files took 0.1 seconds to load)",
            "Finished in 0.03 seconds (files took 0.2 seconds to load)",
        ),
        ("BUILD SUCCESSFUL in 3s", "BUILD SUCCESSFUL in 5s"),  # gradle
        ("Tests: 3 passed\nTime:        1.2 s", "Tests: 3 passed\nTime:        1.9 s"),  # jest
        ("[INFO] Total time:  2.345 s", "[INFO] Total time:  2.9 s"),  # maven
        ("[<function f at 0x10a2b3c4>, 2]", "[<function f at 0x10a2b9d8>, 2]"),
    ],
)
def test_volatile_tokens_are_masked(first: Any, second: Any) -> None:
    assert outcome_digest(True, first) == outcome_digest(True, second)
    assert outcome_digest(True, first, mask_volatile=False) != outcome_digest(True, second, mask_volatile=False)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("due 2026-12-01", "due 2026-12-02"),  # a plain date: a new date usually means a change
        ("order ORD-1", "order ORD-2"),
        ("hash abcdef0123456", "hash abcdef0123457"),  # 13 hex digits: not an id
        ("count 1234567890123456", "count 1234567890123457"),  # 16 decimal digits are hex digits too...
        ("<Thing object at 0x7f3a>", "<Other object at 0x7f3a>"),  # the type still tells results apart
        ("jump at 0x7f3a2b1c", "jump at 0x7f3a2b1d"),  # an address outside a repr (a debugger's, say) is kept
        ('{"order": 1733040000}', '{"order": 1733040001}'),  # an epoch-sized number under another key: an id
        ('{"format": 1733040000}', '{"format": 1733040001}'),  # "at" ends the word, not a time's key
        ('{"checked_at": 999}', '{"checked_at": 998}'),  # no epoch time
        ("5 passed in 0.23s", "6 passed in 0.23s"),  # the counts of a test run still tell runs apart
        ("rain in 5 s", "rain in 6 s"),  # a duration nobody said the call took
        ("Request failed in 30.0s", "Request failed in 0.1s"),  # a timeout, or a fast failure: not a test summary
        ("3 errors\nNext sync in 5s", "3 errors\nNext sync in 50s"),
        ('{"url": "/health", "latency_ms": 4012}', '{"url": "/health", "latency_ms": 180}'),  # the answer polled for
        ('{"job": "backup", "last_run_at": 1733040000}', '{"job": "backup", "last_run_at": 1733126400}'),  # a new run
        ('{"routes": [{"duration": 1530.2}]}', '{"routes": [{"duration": 2710.9}]}'),  # an ETA
        ("error in 2 us-east-1 nodes", "error in 2 us-east-2 nodes"),  # "us" there is no unit
        ("Done in 2 steps", "Done in 3 steps"),
        ("Delivery time: 3 days", "Delivery time: 5 days"),
    ],
)
def test_what_is_not_volatile_still_tells_results_apart(first: str, second: str) -> None:
    same = outcome_digest(True, first) == outcome_digest(True, second)
    assert same is (first.startswith("count"))  # ...so long numbers are masked: documented


def test_an_object_handed_over_as_its_str_is_a_loop_though_its_address_changes() -> None:
    """Strands hands the model ``str(result)``: a plain object's ``<Thing object at 0x...>``, a new address each run
    (30 of 30 ran, until Strands raised RecursionError): the model reads the type alone, so the 3rd is refused."""

    class Thing:
        pass

    guard = StopRepeatedCalls()
    call = ToolCall("fetch", {"id": 1})
    things = [Thing() for _ in range(3)]  # alive together: three addresses
    assert len({str(thing) for thing in things}) == 3
    assert [run(guard, call, str(thing)) for thing in things] == [True, True, False]


def test_a_result_naming_a_fresh_temporary_file_each_run_is_still_a_loop() -> None:
    """A tool that writes its report to a new temporary file and says where: the name is random each run (Python's
    ``tempfile``: ``tmp`` and 8 of ``[a-z0-9_]``), the report the same; the 3rd run is refused. A name someone chose
    (``tmp_results``: no digit) is kept, and so is one with no digit among its 8 (about 1 in 12 of tempfile's)."""
    guard = StopRepeatedCalls()
    call = ToolCall("export_report", {"month": "2026-11"})
    paths = ["/tmp/tmpa8f3k2x1.csv", "/tmp/tmp_9qzv0wd.csv", "/tmp/tmp3kd81mzq.csv"]
    assert [run(guard, call, f"12 rows written to {path}") for path in paths] == [True, True, False]
    assert outcome_digest(True, "cd /tmp/tmpw0e7r1jb") == outcome_digest(True, "cd /tmp/tmp4c2ye_8h")
    assert outcome_digest(True, "mktemp: /tmp/tmp.Ab3dE5fG7h") == outcome_digest(True, "mktemp: /tmp/tmp.Zz9yX8wV7u")
    assert outcome_digest(True, "wrote tmp_results") != outcome_digest(True, "wrote tmp_archives")
    assert outcome_digest(True, "my_tmpa8f3k2x1") != outcome_digest(True, "my_tmpb8f3k2x1")  # inside a word


def test_a_test_run_repeated_with_nothing_changed_is_a_loop_though_its_timing_changes() -> None:
    """A coding agent reruns the tests, edits nothing, reruns: pytest's summary differs only by how long it took.
    The 3rd rerun is refused; after an edit (a change), the tests run again."""
    guard = StopRepeatedCalls()
    call = ToolCall("bash", {"command": "pytest -q"})
    summary = "F.\n1 failed, 1 passed in {:.2f}s"
    assert [run(guard, call, summary.format(0.2 + n / 7)) for n in range(3)] == [True, True, False]
    assert run(guard, ToolCall("edit_file", {"path": "app.py"}), "edited")
    assert run(guard, call, summary.format(0.5))


def test_a_fresh_request_id_in_every_result_is_still_a_loop() -> None:
    guard = StopRepeatedCalls()
    call = ToolCall("track", {"n": "FR-7731"})
    runs = [run(guard, call, {"status": "in transit", "request_id": str(uuid.uuid4())}) for _ in range(3)]
    assert runs == [True, True, False]
    keeps = StopRepeatedCalls(mask_volatile=False)
    assert all(run(keeps, call, {"status": "in transit", "request_id": str(uuid.uuid4())}) for _ in range(5))


def test_a_value_with_a_repr_of_its_own_is_compared_by_it() -> None:
    class Money:
        def __init__(self, cents: int) -> None:
            self.cents = cents

        def __repr__(self) -> str:
            return f"Money({self.cents})"

    assert outcome_digest(True, Money(5)) == outcome_digest(True, Money(5)) != outcome_digest(True, Money(6))


def test_values_with_no_stable_form_are_unknown_and_never_raise() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    nested: Any = [datetime.date(2026, 1, 1)]
    for _ in range(500):
        nested = [nested]
    for value in (object(), Hostile(), {"x": [object()]}, nested):  # nested past MAX_DEPTH, with a date inside
        assert outcome_digest(True, value) == UNKNOWN_OUTCOME


def test_error_text_is_the_type_and_the_message() -> None:
    assert error_text(ValueError("bad parcel")) == "ValueError: bad parcel"

    class Failing(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert error_text(Failing()) == "Failing: "


# -- effect hints ---------------------------------------------------------------------------------------


def receipt(number: int) -> dict[str, str]:
    return {"order": f"ORD-{number}"}


def test_a_destructive_call_that_succeeded_is_not_sent_again_unchanged() -> None:
    guard = StopRepeatedCalls()
    order = ToolCall("place_order", {"sku": "box"}, destructive=True, idempotent=False)
    assert run(guard, order, receipt(1))
    refusal = guard.pre_tool_call(order)
    assert refusal is not None and refusal.reason is RefusalKind.DUPLICATE_WRITE
    assert "would do it twice" in refusal.message


def test_a_write_whose_outcome_never_came_is_not_sent_again() -> None:
    """Let through, no outcome told: it runs in this very batch, or its process died before telling. It may have
    happened, so the same write again would do it twice: refused, in the batch as after a crash."""
    guard = StopRepeatedCalls(destructive={"place_order"})
    twice = [ToolCall("place_order", {"sku": "box"}, call_id=f"c{n}") for n in range(2)]
    first, second = guard.pre_tool_calls(twice)  # one response asking for the same order twice
    assert first is None and second is not None and second.reason is RefusalKind.UNKNOWN_WRITE
    assert "how it went is not known" in second.message and "succeeded" not in second.message
    restored = StopRepeatedCalls.model_validate_json(guard.model_dump_json())  # another process, after a crash
    guard.pre_llm_call()
    retried = restored.pre_tool_call(ToolCall("place_order", {"sku": "box"}, call_id="c9"))
    assert retried is not None and retried.reason is RefusalKind.UNKNOWN_WRITE
    failed = StopRepeatedCalls(destructive={"place_order"})
    assert failed.pre_tool_call(twice[0]) is None
    failed.post_tool_call(twice[0], ok=False, result="card declined")
    assert failed.pre_tool_call(twice[1]) is None  # it failed: trying again is no double write


def test_a_write_refused_as_sent_twice_does_not_count_as_a_run() -> None:
    """The same order twice in one response (the second refused), the first fails: the retry is a second run,
    not a third, so it is let through under the default limit, and no text says it failed twice."""
    guard = StopRepeatedCalls(destructive={"place_order"})  # max_calls=2
    first, second = [ToolCall("place_order", {"sku": "box"}, call_id=f"c{n}") for n in range(2)]
    assert guard.pre_tool_calls([first, second])[1] is not None
    guard.post_tool_call(first, ok=False, result="card declined")
    guard.pre_llm_call()
    assert guard.pre_tool_call(ToolCall("place_order", {"sku": "box"}, call_id="c2")) is None
    guard.post_tool_call(ToolCall("place_order", {"sku": "box"}, call_id="c2"), ok=False, result="card declined")
    guard.pre_llm_call()
    third = guard.pre_tool_call(ToolCall("place_order", {"sku": "box"}, call_id="c3"))
    assert third is not None and third.reason is RefusalKind.FAILURE and "2 times" in third.message


def test_a_change_in_between_allows_the_write_again() -> None:
    # The shell trap: the same command after each edit is legitimate.
    guard = StopRepeatedCalls()
    command = ToolCall("shell", {"cmd": "pytest -x"}, destructive=True, idempotent=False)
    for attempt in range(4):
        assert run(guard, command, f"{attempt} failed")
        assert run(guard, ToolCall("shell", {"cmd": f"sed -i s/{attempt}/x/ f.py"}, destructive=True), "")


def test_only_explicit_hints_count() -> None:
    guard = StopRepeatedCalls()
    unannotated = ToolCall("place_order", {"sku": "box"})  # MCP's default says destructive: not explicit here
    assert [run(guard, unannotated, receipt(n)) for n in range(3)] == [True, True, True]  # new receipts
    destructive_only = ToolCall("place_order", {"sku": "mug"}, destructive=True)  # idempotent unknown
    assert [run(guard, destructive_only, receipt(n)) for n in range(3)] == [True, True, True]
    assert ToolCall("x", destructive="yes").destructive is None  # type: ignore[arg-type]
    hinted = ToolCall("x", read_only=1, destructive=0, idempotent="no")  # type: ignore[arg-type]
    assert (hinted.read_only, hinted.destructive, hinted.idempotent) == (None, None, None)
    explicit = ToolCall("x", read_only=False, destructive=True, idempotent=False)
    assert (explicit.read_only, explicit.destructive, explicit.idempotent) == (False, True, False)


def test_the_destructive_setting_marks_plain_tools() -> None:
    guard = StopRepeatedCalls(destructive={"place_order"})
    order = ToolCall("place_order", {"sku": "box"})
    assert [run(guard, order, receipt(n)) for n in range(3)] == [True, False, False]
    with pytest.raises(ValueError, match="both in read_only and in destructive"):
        Policy(read_only={"place_order"}, destructive={"place_order"})


def test_an_idempotent_repeat_changes_nothing() -> None:
    def session(idempotent: bool | None) -> list[bool]:
        guard = StopRepeatedCalls(max_cycle_period=None)
        track = ToolCall("track", {"n": 1})
        cancel = ToolCall("cancel_order", {"id": 7}, idempotent=idempotent)
        steps = [track, cancel, track, cancel, track, track]
        return [run(guard, call, "x") for call in steps]

    assert session(None) == [True] * 6  # each cancel may have changed the order: every track is new
    assert session(True) == [True, True, True, True, True, False]  # the 2nd cancel changed nothing


# -- batches and call ids -----------------------------------------------------------------------------------


def test_a_response_is_decided_as_one_batch() -> None:
    a, b, c = ToolCall("a", call_id="1"), ToolCall("b", call_id="2"), ToolCall("c", call_id="3")
    calls = [a, b, c, ToolCall("a", call_id="4"), ToolCall("a", call_id="5")]
    guard = StopRepeatedCalls()
    decisions = guard.pre_tool_calls(calls)
    assert [d is None for d in decisions] == [True, True, True, True, False]
    for call, decision in zip(calls, decisions, strict=True):  # the tools run later, in any order
        assert guard.pre_tool_call(call) == decision
        if decision is None:
            guard.post_tool_call(call, result=f"new {call.call_id}")
    assert guard.state.turn.refusals == 1


def test_one_id_used_for_several_calls_in_a_response() -> None:
    calls = [ToolCall("track", {"n": n}, call_id="call_0") for n in range(3)]
    assert batch_call_ids(calls) == ["call_0", "call_0#1", "call_0#2"]
    guard = StopRepeatedCalls()
    assert guard.pre_tool_calls(calls) == [None, None, None]
    same = [ToolCall("track", {"n": 1}, call_id="x") for _ in range(3)]
    assert [d is None for d in StopRepeatedCalls().pre_tool_calls(same)] == [True, True, False]


def test_an_id_reused_in_every_response_neither_switches_the_guard_off_nor_repeats_a_decision() -> None:
    guard = StopRepeatedCalls()
    call = ToolCall("track", {"n": 1}, call_id="call_0")
    ran = []
    for _ in range(4):
        assert guard.pre_llm_call() is None
        ran.append(run(guard, call, "in transit"))
    assert ran == [True, True, False, False]


def test_empty_ids_are_no_ids() -> None:
    guard = StopRepeatedCalls()
    call = ToolCall("track", {"n": 1}, call_id="")
    assert [run(guard, call, "in transit") for _ in range(3)] == [True, True, False]
    assert not guard.state.deliveries


@pytest.mark.parametrize("ident", [None, "", "call_0"])
def test_a_batch_then_each_call_decides_once_whatever_the_ids(ident: str | None) -> None:
    guard = StopRepeatedCalls()
    guard.pre_agent_turn(turn_id="t")
    calls = [ToolCall("A", {}, call_id=ident) for _ in range(4)]
    batch = guard.pre_tool_calls(calls)
    assert [d is None for d in batch] == [True, True, False, False]
    assert [guard.pre_tool_call(call) for call in calls] == batch  # each call's own decision, counted once
    assert list(guard.state.turn.counts.values()) == [4]


def test_the_same_id_after_its_outcome_is_a_new_call() -> None:
    guard = StopRepeatedCalls()  # a model layer answering call_0 every time, and no pre_llm_call at all
    call = ToolCall("track", {"n": 1}, call_id="call_0")
    assert [run(guard, call, "in transit") for _ in range(4)] == [True, True, False, False]


def test_a_write_refused_once_stays_a_duplicate_write() -> None:
    guard = StopRepeatedCalls(destructive={"place_order"})
    order = ToolCall("place_order", {"sku": "box"})
    assert run(guard, order, receipt(1))
    kinds = []
    for _ in range(3):
        refusal = guard.pre_tool_call(order)
        assert refusal is not None
        kinds.append(refusal.reason)
    assert kinds == [RefusalKind.DUPLICATE_WRITE] * 3


class Point:
    """An SDK object with a ``repr`` of its own, which pydantic cannot convert."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __repr__(self) -> str:
        return f"Point({self.x})"


def test_an_object_with_a_repr_of_its_own_is_read_by_its_type_and_repr() -> None:
    assert model_view({"at": Point(3)}) == {"at": "<Point:Point(3)>"}


def test_error_text_prefers_the_message_an_sdk_error_carries() -> None:
    class APIError(Exception):
        def __init__(self, message: str) -> None:
            super().__init__(f"Error code: 429 - {{'error': {{'message': '{message}'}}}}")
            self.message = message

    assert error_text(APIError("rate limited")) == "APIError: rate limited"


@pytest.mark.parametrize(
    ("ok", "result", "options", "digest"),
    [
        (True, "in transit", {}, "346720c23f5eb68b"),
        (False, "in transit", {}, "b62b69aa5091a5e5"),
        (True, {"b": [1, 2.5, None, True], "a": "x"}, {}, "fd8f395bf4b9580f"),
        (True, [{"s": {3, 1}}, b"raw", (1, 2)], {}, "4f9038bad5748ad7"),
        (
            True,
            {"at": datetime.datetime(2026, 1, 2, 3, 4, 5), "id": uuid.UUID(int=7), "n": decimal.Decimal("1.5")},
            {},
            "e013639fb6278b99",
        ),
        (True, "req 5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f done", {}, "5d86cc637a4c6c2a"),
        (True, {"a": 1, "ts": 5}, {"ignore": ["ts"]}, "bf7e1aa783b2de12"),
        (True, "x", {"key": b"k" * 16}, "09ab1e416fc6590d"),
        (True, "req 5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f", {"mask_volatile": False}, "9815a97e935d1602"),
    ],
)
def test_outcome_digests_are_stable_across_releases(
    ok: bool, result: Any, options: dict[str, Any], digest: str
) -> None:
    # saved states hold these digests: a release that changed them would make every saved call look new
    assert outcome_digest(ok, result, **options) == digest
