"""Digest-only recordings: what a live guard writes holds no value, and replays to the full trajectory's figures."""

from __future__ import annotations

import dataclasses
import functools
import gc
import gzip
import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import GuardState, Policy, StopRepeatedCalls, ToolCall, observe
from repeat_hooks.call import as_text
from repeat_hooks.observe import OBSERVERS, scope
from repeat_hooks.offline import recording
from repeat_hooks.offline.cli import MalformedRecordsSeen, main, read_trajectories
from repeat_hooks.offline.reading import (
    DigestReader,
    DigestTrajectory,
    as_digests,
    read_digest_lines,
    read_folder,
    recording_files,
)
from repeat_hooks.offline.recording import (
    FILE_NAME,
    DigestRecorder,
    digest_arguments,
    digest_result,
    field_digest,
    is_schema_name,
    trajectory_lines,
)
from repeat_hooks.offline.replay import UNRECORDED, NotReplayable, RecordedCall, Tally, Trajectory, replay

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "corpora" / "tau2.jsonl.gz"

POLICIES = (
    Policy(),
    Policy(count="per_turn"),
    Policy(match="tool"),
    Policy(mask_volatile=False),
    Policy(ignore_arguments={"order_id"}),
    Policy(ignore_results={"checked_at"}),
    Policy(max_calls=1, read_only={"get_order"}, max_cycle_period=None, max_errors_in_a_row=2),
)


def figures(tally: Tally) -> dict[str, Any]:
    """A tally's figures, without the 4-byte digests a harmful refusal's context shows (digests of digests)."""
    result = tally.as_dict()
    for refusal in result["harmful_refusals"]:
        del refusal["context"], refusal["seen"]
    return result


def stamped(result: str, at: int) -> str:
    """A tau2 result (JSON text) with a fresh request id and the time it was read, as real tools stamp them."""
    try:
        value = json.loads(result)
    except ValueError:
        return f"{result}\nrequest_id: {uuid.uuid4()}"
    if not isinstance(value, dict):
        return result
    return json.dumps({**value, "request_id": str(uuid.uuid4()), "checked_at": f"2026-12-01T10:{at % 60:02d}:00Z"})


# -- a live guard, driven as an adapter drives it ---------------------------------------------------------

Script = list[list[list[tuple[str, dict[str, Any], Any, bool]]]]
"""Turns of model responses, each response's calls: (tool, arguments, result, ok)."""

SHOP: Script = [
    [  # turn 1: a parallel lookup, a poll that repeats, a write, the poll again
        [("get_order", {"order_id": "W1"}, {"status": "pending", "checked_at": "10:00"}, True)],
        [
            ("track", {"order_id": "W1", "verbose": True}, {"at": "depot", "checked_at": "2026-12-01T10:01:00Z"}, True),
            ("get_order", {"order_id": "W1"}, {"status": "pending", "checked_at": "10:02"}, True),
        ],
        [("track", {"order_id": "W1", "verbose": True}, {"at": "depot", "checked_at": "2026-12-01T10:03:00Z"}, True)],
        [("track", {"order_id": "W1", "verbose": True}, {"at": "depot", "checked_at": "2026-12-01T10:04:00Z"}, True)],
        [("cancel", {"order_id": "W1"}, "Error: already shipped", False)],
        [("cancel", {"order_id": "W1"}, "Error: already shipped", False)],
        [("track", {"order_id": "W1", "verbose": True}, {"at": "depot", "checked_at": "2026-12-01T10:05:00Z"}, True)],
    ],
    [  # turn 2: the same order looked up again, in a new turn
        [("get_order", {"order_id": "W1"}, {"status": "shipped", "checked_at": "11:00"}, True)],
        [("get_order", {"order_id": "W2"}, {"status": "pending", "checked_at": "11:01"}, True)],
        [("get_order", {"order_id": "W1"}, {"status": "shipped", "checked_at": "11:02"}, True)],
    ],
]


def play(guard: StopRepeatedCalls, script: Script, conversation: str) -> None:
    """Drive ``guard`` through ``script`` as an adapter does (in the conversation's scope), every call run."""
    with scope(conversation_id=conversation):
        for number, turn in enumerate(script):
            guard.pre_agent_turn(turn_id=f"{conversation}/{number}")
            for response in turn:
                assert guard.pre_llm_call() is None
                guard.post_llm_call()
                calls = [ToolCall(name, arguments) for name, arguments, _, _ in response]
                assert guard.pre_tool_calls(calls) == [None] * len(calls)
                for call, (_, _, result, ok) in reversed(list(zip(calls, response, strict=True))):
                    guard.post_tool_call(call, ok, result=result)  # results may come back in any order
            assert guard.pre_llm_call() is None  # the model's answer


def trajectory(script: Script, ident: str, success: bool | None = None) -> Trajectory:
    turns = [[[RecordedCall(*call) for call in response] for response in turn] for turn in script]
    return Trajectory(ident, turns, success)


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[DigestRecorder]:
    with DigestRecorder(tmp_path / "recordings") as installed:
        yield installed
    assert installed not in OBSERVERS


def test_a_live_guard_recorded_as_digests_replays_as_its_full_trajectory(recorder: DigestRecorder) -> None:
    permissive = dict(max_calls=None, max_refusals=None, max_cycle_period=None, max_opaque_runs=None)
    play(StopRepeatedCalls(**permissive), SHOP, "shop-1")
    play(StopRepeatedCalls(**permissive), SHOP[1:], "shop-2")
    recorder.label("shop-1", success=True)

    read = {t.id: t for t in read_folder(recorder.folder, pytest.fail)}
    assert sorted(read) == ["shop-1", "shop-2"] and read["shop-1"].success is True and read["shop-2"].success is None
    full = [trajectory(SHOP, "shop-1", True), trajectory(SHOP[1:], "shop-2")]
    for policy in POLICIES:
        assert figures(replay(policy, read.values())) == figures(replay(policy, full)), policy
    seen = [(t.refused, t.waste_prevented, t.harmful) for t in (replay(policy, full) for policy in POLICIES)]
    assert seen == [(1, 1, 0), (2, 2, 0), (1, 1, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0), (8, 3, 5)]  # not all alike


def test_a_call_the_live_guard_refused_replays_as_what_it_last_returned(recorder: DigestRecorder) -> None:
    guard = StopRepeatedCalls(max_calls=2, max_refusals=None)
    with scope(conversation_id="loop"):
        guard.pre_agent_turn()
        for _ in range(4):
            assert guard.pre_llm_call() is None
            call = ToolCall("track", {"order_id": "W1"})
            if guard.pre_tool_call(call) is None:
                guard.post_tool_call(call, result={"at": "depot"})
    lines = [json.loads(line) for line in recorder.path.read_text().splitlines()]
    assert [line.get("x") for line in lines if "n" in line] == [None, None, "repeat", "repeat"]
    (read,) = read_folder(recorder.folder, pytest.fail)
    tally = replay(Policy(), [read])
    assert (tally.refused, tally.waste_prevented, tally.harmful, tally.loops_caught) == (2, 2, 0, 1)


def test_no_byte_of_a_value_reaches_the_file(tmp_path: Path) -> None:
    markers = ["Zq9-SECRET-arg", "Zq9-SECRET-nested", "Zq9-SECRET-result", "acct_7734991", "Zq9-SECRET-text"]
    arguments = {"card": markers[0], "filters": {"owner": markers[1]}, "acct_7734991": 1}
    results = [
        {"balance": markers[2], "accounts": {markers[3]: {"owner": markers[1]}}},
        f"plain text naming {markers[4]}",
        {"checked_at": "2026-12-01T10:38:15Z", "balance": markers[2]},
    ]
    key = b"k" * 32
    recorder = DigestRecorder(tmp_path, digest_key=key)
    with recorder, scope(conversation_id="conversation-1"):
        guard = StopRepeatedCalls()
        for result in results:
            call = ToolCall("pay", arguments)
            guard.pre_tool_call(call)
            guard.post_tool_call(call, result=result)
        recorder.label("conversation-1", True)
    text = recorder.path.read_bytes()
    for marker in [*markers, "card", "balance", "filters", "owner", "checked_at"]:  # names are data too
        for piece in (marker, marker.encode().hex(), json.dumps(marker)):
            assert piece.encode() not in text, marker
    name = {field: field_digest(field, key) for field in ("card", "filters", "balance", "owner", "accounts")}
    lines = [json.loads(line) for line in text.splitlines()]
    calls = [line for line in lines if "n" in line]
    outcomes = [line for line in lines if "o" in line]
    assert len(calls) == len(outcomes) == 3 and "x" not in calls[2]  # each result was new: none refused
    assert set(calls[0]["a"]) == {name["card"], name["filters"], "#rest"}  # a data-named field: in the rest
    assert calls[0]["da"] == [name["owner"]] and "da" not in calls[1]  # nested names: once per conversation
    assert outcomes[0]["dr"] == [name["owner"]] and set(outcomes[0]["o"]) == {name["balance"], name["accounts"]}
    assert field_digest("card", b"j" * 32) not in text.decode()  # keyed like the values


def test_a_digest_key_keys_every_digest(tmp_path: Path) -> None:
    def written(key: bytes | None, folder: str) -> list[Any]:
        recorder = DigestRecorder(tmp_path / folder, digest_key=key)
        recorder.write_trajectory(Trajectory("c", [[[RecordedCall("pay", {"pin": "1234"}, "ok")]]]))
        lines = [json.loads(line) for line in recorder.path.read_text().splitlines()]
        return [line["a"] for line in lines if "a" in line]

    assert written(None, "a") == written(None, "b")
    assert written(b"k" * 16, "c") != written(None, "a")
    assert written(b"k" * 16, "c") != written(b"j" * 16, "d")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        DigestRecorder(tmp_path, digest_key="short")


def test_the_file_rotates_and_the_folder_reads_as_one_stream(tmp_path: Path) -> None:
    recorder = DigestRecorder(tmp_path, max_bytes=2048, backups=2)
    calls = [[RecordedCall("track", {"order_id": f"W{n}"}, {"at": "depot"})] for n in range(60)]
    recorder.write_trajectory(Trajectory("long", [calls]))
    (files,) = recording_files(tmp_path)
    assert [path.name for path in files] == [f"{FILE_NAME}.2", f"{FILE_NAME}.1", FILE_NAME]
    assert all(1800 < path.stat().st_size <= 2048 for path in files[:-1])
    (read,) = read_folder(tmp_path, pytest.fail)
    kept = sum(len(response) for turn in read.turns for response in turn)
    assert 10 < kept < 60  # the oldest lines went with the oldest file
    assert [response[0].name for response in read.turns[0] if response] == ["track"] * kept


def test_deep_names_are_said_again_in_each_new_file(tmp_path: Path) -> None:
    recorder = DigestRecorder(tmp_path, max_bytes=1024, backups=5)
    calls = [[RecordedCall("get", {"q": {"owner": n}}, {"rows": [{"amount": n}]})] for n in range(30)]
    recorder.write_trajectory(Trajectory("c", [calls]))
    (files,) = recording_files(tmp_path)
    assert len(files) == 6
    assert all(path.stat().st_size <= 1024 for path in files)  # the names said again are counted in the size
    for path in files:  # each file's first call and first outcome (the last file may hold an outcome only)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        first_call = next((line for line in lines if "n" in line), {"da": [field_digest("owner")]})
        first_outcome = next(line for line in lines if "o" in line)
        assert first_call["da"] == [field_digest("owner")], path.name
        assert first_outcome["dr"] == [field_digest("amount")], path.name


def test_a_write_that_fails_is_logged_once_and_never_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    guard = StopRepeatedCalls()
    decisions = []
    with (
        caplog.at_level(logging.WARNING, logger="repeat_hooks"),
        DigestRecorder(blocked / "sub"),
        scope(conversation_id="c"),
    ):
        for _ in range(3):
            call = ToolCall("track", {"order_id": "W1"})
            decisions.append(guard.pre_tool_call(call))
            if decisions[-1] is None:
                guard.post_tool_call(call, result="depot")
    warnings = [record for record in caplog.records if "recording: cannot write" in record.getMessage()]
    assert len(warnings) == 1 and "a-file" in warnings[0].getMessage()
    assert [decision is None for decision in decisions] == [True, True, False]  # the guard decided as always


def test_threads_write_whole_lines(tmp_path: Path) -> None:
    recorder = DigestRecorder(tmp_path, max_bytes=64 * 1024, backups=100)

    def agent(number: int) -> None:
        guard = StopRepeatedCalls(max_calls=None)
        with scope(conversation_id=f"agent-{number}"):
            guard.pre_agent_turn()
            for step in range(50):
                call = ToolCall("step", {"n": step})
                guard.pre_tool_call(call)
                guard.post_tool_call(call, result={"n": step})

    with recorder:
        threads = [threading.Thread(target=agent, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    read = list(read_folder(tmp_path, pytest.fail))
    assert sorted(t.id for t in read) == sorted(f"agent-{n}" for n in range(8))
    for one in read:
        assert [call.arguments for response in one.turns[0] for call in response] == [
            as_digests(Trajectory("x", [[[RecordedCall("step", {"n": n})]]])).turns[0][0][0].arguments
            for n in range(50)
        ]


def test_a_policy_a_digest_recording_cannot_replay_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls = [RecordedCall("get", {"q": 1}, {"order": {"checked_at": n}, "checked_at": n}) for n in range(3)]
    digests = as_digests(Trajectory("nested", [[[call] for call in calls]]))
    with pytest.raises(NotReplayable, match="'checked_at' occurs below the top level in nested"):
        replay(Policy(ignore_results={"checked_at"}), [digests])
    with pytest.raises(NotReplayable, match="'Content-Type' is not a schema name"):
        replay(Policy(ignore_arguments={"Content-Type"}), [digests])
    assert replay(Policy(ignore_results={"order"}), [digests]).refused == 0  # a top-level name: exact

    folder = tmp_path / "rec"
    DigestRecorder(folder).write_trajectory(Trajectory("nested", [[calls[:1]]]))
    assert main(["replay", str(folder), "--policy", '{"ignore_results": ["checked_at"]}']) == 2
    assert "occurs below the top level" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        *[("checked_at", True), ("Status", True), ("user_id", True), ("gift_card_1712795", False), ("a-b", False)],
        *[("deadbeefdeadbeefdeadbeef", False), ("x" * 65, False), ("", False), ("#rest", False)],
    ],
)
def test_which_field_names_are_written_as_they_are(name: str, kept: bool) -> None:
    assert is_schema_name(name) is kept


def test_the_record_command_and_replay_read_a_file_or_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "runs.jsonl.gz"
    turns = [
        [dict(zip(("name", "arguments", "result", "ok"), call, strict=True)) for r in t for call in r] for t in SHOP
    ]
    source.write_bytes(gzip.compress((json.dumps({"id": "shop", "success": True, "turns": turns}) + "\n").encode()))
    key = tmp_path / "key"
    key.write_bytes(b"s" * 32)
    assert main(["record", str(source), "--out", str(tmp_path / "out"), "--digest-key-file", str(key)]) == 0
    assert "1 conversations written" in capsys.readouterr().out

    def as_json(path: Path) -> list[dict[str, Any]]:
        assert main(["replay", str(path), "--json", "--policy", "{}", "--policy", '{"count": "per_turn"}']) == 0
        result: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
        for policy in result:
            for refusal in policy["harmful_refusals"]:
                del refusal["context"], refusal["seen"]
        return result

    expected = as_json(source)
    assert expected[1]["refused"] > 0
    assert as_json(tmp_path / "out") == as_json(tmp_path / "out" / FILE_NAME) == expected
    assert main(["record", str(source), "--out", str(tmp_path / "x"), "--digest-key-file", str(tmp_path / "no")]) == 2
    assert "record:" in capsys.readouterr().err


def test_a_malformed_line_is_named_and_the_rest_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.jsonl"
    good = {"rh": 1, "c": "a", "t": 1, "r": 1, "i": 1, "n": "get", "a": "0123456789abcdef", "ok": True, "o": "0" * 16}
    lines = [good, {"rh": 1, "c": 5, "t": 1}, {"rh": 1, "c": "a", "t": "x"}, {"rh": 1, "c": "a", "success": "y"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json\n")
    assert main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    for number, words in ((2, "'c' must be"), (3, "'t' must be"), (4, "'success' must be"), (5, "line 5")):
        assert f"line {number}" in err and words in err
    found: list[Trajectory] = []
    with pytest.raises(MalformedRecordsSeen):
        found.extend(read_trajectories(path))
    (read,) = found
    fed = {"~": "00000000_00000000", "!": "0" * 16}  # what the policy is handed for that outcome
    assert read.turns == [[[RecordedCall("get", "0123456789abcdef", fed, True)]]]


def test_model_calls_without_tool_calls_are_kept(tmp_path: Path) -> None:
    chatty = Trajectory("chatty", [[[], [RecordedCall("get", {})], []], [[]], []], success=True)
    DigestRecorder(tmp_path).write_trajectory(chatty)
    (read,) = read_folder(tmp_path, pytest.fail)
    for digests in (read, as_digests(chatty)):
        assert [[len(response) for response in turn] for turn in digests.turns] == [[0, 1, 0], [0], []]
        for policy in (Policy(max_model_calls=1), Policy(max_model_calls=3), Policy(max_model_calls=4)):
            assert figures(replay(policy, [digests])) == figures(replay(policy, [chatty])), policy
    assert [replay(Policy(max_model_calls=n), [chatty]).turns_stopped for n in (1, 3, 4)] == [1, 1, 0]


@pytest.mark.slow
def test_the_tau2_corpus_converted_to_digests_replays_to_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tau2"
    assert main(["record", str(CORPUS), "--out", str(out)]) == 0
    capsys.readouterr()
    written = (out / FILE_NAME).read_text()
    assert "james_lee_6136" not in written and "Spruce Street" not in written  # values of the first record
    assert '"reservation_id"' not in written and f'"{field_digest("reservation_id")}"' in written  # names too
    assert '"sierra_gpt-4.1_airline/task13/trial0"' in written and '"get_reservation_details"' in written  # ids
    argv = [
        "--policy", "{}",
        "--policy", '{"count": "per_turn"}',
        "--policy", '{"ignore_arguments": ["user_id"], "ignore_results": ["created_at"], "max_calls": 1, '
                    '"read_only": ["get_user_details"], "window": 6, "count_failures": false}',
    ]  # fmt: skip

    def as_json(path: Path) -> list[dict[str, Any]]:
        assert main(["replay", str(path), "--json", *argv]) == 0
        result: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
        for policy in result:
            for refusal in policy["harmful_refusals"]:
                del refusal["context"], refusal["seen"]
        return result

    full, digests = as_json(CORPUS), as_json(out)
    assert full == digests
    assert [policy["waste_prevented"] for policy in full][:2] == [897, 938] and full[1]["harmful"] > 0


@pytest.mark.slow
def test_tau2_with_volatile_fields_replays_the_same_masked_or_not() -> None:
    trajectories = list(read_trajectories(CORPUS))[:300]
    at = iter(range(10**9))

    def stamp(call: RecordedCall) -> RecordedCall:
        return dataclasses.replace(call, result=stamped(call.result, next(at)))

    noisy = [
        dataclasses.replace(t, turns=[[[stamp(c) for c in r] for r in turn] for turn in t.turns]) for t in trajectories
    ]
    digests = [as_digests(t) for t in noisy]
    assert all(isinstance(t, DigestTrajectory) for t in digests)
    for policy in (Policy(), Policy(mask_volatile=False), Policy(count="per_turn", mask_volatile=False)):
        assert figures(replay(policy, digests)) == figures(replay(policy, noisy)), policy
    assert replay(Policy(), digests).waste_prevented > replay(Policy(mask_volatile=False), digests).waste_prevented


# -- what the review found ----------------------------------------------------------------------------------


def calls_in(folder: Path) -> list[dict[str, Any]]:
    """The call lines of a recorder's folder (every file)."""
    lines = [json.loads(line) for path in folder.glob("repeat-hooks*.jsonl*") for line in path.read_text().splitlines()]
    return [line for line in lines if "n" in line]


def test_a_call_whose_result_never_comes_is_recorded_and_judged_neither_way(tmp_path: Path) -> None:
    # count="per_turn" needs no outcome: adapters skip post_tool_call (Policy.hook_points()), so no result comes.
    policy = Policy(count="per_turn", max_calls=2, max_refusals=None)
    ran = 0
    with DigestRecorder(tmp_path) as recorder, scope(conversation_id="per-turn"):
        guard = StopRepeatedCalls(policy=policy)
        guard.pre_agent_turn()
        for _ in range(5):
            assert guard.pre_llm_call() is None
            ran += guard.pre_tool_call(ToolCall("track", {"parcel": "P1"})) is None
        recorder.label("per-turn", success=True)
    assert ran == 2
    assert [line.get("x") for line in calls_in(tmp_path)] == [None, None, "repeat", "repeat", "repeat"]
    (read,) = read_folder(tmp_path, pytest.fail)
    tally = replay(policy, [read])
    # what each refused call would have returned is unknown: neither harmful nor waste prevented
    assert (tally.calls, tally.refused, tally.harmful, tally.waste_prevented, tally.unjudged) == (5, 3, 0, 0, 3)


def test_each_agent_of_a_conversation_is_its_own_trajectory(tmp_path: Path) -> None:
    guards = {"planner": StopRepeatedCalls(), "worker": StopRepeatedCalls()}
    with DigestRecorder(tmp_path) as recorder:
        for name, guard in guards.items():
            with scope(conversation_id="conv-1", agent_name=name):
                guard.pre_agent_turn()
        for name in ("planner", "worker", "planner", "worker"):
            with scope(conversation_id="conv-1", agent_name=name):
                assert guards[name].pre_llm_call() is None
                call = ToolCall("lookup", {"q": "order"})
                assert guards[name].pre_tool_call(call) is None  # each agent ran it twice: no repeat
                guards[name].post_tool_call(call, result="shipped")
        recorder.label("conv-1", success=True)
    read = {t.id: t for t in read_folder(tmp_path, pytest.fail)}
    assert sorted(read) == ["conv-1/planner", "conv-1/worker"] and all(t.success for t in read.values())
    tally = replay(Policy(), read.values())
    assert (tally.trajectories, tally.calls, tally.refused, tally.successful_with_refusal) == (2, 4, 0, 0)


def test_a_guard_with_no_conversation_is_warned_of_not_merged(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path), pytest.warns(RuntimeWarning, match=r"with repeat_hooks\.observe\.scope\("):
        for _ in range(3):  # three conversations, nothing to tell them apart
            guard = StopRepeatedCalls()
            guard.pre_agent_turn()
            for _ in range(2):
                call = ToolCall("lookup", {"q": 1})
                assert guard.pre_tool_call(call) is None
                guard.post_tool_call(call, result="same")
    assert calls_in(tmp_path) == []  # never one merged conversation
    with DigestRecorder(tmp_path / "ids"):  # a turn id is enough to tell them apart
        guard = StopRepeatedCalls()
        guard.pre_agent_turn(turn_id="t1")
        guard.pre_tool_call(ToolCall("lookup", {"q": 1}))
    assert [line["c"] for line in calls_in(tmp_path / "ids")] == ["t1"]


CHILD = """
import sys
from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.observe import scope
from repeat_hooks.offline.recording import DigestRecorder
folder, tag = sys.argv[1], sys.argv[2]
with DigestRecorder(folder, max_bytes=4096, backups=1000) as recorder:
    print("ready", flush=True)
    sys.stdin.readline()
    for n in range(100):
        with scope(conversation_id=f"{tag}-{n}"):
            guard = StopRepeatedCalls()
            guard.pre_agent_turn()
            for _ in range(4):
                guard.pre_llm_call()
                call = ToolCall("poll", {"id": n})
                if guard.pre_tool_call(call) is None:
                    guard.post_tool_call(call, result={"state": "same"})
        recorder.label(f"{tag}-{n}", success=True)
"""


def test_processes_recording_into_one_folder_lose_no_line(tmp_path: Path) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for tag in ("A", "B")
    ]
    for child in children:  # both hold their file set before either writes a line
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
    for child in children:
        assert child.stdin is not None
        child.stdin.close()
    assert [child.wait(timeout=60) for child in children] == [0, 0]
    sets = recording_files(tmp_path)
    assert [files[-1].name for files in sets] == [FILE_NAME, "repeat-hooks-2.jsonl"] and len(sets[0]) > 2
    tally = replay(Policy(), read_folder(tmp_path, pytest.fail))
    assert (tally.trajectories, tally.successful, tally.calls, tally.refused) == (200, 200, 800, 400)
    assert tally.waste_prevented == 400


def test_a_second_recorder_on_a_folder_in_one_process_is_refused(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path / "rec"):
        with pytest.raises(ValueError, match=r"already records into .* in this process: install one recorder"):
            DigestRecorder(tmp_path / "rec" / ".." / "rec").install()
        with DigestRecorder(tmp_path / "other"):  # another folder is fine
            pass
    with DigestRecorder(tmp_path / "rec"):  # free again once uninstalled
        pass


def test_a_torn_last_line_is_left_behind_on_a_line_of_its_own(tmp_path: Path) -> None:
    def conversation(ident: str) -> None:
        with DigestRecorder(tmp_path), scope(conversation_id=ident):
            guard = StopRepeatedCalls()
            guard.pre_agent_turn()
            for _ in range(3):
                call = ToolCall("poll", {"id": 1})
                if guard.pre_tool_call(call) is None:
                    guard.post_tool_call(call, result="same")

    conversation("before")
    path = tmp_path / FILE_NAME
    path.write_bytes(path.read_bytes()[:-25])  # a crash mid-write
    conversation("after")
    lines = path.read_text().splitlines()
    assert sum(line.count('"rh"') for line in lines) == len(lines)  # no line holds two
    problems: list[str] = []
    read = {t.id: t for t in read_folder(tmp_path, problems.append)}
    assert len(problems) == 1 and problems[0].startswith(f"{FILE_NAME}: line 6: ")  # the torn line, alone
    assert replay(Policy(), [read["after"]]).refused == 1


def test_a_bad_line_is_named_by_its_file_and_line_and_gz_files_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = DigestRecorder(tmp_path, max_bytes=1024, backups=3)
    calls = [[RecordedCall("track", {"order_id": f"W{n}"}, {"at": "depot"})] for n in range(30)]
    recorder.write_trajectory(Trajectory("long", [calls]))
    (files,) = recording_files(tmp_path)
    assert [path.name for path in files][:2] == [f"{FILE_NAME}.3", f"{FILE_NAME}.2"]
    (before,) = read_folder(tmp_path, pytest.fail)
    kept = sum(path.read_text().count('"n":') for path in files)
    (tmp_path / f"{FILE_NAME}.3.gz").write_bytes(gzip.compress(files[0].read_bytes()))  # as logrotate leaves it
    files[0].unlink()
    (after,) = read_folder(tmp_path, pytest.fail)
    assert after == before and sum(len(response) for response in after.turns[0]) == kept > 10
    second = files[1].read_text().splitlines()
    files[1].write_text("\n".join([*second[:2], "{broken", *second[3:]]) + "\n")
    assert main(["replay", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path}: {FILE_NAME}.2: line 3: Expecting property name" in err


def test_a_recording_with_no_model_call_boundaries_replays_call_by_call(tmp_path: Path) -> None:
    # A policy with no stop rule needs no pre_llm_call: the adapter never says where a response ends.
    policy = Policy(max_refusals=None, max_errors_in_a_row=None)
    refused = 0
    with DigestRecorder(tmp_path) as recorder, scope(conversation_id="direct"):
        guard = StopRepeatedCalls(policy=policy)
        guard.pre_agent_turn()
        for _ in range(4):  # one lookup per model response, the same answer each time
            call = ToolCall("lookup", {"q": 1})
            if guard.pre_tool_call(call) is None:
                guard.post_tool_call(call, result="same")
            else:
                refused += 1
        recorder.label("direct", success=True)
    (read,) = read_folder(tmp_path, pytest.fail)
    assert [len(response) for response in read.turns[0]] == [1, 1, 1, 1]  # not one batch of four
    tally = replay(policy, [read])
    assert refused == 2 and (tally.refused, tally.waste_prevented, tally.harmful) == (2, 2, 0)


def test_names_that_are_data_are_digested_and_ignored_names_still_replay(tmp_path: Path) -> None:
    key = b"k" * 16
    arguments, deep = digest_arguments({"alice_smith": {"iban": "x"}, "hunter2": 1}, key)
    result, deep_results = digest_result({"balances": {"bob_jones": 10}, "tags": [{"SecretProjectTitan": 1}]}, key)
    text = json.dumps([arguments, sorted(deep), result, sorted(deep_results)])
    for name in ("alice_smith", "hunter2", "iban", "balances", "bob_jones", "tags", "SecretProjectTitan"):
        assert name not in text
    # A keyed recording replays ignore_results by the names' digests, given the key.
    calls = [RecordedCall("get", {"q": 1}, {"status": "ok", "seen_at": n}) for n in range(4)]
    full = Trajectory("keyed", [[[call] for call in calls]])
    DigestRecorder(tmp_path, digest_key=key).write_trajectory(full)
    policy = Policy(ignore_results={"seen_at"})
    assert replay(policy, [full]).refused == 2 and replay(Policy(), [full]).refused == 0
    (keyed,) = read_folder(tmp_path, pytest.fail, key)
    for each in (policy, Policy()):
        assert figures(replay(each, [keyed])) == figures(replay(each, [full]))
    (unkeyed,) = read_folder(tmp_path, pytest.fail)
    with pytest.raises(NotReplayable, match="recorded with a digest key and no digest key was given"):
        replay(policy, [unkeyed])
    assert replay(Policy(), [unkeyed]).refused == 0  # no name to digest: no key needed
    key_file = tmp_path.parent / "key"
    key_file.write_bytes(key)
    argv = ["replay", str(tmp_path), "--json", "--policy", '{"ignore_results": ["seen_at"]}']
    assert main([*argv, "--digest-key-file", str(key_file)]) == 0


def test_the_record_command_refuses_what_it_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "runs.jsonl"
    source.write_text(json.dumps({"id": "a", "turns": [[{"name": "get", "result": "x"}] * 3]}) + "\n")
    afile = tmp_path / "afile"
    afile.write_text("")
    for out, reason in ((afile, "is a file, not a folder"), (Path("/proc/nope"), "No such file or directory")):
        assert main(["record", str(source), "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"repeat-hooks record: --out {out}: {reason}\n"
    out = tmp_path / "out"
    assert main(["record", str(source), str(source), "--out", str(out)]) == 0  # the same file twice: once
    assert len(calls_in(out)) == 3
    assert main(["record", str(source), "--out", str(out)]) == 2
    assert "is not empty (--append to add to the recording in it)" in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "b", "turns": [[{"name": "get", "result": "x"}]]}) + "\n")
    assert main(["record", str(other), "--out", str(out), "--append"]) == 0
    assert sorted(t.id for t in read_folder(out, pytest.fail)) == ["a", "b"]
    short = tmp_path / "short.key"
    short.write_bytes(b"12345678")
    assert main(["record", str(source), "--out", str(tmp_path / "k"), "--digest-key-file", str(short)]) == 2
    assert capsys.readouterr().err == (
        f"repeat-hooks record: --digest-key-file {short}: holds 8 bytes; a digest key needs at least 16\n"
    )
    for empty, what in (("", "an empty file"), ("\n\n  \n", "only blank lines")):
        source.write_text(empty)
        assert main(["record", str(source), "--out", str(tmp_path / "e")]) == 1
        err = capsys.readouterr().err
        assert f"no records ({what})" in err and "no conversations in the files given; nothing written" in err


def test_a_replay_is_not_recorded_by_a_recorder_installed_in_its_process(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path):
        tally = replay(Policy(), [trajectory(SHOP, "shop")])
    assert tally.refused == 1 and not (tmp_path / FILE_NAME).exists()  # the replay's decisions are no agent's


# -- what mutation testing found (each test: a behaviour a user relies on) -----------------------------------

PIN = "493817"
KEY_A, KEY_B = b"a" * 32, b"b" * 32
DIGESTS = re.compile(r'"([0-9a-f]{16}|[0-9a-f]{8})"')


class Unreadable(dict):  # type: ignore[type-arg]
    """A hostile mapping: reading its fields raises."""

    def items(self) -> Any:
        raise RuntimeError("no")


SECRET_RUN = [  # (tool, arguments, result): every kind of digest a recording holds
    ("verify", {"pin": PIN, "card": {"holder": "Zq9-holder"}}, {"ok": True, "account": {"owner_name": "Zq9-owner"}}),
    ("verify", PIN, PIN),  # a PIN as plain-text arguments and result
    ("lookup", [{"pin": PIN}], [{"balance": "Zq9-balance", "seen_at": "2026-12-01T10:38:15Z"}]),
    ("status", "Zq9-status", "Zq9-status checked at 2026-12-01T10:38:15Z"),
    ("odd", Unreadable(pin=PIN), "Zq9-odd"),
]


def record_secret_run(folder: Path, key: bytes | None) -> str:
    """The file a live guard writes for ``SECRET_RUN`` with ``key``."""
    with DigestRecorder(folder, digest_key=key) as recorder, scope(conversation_id="secrets"):
        guard = StopRepeatedCalls(max_calls=None)
        guard.pre_agent_turn()
        for name, arguments, result in SECRET_RUN:
            assert guard.pre_llm_call() is None
            call = ToolCall(name, arguments)
            assert guard.pre_tool_call(call) is None
            guard.post_tool_call(call, result=result)
    return recorder.path.read_text()


def test_with_a_digest_key_every_digest_depends_on_it_and_a_pin_cannot_be_guessed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="repeat_hooks"):
        texts = {key: record_secret_run(tmp_path / str(n), key) for n, key in enumerate((None, KEY_A, KEY_B))}
    assert caplog.records == []  # nothing failed to record
    digests = {key: set(DIGESTS.findall(text)) for key, text in texts.items()}
    assert all(len(found) > 15 for found in digests.values())
    assert not digests[None] & digests[KEY_A] and not digests[None] & digests[KEY_B]  # no digest survives a key
    assert not digests[KEY_A] & digests[KEY_B]

    def shape(text: str) -> str:  # the file with each digest replaced by the order it first appears in
        seen: dict[str, str] = {}
        return DIGESTS.sub(lambda found: f'"D{seen.setdefault(found[1], str(len(seen)))}"', text)

    assert shape(texts[None]) == shape(texts[KEY_A]) == shape(texts[KEY_B])  # the same lines, other digests
    for key, text in texts.items():
        for marker in (PIN, "Zq9", "holder", "owner_name", "balance", "seen_at", '"pin"', "card"):
            assert marker not in text, (key, marker)
        lines = [json.loads(line) for line in text.splitlines()]
        calls = [line for line in lines if "n" in line]
        outcomes = [line for line in lines if "o" in line and "n" not in line]
        assert len(calls) == len(outcomes) == 5
        name = functools.partial(field_digest, key=key or b"")
        # the names below the top level, once per conversation ("*": a value whose names could not be read)
        assert [call.get("da") for call in calls] == [[name("holder")], None, [name("pin")], None, ["*"]]
        assert [outcome.get("dr") for outcome in outcomes] == [
            [name("owner_name")], None, sorted([name("balance"), name("seen_at")]), None, None
        ]  # fmt: skip
        assert isinstance(calls[1]["a"], str) and isinstance(calls[4]["a"], str)  # one digest each
        assert calls[1]["a"] == calls[0]["a"][name("pin")]  # one value, one digest: equalities show
        masked, unmasked = outcomes[3]["o"]  # a volatile token: masked and unmasked digests
        assert masked != unmasked

    # Guessing the PIN: digest each candidate as a recording digests a value, look for it in the file.
    def guessed(found: set[str], key: bytes = b"") -> list[str]:
        candidates = (f"{n:06d}" for n in range(490_000, 500_000))  # a slice of the 10**6, to stay fast
        return [candidate for candidate in candidates if field_digest(candidate, key) in found]

    assert guessed(digests[None]) == [PIN]  # without a key, a PIN is found by trying every candidate
    assert guessed(digests[KEY_A]) == [] and guessed(digests[KEY_A], KEY_B) == []  # keyed: nothing is


def test_the_digest_format_is_pinned_so_older_recordings_stay_replayable(tmp_path: Path) -> None:
    key = b"k" * 32
    assert (field_digest("order_id"), field_digest("order_id", key)) == ("a9e777958d891377", "086936e311265e5b")
    assert digest_arguments({"order_id": "W1"}) == ({"a9e777958d891377": "4a91a5564956c86a"}, set())
    assert digest_arguments({"order_id": "W1"}, key) == ({"086936e311265e5b": "3405785fbcaded86"}, set())
    assert digest_arguments(PIN) == ("f0525d7af66f26c3", set())
    assert digest_arguments(PIN, key) == ("73e464af4a995598", set())
    result = {"at": "depot", "checked_at": "2026-12-01T10:01:00Z"}
    assert digest_result(result) == (
        {"2685f01d7cc3114d": "4db34e8f04da28e2", "b3a0f58e74f895c7": ["316ba2a67e69a06a", "59cd682fe291eec9"]},
        set(),
    )
    assert digest_result(result, key)[0] == {
        "a181d9dbdd933318": "a591fc727350daf8",
        "20e80632a64cdd59": ["f6fc7d9d57c7e94b", "0bdd3b79ad33f57b"],
    }
    # A lone surrogate (what a broken decoder hands over) is digested, never raised.
    assert digest_arguments({"q": "x\ud800y"}) == ({"6dd5663afa1381ce": "bb16cc79d5cb24a3"}, set())
    assert digest_result("x\ud800y") == ("bb16cc79d5cb24a3", set())
    # The lines: a turn (with the key's fingerprint), a model response, a call and its outcome, the answer.
    full = Trajectory("g", [[[RecordedCall("get_order", {"order_id": "W1"}, "shipped", True, True)]]], True)
    lines = [body for body, _, _ in trajectory_lines(full)]
    assert lines == [
        {"rh": 1, "c": "g", "t": 1, "k": "f90fb68b"},
        {"rh": 1, "c": "g", "t": 1, "m": 1},
        {"rh": 1, "c": "g", "t": 1, "r": 1, "i": 1, "n": "get_order", "a": {"a9e777958d891377": "4a91a5564956c86a"},
         "ro": True, "u": "91affa01976ab79b"},
        {"rh": 1, "c": "g", "t": 1, "ok": True, "o": "c09b28fb9514007d", "u": "91affa01976ab79b"},
        {"rh": 1, "c": "g", "t": 1, "m": 2},
        {"rh": 1, "c": "g", "success": True},
    ]  # fmt: skip
    # A recording of 0.3.0 named an outcome's call by its order in the writer's lines (``i``, no ``u``): still read.
    old = [dict(line) for line in lines]
    del old[2]["u"], old[3]["u"]
    old[3]["i"] = 1
    (tmp_path / "0.3.0").mkdir()
    (tmp_path / "0.3.0" / FILE_NAME).write_text("".join(json.dumps(line) + "\n" for line in old))
    DigestRecorder(tmp_path / "now").write_trajectory(full)
    assert list(read_folder(tmp_path / "0.3.0", pytest.fail)) == list(read_folder(tmp_path / "now", pytest.fail))
    for digest_key, fingerprint in ((key, "4b92f6fb"), (b"k" * 64, "8726785f"), (b"L" * 100, "2e0ba86f")):
        recorder = DigestRecorder(tmp_path / fingerprint, digest_key=digest_key)  # past 64 bytes: hashed first
        recorder.write_trajectory(full)
        assert json.loads(recorder.path.read_text().splitlines()[0])["k"] == fingerprint


SAME_TOOL = {  # name: (each call's arguments, each call's result, refused by Policy() and by mask_volatile=False)
    "set-valued fields": ([{"f": {"tags": {"a"}}}, {"f": {"tags": {"b"}}}, {"f": {"tags": {"c"}}}], ["x"] * 3, (0, 0)),
    "data-named fields": ([{"Content-Type": kind, "q": 1} for kind in "abc"], ["x"] * 3, (0, 0)),
    "unreadable arguments": ([None, Unreadable(), Unreadable(pin=1), None], ["x"] * 4, (0, 0)),
    "bytes results": ([{"q": 1}] * 3, [b'{"a": 1}', b'{"a":1}', b'{"a": 1}'], (1, 0)),
    "JSON text of JSON text": ([{"q": 1}] * 3, ['"{\\"a\\": 1}"', '"{\\"a\\":1}"', '"{\\"a\\": 1}"'], (0, 0)),
    "results with no stable form": ([{"q": 1}] * 4, [object() for _ in range(4)], (0, 0)),
    "markup in results": ([{"q": 1}] * 3, [{"html": f"<b>{n}</b>"} for n in range(3)], (0, 0)),
    "a stand-in in a result": ([{"q": 1}] * 4, [{"x": "<a.B>", "y": 1}] * 4, (0, 0)),
    "a status that moves": ([{"q": 1}] * 3, [f"{s} at 2026-12-01T10:0{n}:00Z" for n, s in enumerate("abc")], (0, 0)),
    "a status that stays": ([{"q": 1}] * 3, [f"depot at 2026-12-01T10:0{n}:00Z" for n in range(3)], (1, 0)),
}


@pytest.mark.parametrize("case", SAME_TOOL)
def test_a_recording_tells_calls_apart_exactly_as_the_guard_does(case: str) -> None:
    arguments, results, refused = SAME_TOOL[case]
    full = Trajectory(case, [[[RecordedCall("get", a, r)] for a, r in zip(arguments, results, strict=True)]])
    digests = as_digests(full)
    for policy, expected in zip((Policy(), Policy(mask_volatile=False)), refused, strict=True):
        assert figures(replay(policy, [digests])) == figures(replay(policy, [full])), policy
        assert replay(policy, [full]).refused == expected, policy


def test_values_json_cannot_write_are_digested_by_their_canonical_form() -> None:
    # A set is written as its sorted list; its names below the top level are read (no "*").
    assert digest_arguments({"f": {"tags": {"b", "a"}}}) == digest_arguments({"f": {"tags": ["a", "b"]}})
    assert digest_arguments({"f": {"tags": {"b", "a"}}})[1] == {field_digest("tags")}
    arguments, deep = digest_arguments(Unreadable(pin=PIN))  # a hostile value: one digest, its names unknown
    assert isinstance(arguments, str) and deep == {"*"}
    part, deep = digest_result(object())
    assert (part, deep) == ("?", set())  # no stable form: the replay hands the policy UNKNOWN_OUTCOME
    assert digest_result({"x": "<a.B>", "y": 1})[0][field_digest("x")] == "?"
    assert digest_result({"html": "<b>1</b>"})[0][field_digest("html")] != "?"


def test_a_digest_key_longer_than_64_bytes_records_and_replays(tmp_path: Path) -> None:
    key = b"L" * 100  # longer than BLAKE2b takes: hashed, by the recorder and by the reader alike
    calls = [RecordedCall("get", {"q": 1}, {"status": "ok", "seen_at": n}) for n in range(4)]
    full = Trajectory("long-key", [[[call] for call in calls]])
    DigestRecorder(tmp_path / "rec", digest_key=key).write_trajectory(full)
    DigestRecorder(tmp_path / "text", digest_key=key.decode()).write_trajectory(full)  # text: its UTF-8 bytes
    assert (tmp_path / "rec" / FILE_NAME).read_text() == (tmp_path / "text" / FILE_NAME).read_text()
    policy = Policy(ignore_results={"seen_at"})
    (read,) = read_folder(tmp_path / "rec", pytest.fail, key)
    assert figures(replay(policy, [read])) == figures(replay(policy, [full])) and replay(policy, [full]).refused == 2
    assert figures(replay(policy, [as_digests(full, key)])) == figures(replay(policy, [full]))
    key_file = tmp_path / "key"
    key_file.write_bytes(key)
    argv = ["replay", str(tmp_path / "rec"), "--policy", '{"ignore_results": ["seen_at"]}']
    assert main([*argv, "--digest-key-file", str(key_file)]) == 0


def test_rotation_settings_are_checked_and_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^max_bytes must be at least 1024 \(or None: never rotate\), got 1023$"):
        DigestRecorder(tmp_path, max_bytes=1023)
    with pytest.raises(ValueError, match=r"^backups must be 0 or more, got -1$"):
        DigestRecorder(tmp_path, backups=-1)
    assert DigestRecorder(tmp_path, max_bytes=1024, backups=0).backups == 0  # the smallest settings allowed


def labels(recorder: DigestRecorder, count: int, width: int = 40) -> None:
    """``count`` label lines of ``width`` bytes each (57 + ``width``)."""
    for number in range(count):
        recorder.label(f"{number:0{width}d}", success=True)


def test_a_file_rotates_only_when_the_next_line_would_pass_max_bytes(tmp_path: Path) -> None:
    recorder = DigestRecorder(tmp_path, max_bytes=1024, backups=1)
    recorder.label("first", success=True)
    used = recorder.path.stat().st_size
    bare = len('{"rh":1,"c":"","success":true}\n')
    recorder.label("x" * (1024 - used - bare), success=True)  # fills the file to exactly max_bytes
    assert recorder.path.stat().st_size == 1024 and recording_files(tmp_path) == [[recorder.path]]
    recorder.label("next", success=True)
    assert (tmp_path / f"{FILE_NAME}.1").stat().st_size == 1024
    assert recorder.path.read_text() == '{"rh":1,"c":"next","success":true}\n'
    recorder.label("y" * 2000, success=True)  # longer than max_bytes: written whole, in a file of its own
    recorder.label("after", success=True)
    long_id = as_text("y" * 2000)  # as scope keeps it: 993 characters, distinct
    assert json.loads((tmp_path / f"{FILE_NAME}.1").read_text())["c"] == long_id and len(long_id) > 990
    assert recorder.path.read_text() == '{"rh":1,"c":"after","success":true}\n'
    recorder.close()


def test_rotation_keeps_five_backups_by_default_and_none_with_zero(tmp_path: Path) -> None:
    gc.collect()  # what earlier tests in this process left is theirs: only this recorder's files are looked at
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        default = DigestRecorder(tmp_path / "default", max_bytes=1024)
        labels(default, 200)
        default.close()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []  # each rotated file was closed
    (files,) = recording_files(tmp_path / "default")
    assert [path.name for path in files] == [*(f"{FILE_NAME}.{n}" for n in range(5, 0, -1)), FILE_NAME]
    none = DigestRecorder(tmp_path / "none", max_bytes=1024, backups=0)
    labels(none, 200)
    none.close()
    assert [path.name for path in (tmp_path / "none").glob("repeat-hooks*")] == [FILE_NAME]
    lines = none.path.read_text().splitlines()
    assert len(none.path.read_bytes()) <= 1024 and json.loads(lines[-1])["c"] == f"{199:040d}"  # the newest kept
    one = DigestRecorder(tmp_path / "one", max_bytes=1024, backups=1)
    labels(one, 40)
    one.close()
    assert sorted(path.name for path in (tmp_path / "one").glob("repeat-hooks*")) == [FILE_NAME, f"{FILE_NAME}.1"]
    never = DigestRecorder(tmp_path / "never", max_bytes=None)
    labels(never, 200)
    never.close()
    assert recording_files(tmp_path / "never") == [[never.path]] and never.path.stat().st_size > 10_000


def test_a_live_recording_holds_these_lines(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path) as recorder, scope(conversation_id="live"):
        guard = StopRepeatedCalls(max_refusals=None)
        for turn in range(2):
            guard.pre_agent_turn()
            assert guard.pre_llm_call() is None
            guard.post_llm_call()
            calls = [ToolCall("get", {"q": 1}, read_only=True), ToolCall("get", {"q": 2})]
            assert guard.pre_tool_calls(calls) == [None, None]
            for call in reversed(calls):  # results come back in any order
                guard.post_tool_call(call, result="same")
            for _ in range(2 - turn):
                assert guard.pre_llm_call() is None
                call = ToolCall("get", {"q": 2})
                if guard.pre_tool_call(call) is None:
                    guard.post_tool_call(call, result="same")
            assert guard.pre_llm_call() is None  # the answer
    q1, q2 = '{"6dd5663afa1381ce":"ab97ff5b9158b993"}', '{"6dd5663afa1381ce":"9f9ef03ad3a8c7c6"}'
    same, head = '"681c84767579146d"', '{"rh":1,"c":"live",'
    u1, u2 = '"u":"5ef0d9de4232af5d"', '"u":"4da9e46b102fadf6"'  # what names each call's outcome to it
    assert recorder.path.read_text() == "".join(
        f"{head}{line}}}\n"
        for line in [
            '"t":1,"k":"f90fb68b"', '"t":1,"m":1',
            f'"t":1,"r":1,"i":1,"n":"get","a":{q1},"ro":true,{u1}', f'"t":1,"r":1,"i":2,"n":"get","a":{q2},{u2}',
            f'"t":1,"ok":true,"o":{same},{u2}', f'"t":1,"ok":true,"o":{same},{u1}', '"t":1,"m":2',
            f'"t":1,"r":2,"i":3,"n":"get","a":{q2},{u2}', f'"t":1,"ok":true,"o":{same},{u2}', '"t":1,"m":3',
            f'"t":1,"r":3,"i":4,"n":"get","a":{q2},"x":"repeat"', '"t":1,"m":4',
            '"t":2,"k":"f90fb68b"', '"t":2,"m":1',
            f'"t":2,"r":1,"i":5,"n":"get","a":{q1},"ro":true,{u1}', f'"t":2,"r":1,"i":6,"n":"get","a":{q2},{u2}',
            f'"t":2,"ok":true,"o":{same},{u2}', f'"t":2,"ok":true,"o":{same},{u1}', '"t":2,"m":2',
            f'"t":2,"r":2,"i":7,"n":"get","a":{q2},{u2}', f'"t":2,"ok":true,"o":{same},{u2}', '"t":2,"m":3',
        ]
    )  # fmt: skip
    written = DigestRecorder(tmp_path / "written")
    written.write_trajectory(Trajectory("w", [[[RecordedCall("get", {"q": n}, "x")] for n in range(3)]]))
    assert [line["i"] for line in calls_in(tmp_path / "written")] == [1, 2, 3]


def keyed_live_recording(folder: Path, key: bytes) -> None:
    """A live guard's run, recorded with ``key``: a status polled with a fresh timestamp each time."""
    with DigestRecorder(folder, digest_key=key), scope(conversation_id="keyed-live"):
        guard = StopRepeatedCalls(max_refusals=None)
        guard.pre_agent_turn()
        for n in range(4):
            assert guard.pre_llm_call() is None
            call = ToolCall("get", {"q": 1})
            assert guard.pre_tool_call(call) is None
            guard.post_tool_call(call, result={"status": "ok", "seen_at": n})


def test_a_keyed_recording_replayed_without_its_key_says_which_option_gives_it(tmp_path: Path) -> None:
    keyed_live_recording(tmp_path, KEY_A)
    policy = Policy(ignore_results={"seen_at"})
    expected = (
        "keyed-live was recorded with a digest key and {}: ignore_arguments and ignore_results name fields by "
        "their digests (repeat-hooks replay --digest-key-file FILE)"
    )
    for key, given in ((b"", "no digest key was given"), (KEY_B, "the digest key given is another")):
        (read,) = read_folder(tmp_path, pytest.fail, key)
        with pytest.raises(NotReplayable) as raised:
            replay(policy, [read])
        assert str(raised.value) == expected.format(given)
        assert replay(Policy(), [read]).refused == 0  # no name to digest: any key will do
    (read,) = read_folder(tmp_path, pytest.fail, KEY_A)
    assert replay(policy, [read]).refused == 2  # with its key: the polls repeat once seen_at is ignored
    lines = [line for path in recording_files(tmp_path)[0] for line in path.read_text().splitlines()]
    (unkeyed,) = read_digest_lines(lines, pytest.fail)
    with pytest.raises(NotReplayable, match="no digest key was given"):
        replay(policy, [unkeyed])
    (keyed,) = read_digest_lines(lines, pytest.fail, KEY_A)
    assert replay(policy, [keyed]).refused == 2


def test_a_recording_without_a_turn_line_replays_ignored_fields_without_a_key(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path), scope(conversation_id="no-turn"):  # no pre_agent_turn: no key fingerprint
        guard = StopRepeatedCalls(max_refusals=None)
        for n in range(4):
            call = ToolCall("get", {"q": 1})
            if guard.pre_tool_call(call) is None:
                guard.post_tool_call(call, result={"status": "ok", "seen_at": n})
    (read,) = read_folder(tmp_path, pytest.fail)
    assert read.key_check is None and replay(Policy(ignore_results={"seen_at"}), [read]).refused == 2
    lines = (tmp_path / FILE_NAME).read_text().splitlines()
    (read,) = read_digest_lines(lines, pytest.fail)
    assert replay(Policy(ignore_results={"seen_at"}), [read]).refused == 2
    reader = DigestReader()  # no key: the recording's own (none)
    reader.read(lines, pytest.fail)
    (read,) = reader.trajectories()
    assert replay(Policy(ignore_results={"seen_at"}), [read]).refused == 2


def test_a_value_whose_names_were_not_all_read_cannot_be_replayed_ignoring_a_field(tmp_path: Path) -> None:
    calls = [RecordedCall("get", Unreadable(q=1), {"status": "ok", "seen_at": n}) for n in range(3)]
    digests = as_digests(Trajectory("odd", [[[call] for call in calls]]))
    with pytest.raises(NotReplayable) as raised:
        replay(Policy(ignore_arguments={"q"}), [digests])
    assert str(raised.value) == "ignore_arguments: odd has a value whose names could not be read"
    # A value too large to read every name of is such a value too; one just small enough is read whole.
    assert digest_arguments({"rows": [0] * 99_999})[1] == set()  # the list and its items: 100,000 values
    assert digest_arguments({"rows": [0] * 100_000})[1] == {"*"}
    nested = [RecordedCall("get", {"q": 1}, {"rows": [{"seen_at": n}], "seen_at": n}) for n in range(2)]
    with pytest.raises(NotReplayable) as raised:
        replay(Policy(ignore_results={"seen_at"}), [as_digests(Trajectory("nested", [[nested]]))])
    assert str(raised.value) == (
        "ignore_results: 'seen_at' occurs below the top level in nested, and a digest recording can drop it "
        "only at the top level (replay full trajectories to tune it)"
    )


def test_ignored_names_that_look_like_digests_are_told_apart_from_digests() -> None:
    calls = [RecordedCall("get", {"q": 1}, {"last_checked_time": n, "status": "ok"}) for n in range(4)]
    full = Trajectory("t", [[[call] for call in calls]])
    digests = as_digests(full)
    policy = Policy(ignore_results={"last_checked_time"})  # 17 characters, as "#" and a digest are
    assert figures(replay(policy, [digests])) == figures(replay(policy, [full])) and replay(policy, [full]).refused
    as_digest = Policy(ignore_results={f"#{field_digest('last_checked_time')}"})  # what tune prints for a digest
    assert figures(replay(as_digest, [digests])) == figures(replay(policy, [full]))
    with pytest.raises(NotReplayable, match="'f0123456789abcdef' is not a schema name"):
        replay(Policy(ignore_results={"f0123456789abcdef"}), [digests])


def test_a_recorder_installed_again_records_again_and_makes_missing_folders(tmp_path: Path) -> None:
    recorder = DigestRecorder(tmp_path / "a" / "b" / "c")  # parents made as needed
    for conversation in ("first", "second"):
        with recorder, scope(conversation_id=conversation):
            StopRepeatedCalls().pre_tool_call(ToolCall("get", {"q": 1}))
    assert [line["c"] for line in calls_in(tmp_path / "a" / "b" / "c")] == ["first", "second"]


def test_write_trajectory_raises_when_it_cannot_write(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(OSError):
        DigestRecorder(blocked / "sub").write_trajectory(Trajectory("t", [[[RecordedCall("get")]]]))


def test_a_write_failure_is_logged_with_the_path_once_per_run_of_failures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    recorder = DigestRecorder(blocked / "rec")

    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records if "recording: cannot write" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="repeat_hooks"):
        labels(recorder, 3)  # three failures: one warning
        assert failures() == [
            f"repeat_hooks recording: cannot write {blocked / 'rec' / FILE_NAME} ([Errno 20] Not a directory: "
            f"'{blocked / 'rec'}'); the guard goes on"
        ]
        blocked.unlink()
        labels(recorder, 2)  # written again
        assert len(failures()) == 1 and len(recorder.path.read_text().splitlines()) == 2
        recorder.close()
        shutil.rmtree(blocked)
        blocked.write_text("")
        labels(recorder, 2)  # a new run of failures: warned of again
        assert len(failures()) == 2


def test_writers_in_one_process_take_their_own_file_sets_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(recording, "MAX_WRITERS", 2)
    first, second, third = (DigestRecorder(tmp_path) for _ in range(3))
    first.label("a", success=True)
    second.label("b", success=True)
    assert (first.path.name, second.path.name) == (FILE_NAME, "repeat-hooks-2.jsonl")
    with pytest.raises(OSError) as raised:
        third.write_trajectory(Trajectory("c", [[[RecordedCall("get")]]]))
    assert str(raised.value) == f"2 writers already record into {tmp_path}"
    first.close()  # its file set is free again
    third.write_trajectory(Trajectory("c", [[[RecordedCall("get")]]]))
    assert third.path.name == FILE_NAME
    second.close()
    third.close()
    assert sorted(t.id for t in read_folder(tmp_path, pytest.fail)) == ["c"]


def test_ids_and_tool_names_beyond_ascii_are_recorded_as_they_are(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path) as recorder, scope(conversation_id="café-注文", agent_name="agént"):
        guard = StopRepeatedCalls()
        guard.pre_agent_turn()
        call = ToolCall("réserver", {"q": 1})
        assert guard.pre_tool_call(call) is None
        guard.post_tool_call(call, result="ok")
        recorder.label("café-注文", success=True)
    (read,) = read_folder(tmp_path, pytest.fail)
    assert (read.id, read.success, read.turns[0][0][0].name) == ("café-注文/agént", True, "réserver")
    assert recorder.path.read_bytes().isascii()


def test_each_outcome_is_written_for_the_call_it_belongs_to(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="repeat_hooks"),
        DigestRecorder(tmp_path),
        scope(conversation_id="batch"),
    ):
        guard = StopRepeatedCalls(max_calls=None)
        guard.pre_agent_turn()
        assert guard.pre_llm_call() is None
        calls = [ToolCall("get", {"q": n}) for n in ("W1", "W2", "W2", "x\ud800y")]  # twice the same, a surrogate
        assert guard.pre_tool_calls(calls) == [None] * 4
        for call, result in reversed(list(zip(calls, ["one", "two", "two", "x\ud800y"], strict=True))):
            guard.post_tool_call(call, result=result)
    assert caplog.records == []
    said = [("W1", "one"), ("W2", "two"), ("W2", "two"), ("x\ud800y", "x\ud800y")]
    DigestRecorder(tmp_path / "full").write_trajectory(
        Trajectory("batch", [[[RecordedCall("get", {"q": q}, r) for q, r in said]]])
    )
    (live,) = read_folder(tmp_path, pytest.fail)
    (full,) = read_folder(tmp_path / "full", pytest.fail)
    assert [(c.arguments, c.result) for c in live.turns[0][0]] == [(c.arguments, c.result) for c in full.turns[0][0]]
    assert len({str(c.result) for c in live.turns[0][0]}) == 3  # each its own result: "one", "two", the surrogate


def test_an_outcome_told_to_another_process_reaches_its_call(tmp_path: Path) -> None:
    """One conversation's hook calls in two processes, each a writer of its own file set (a coding CLI's hook
    processes, two workers): a call decided in one and recorded in the other gets its outcome, whichever writer's
    files are read first; two calls of one tool and arguments each get one."""
    first, second = DigestRecorder(tmp_path), DigestRecorder(tmp_path)
    state = GuardState()
    policy = Policy(max_calls=None)
    track, other = ToolCall("track", {"order_id": "W1"}), ToolCall("track", {"order_id": "W2"})

    def told(recorder: DigestRecorder, verb: Callable[[], object]) -> None:
        remove = observe.add_observer(recorder)  # as install does, in a process of its own
        try:
            with scope(conversation_id="cli-session"):
                state.listen()
                verb()
                observe.tell_all(state.heard())
        finally:
            remove()

    told(first, lambda: policy.start_turn(state))
    told(second, lambda: policy.decide_model_call(state))
    told(first, lambda: policy.decide_tool_calls(state, [track, track]))
    told(second, lambda: policy.record_tool_result(state, track, ok=True, result="in transit"))
    told(first, lambda: (policy.record_model_call(state), policy.decide_model_call(state)))
    told(second, lambda: policy.decide_tool_call(state, other))
    told(first, lambda: policy.record_tool_result(state, other, ok=True, result="delivered"))  # read before its call
    told(first, lambda: policy.record_tool_result(state, track, ok=True, result="in transit"))
    first.close(), second.close()
    assert [len(files) for files in recording_files(tmp_path)] == [1, 1]  # two writers

    (read,) = read_folder(tmp_path, pytest.fail)
    DigestRecorder(tmp_path / "one").write_trajectory(
        Trajectory("cli-session", [[[RecordedCall("track", {"order_id": "W1"}, "in transit")] * 2,
                                    [RecordedCall("track", {"order_id": "W2"}, "delivered")]]])
    )  # fmt: skip
    (one,) = read_folder(tmp_path / "one", pytest.fail)
    calls = [(c.name, c.arguments, c.result) for response in read.turns[0] for c in response]
    assert calls == [(c.name, c.arguments, c.result) for response in one.turns[0] for c in response]
    assert len(calls) == 3 and UNRECORDED not in [result for _, _, result in calls]


def deep_lines(folder: Path) -> list[tuple[str, str | None, list[str] | None, list[str] | None]]:
    """Each call and outcome line of the folder's current file: its conversation, agent, ``da`` and ``dr``."""
    lines = [json.loads(line) for line in (folder / FILE_NAME).read_text().splitlines()]
    return [(x["c"], x.get("g"), x.get("da"), x.get("dr")) for x in lines if "n" in x or "o" in x]


def test_nested_names_are_said_once_per_conversation_agent_and_file(tmp_path: Path) -> None:
    owner, amount = [field_digest("owner")], [field_digest("amount")]
    with DigestRecorder(tmp_path / "live"):
        for conversation, agent in (("c1", None), ("c2", None), ("c1", "worker"), ("c1", None)):
            with scope(conversation_id=conversation, agent_name=agent):
                guard = StopRepeatedCalls()
                call = ToolCall("get", {"q": {"owner": 1}})
                assert guard.pre_tool_call(call) is None
                guard.post_tool_call(call, result={"rows": [{"amount": 1}]})
    assert deep_lines(tmp_path / "live") == [
        ("c1", None, owner, None), ("c1", None, None, amount),
        ("c2", None, owner, None), ("c2", None, None, amount),  # another conversation: said again
        ("c1", "worker", owner, None), ("c1", "worker", None, amount),  # another agent: its own trajectory
        ("c1", None, None, None), ("c1", None, None, None),  # said already in this file
    ]  # fmt: skip
    # A name said of the results is said again of the arguments (the replay reads them apart).
    calls = [RecordedCall("a", {"q": 1}, {"rows": [{"owner": 1}]}), RecordedCall("b", {"q": {"owner": 1}}, "x")]
    DigestRecorder(tmp_path / "both").write_trajectory(Trajectory("c", [[calls]]))
    assert deep_lines(tmp_path / "both") == [
        ("c", None, None, None), ("c", None, None, owner), ("c", None, owner, None), ("c", None, None, None)
    ]  # fmt: skip
    (read,) = read_folder(tmp_path / "both", pytest.fail)
    with pytest.raises(NotReplayable, match="'owner' occurs below the top level"):
        replay(Policy(ignore_arguments={"owner"}), [read])
    # After a rotation, each file says them again, once.
    rotating = DigestRecorder(tmp_path / "rotating", max_bytes=1024, backups=3)
    rows = [[RecordedCall("get", {"q": {"owner": n}}, {"rows": [{"amount": n}]})] for n in range(30)]
    rotating.write_trajectory(Trajectory("c", [rows]))
    (files,) = recording_files(tmp_path / "rotating")
    assert len(files) == 4
    for path in files:
        text = path.read_text()
        assert text.count('"da":') == min(1, text.count('"n":')) and text.count('"dr":') == 1, path.name


def test_a_recorder_forgets_the_names_of_the_oldest_conversation_past_its_bound(tmp_path: Path) -> None:
    calls = [[[RecordedCall("get", {"q": {"owner": 1}})]]]
    recorder = DigestRecorder(tmp_path, max_bytes=None)
    for n in range(recording.MAX_CONVERSATIONS):
        recorder.write_trajectory(Trajectory(f"c{n}", calls))
    recorder.write_trajectory(Trajectory("c0", calls))  # 4096 remembered: said already
    recorder.write_trajectory(Trajectory("newest", calls))  # 4097: c1, the least recent, forgotten
    recorder.write_trajectory(Trajectory("c1", calls))
    recorder.write_trajectory(Trajectory("newest", calls))
    recorder.close()
    said = [(line["c"], "da" in line) for line in calls_in(tmp_path)[recording.MAX_CONVERSATIONS :]]
    assert said == [("c0", False), ("newest", True), ("c1", True), ("newest", False)]


FORKS = """
import dataclasses, os, sys
from repeat_hooks.offline.recording import DigestRecorder
from repeat_hooks.offline.replay import RecordedCall, Trajectory
recorder = DigestRecorder(sys.argv[1])
nested = Trajectory("parent", [[[RecordedCall("get", {"q": {"owner": 1}})]]])
recorder.write_trajectory(nested)
pid = os.fork()
if pid == 0:  # the child: writes two conversations, then leaves at once
    try:
        for ident in ("child-1", "child-2", "child-1"):
            recorder.write_trajectory(dataclasses.replace(nested, id=ident))
    finally:
        os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
recorder.write_trajectory(dataclasses.replace(nested, id="parent-2"))
recorder.close()
"""
"""A process that records, forks a child that records too, then records again (a fresh interpreter: forking the
test run, with its threads, could leave the child stuck on a lock another thread held)."""


def test_a_forked_child_records_into_a_file_set_of_its_own(tmp_path: Path) -> None:
    command = [sys.executable, "-c", FORKS, str(tmp_path)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line["c"] for line in calls_in(tmp_path) if "da" in line and line["c"].startswith("parent")] == [
        "parent",
        "parent-2",
    ]
    child = [json.loads(line) for line in (tmp_path / "repeat-hooks-2.jsonl").read_text().splitlines()]
    assert [(line["c"], "da" in line) for line in child if "n" in line] == [
        ("child-1", True),
        ("child-2", True),
        ("child-1", False),
    ]
    assert "child" not in (tmp_path / FILE_NAME).read_text()


def test_a_guard_with_no_conversation_is_warned_of_once_with_the_fix(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            StopRepeatedCalls().pre_tool_call(ToolCall("get", {"q": 1}))
    (warned,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert str(warned.message) == (
        f"repeat_hooks recording: a guard decided with no conversation id and no turn id, so its calls are not "
        f"recorded in {tmp_path} (they could belong to any conversation): run the agent inside "
        "`with repeat_hooks.observe.scope(conversation_id=...)`, or give each turn an id "
        "(pre_agent_turn(turn_id=...))"
    )


def test_a_second_recorder_on_a_folder_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with DigestRecorder(tmp_path), pytest.raises(ValueError) as raised:
        DigestRecorder(tmp_path).install()
    assert str(raised.value) == (
        f"a DigestRecorder already records into {tmp_path} in this process: install one recorder per folder (it "
        "hears every guard of the process), or give this one another folder"
    )


def test_a_folder_is_read_writer_by_writer_and_its_problems_named(tmp_path: Path) -> None:
    problems: list[str] = []
    assert list(read_folder(tmp_path, problems.append)) == [] and problems == ["no repeat-hooks.jsonl in this folder"]
    names = [FILE_NAME, *(f"repeat-hooks-{n}.jsonl" for n in range(2, 13))]
    for name in reversed(names):
        (tmp_path / name).write_text("")
    (tmp_path / "repeat-hooks-2.jsonl.1").write_text("")
    assert [[path.name for path in files] for files in recording_files(tmp_path)] == [
        [FILE_NAME],
        ["repeat-hooks-2.jsonl.1", "repeat-hooks-2.jsonl"],
        *([name] for name in names[2:]),
    ]
    (tmp_path / "repeat-hooks.jsonl.1.gz").write_bytes(b"not gzip")
    line = {"rh": 1, "c": "caf\xe9", "t": 1, "r": 1, "i": 1, "n": "get", "a": "0123456789abcdef"}
    (tmp_path / FILE_NAME).write_bytes(json.dumps(line).encode().replace(b"\\u00e9", b"\xe9") + b"\n")  # not UTF-8
    problems.clear()
    (read,) = read_folder(tmp_path, problems.append)
    assert read.id == "caf\ufffd" and read.turns[0][0][0].name == "get"  # a bad byte: replaced, the line read
    assert problems == ["repeat-hooks.jsonl.1.gz: unreadable (Not a gzipped file (b'no'))"]
    (tmp_path / "repeat-hooks.jsonl.1.gz").write_bytes(gzip.compress(b'{"rh":1,"c":"z\xff","success":true}\n'))
    problems.clear()
    (read,) = read_folder(tmp_path, problems.append)
    assert problems == []


def test_a_full_trajectory_as_digests_is_its_keyed_recording_read_back(tmp_path: Path) -> None:
    calls = [RecordedCall("get", {"q": {"owner": 1}, "id": 1}, {"status": "ok", "seen_at": n}) for n in range(4)]
    full = Trajectory("keyed", [[[call] for call in calls]])
    DigestRecorder(tmp_path, digest_key=KEY_A).write_trajectory(full)
    (read,) = read_folder(tmp_path, pytest.fail, KEY_A)
    digests = as_digests(full, KEY_A)
    assert digests == read and digests.key_check == read.key_check
    assert digests.field_name(field_digest("seen_at", KEY_A)) == "seen_at"
    policy = Policy(ignore_results={"seen_at"})
    assert figures(replay(policy, [digests])) == figures(replay(policy, [full])) and replay(policy, [full]).refused
    with pytest.raises(NotReplayable, match="'owner' occurs below the top level in keyed"):
        replay(Policy(ignore_arguments={"owner"}), [digests])


def test_each_malformed_digest_line_is_named_with_what_is_wrong() -> None:
    problems: list[str] = []
    line = {"rh": 1, "c": "a", "t": 1, "r": 1, "i": 1, "n": 5, "a": "0123456789abcdef"}
    others = ['{"rh": 1, "c": "a", "t": "x"}', '{"c": "a"}', '{"rh": 1, "c": 5}', '{"rh": 1, "c": "a", "success": 1}']
    list(read_digest_lines([json.dumps(line), *others], problems.append))
    assert problems == [
        "line 1: a call needs 'n' (its tool's name) and an order 'i'",
        "line 2: 't' must be a turn number",
        'line 3: not a digest recording line (no "rh": 1)',
        "line 4: 'c' must be the conversation's id (text), 'g' its agent's name",
        "line 5: 'success' must be true or false",
    ]
    with pytest.raises(ValueError) as raised:
        DigestRecorder(".", digest_key="short")
    assert str(raised.value) == (
        "digest_key must be at least 16 bytes (secrets.token_bytes(32)): a short key is guessed"
    )


def test_a_read_only_hint_recorded_is_the_hint_replayed(tmp_path: Path) -> None:
    def run(hint: bool | None) -> Trajectory:  # a poll, with a note taken between its repeats
        calls = [RecordedCall("get", {"q": 1}, "same")]
        for n in range(2):
            calls += [RecordedCall("note", {"n": n}, "ok", True, hint), RecordedCall("get", {"q": 1}, "same")]
        return Trajectory(f"hint-{hint}", [[[call] for call in calls]])

    for hint, refused in ((True, 1), (False, 0), (None, 0)):  # a note that changes nothing: the poll repeats
        DigestRecorder(tmp_path / str(hint)).write_trajectory(run(hint))
        (read,) = read_folder(tmp_path / str(hint), pytest.fail)
        assert replay(Policy(), [read]).refused == replay(Policy(), [run(hint)]).refused == refused, hint


def test_a_call_refused_live_is_judged_on_what_that_same_call_last_returned(tmp_path: Path) -> None:
    policy = Policy(count="per_turn", max_calls=2, max_refusals=None)
    with DigestRecorder(tmp_path), scope(conversation_id="judged"):
        guard = StopRepeatedCalls(policy=policy)
        guard.pre_agent_turn()
        for name, arguments, result in [
            ("get", {"a": 1, "b": 2}, "r1"),
            ("get", {"a": 1, "b": 2}, "r1"),
            ("get", {"a": 9, "b": 2}, "r2"),
            ("get", {"b": 2, "a": 1}, None),  # the first call again, its fields in another order: refused
        ]:
            assert guard.pre_llm_call() is None
            call = ToolCall(name, arguments)
            if guard.pre_tool_call(call) is None:
                guard.post_tool_call(call, result=result)
    (read,) = read_folder(tmp_path, pytest.fail)
    tally = replay(policy, [read])
    # judged on r1 (what that call returned), not on r2 (the last result of get): waste prevented, not harm
    assert (tally.refused, tally.waste_prevented, tally.harmful, tally.unjudged) == (1, 1, 0, 0)


def test_blank_lines_in_a_recording_are_skipped_not_the_end_of_it(tmp_path: Path) -> None:
    DigestRecorder(tmp_path).write_trajectory(Trajectory("gaps", [[[RecordedCall("get", {"q": n})] for n in range(3)]]))
    lines = (tmp_path / FILE_NAME).read_text().splitlines()
    (tmp_path / FILE_NAME).write_text("\n".join([*lines[:4], "", "  ", *lines[4:]]) + "\n")  # an edited file
    (read,) = read_folder(tmp_path, pytest.fail)
    assert [len(response) for response in read.turns[0]] == [1, 1, 1]


def test_calls_whose_outcome_never_came_are_replayed_as_run_not_as_failed(tmp_path: Path) -> None:
    policy = Policy(count="per_turn", max_errors_in_a_row=2)  # needs no outcome: adapters skip post_tool_call
    with DigestRecorder(tmp_path), scope(conversation_id="no-outcomes"):
        guard = StopRepeatedCalls(policy=policy)
        guard.pre_agent_turn()
        for n in range(3):
            assert guard.pre_llm_call() is None
            assert guard.pre_tool_call(ToolCall("track", {"parcel": f"P{n}"})) is None
        assert guard.pre_llm_call() is None  # three calls with no outcome are no errors in a row
    (read,) = read_folder(tmp_path, pytest.fail)
    assert [call.ok for response in read.turns[0] for call in response] == [True, True, True]
    tally = replay(policy, [read])
    assert (tally.calls, tally.refused, tally.turns_stopped) == (3, 0, 0)


def test_a_torn_file_is_continued_in_place_on_a_new_line(tmp_path: Path) -> None:
    before = DigestRecorder(tmp_path)
    before.write_trajectory(Trajectory("before", [[[RecordedCall("get", {"q": 1}, "x")]]]))
    before.close()
    torn = before.path.read_bytes()[:-5]  # a crash mid-write
    before.path.write_bytes(torn)
    after = DigestRecorder(tmp_path)
    after.write_trajectory(Trajectory("after", [[[RecordedCall("get", {"q": 1}, "x")]]]))
    after.close()
    assert recording_files(tmp_path) == [[before.path]]  # the same file, not another file set
    assert after.path.read_bytes().startswith(torn + b"\n" + b'{"rh":1,"c":"after",')


def test_a_digest_is_keyed_blake2b_of_the_text_and_a_line_is_compact_ascii_json() -> None:
    for key in (b"", b"k" * 16, b"k" * 64):
        for text in ("", '"order_id"', "x\ud800y", "é" * 300):
            data = text.encode("utf-8", "surrogatepass")
            expected = hashlib.blake2b(data, digest_size=8, key=key, person=b"rh-record").hexdigest()
            assert recording._digest(text, key) == expected
    line = {"rh": 1, "c": "conv é\ud800", "g": "\u202eagent", "t": 2, "a": {"#rest": "ab"}, "o": ["a", "b"], "x": 1.5}
    assert recording.line_bytes(line) == (json.dumps(line, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def test_a_line_the_file_takes_in_part_is_written_whole() -> None:
    class Slow:
        """A file taking at most 5 bytes a write, then none."""

        def __init__(self, total: int) -> None:
            self.data, self.total = b"", total

        def write(self, data: bytes) -> int:
            taken = bytes(data[: min(5, self.total - len(self.data))])
            self.data += taken
            return len(taken)

    file = Slow(1000)
    recording._write_all(file, b"x" * 23 + b"\n")  # type: ignore[arg-type]
    assert file.data == b"x" * 23 + b"\n"
    full = Slow(12)
    with pytest.raises(OSError, match="nothing written"):
        recording._write_all(full, b"y" * 20)  # type: ignore[arg-type]
    assert full.data == b"y" * 12
