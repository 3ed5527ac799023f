"""Digest-only recordings: what a live guard writes holds no value, and replays to the full trajectory's figures."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import Policy, StopRepeatedCalls, ToolCall
from repeat_hooks.cli import MalformedRecordsSeen, main, read_trajectories
from repeat_hooks.observe import OBSERVERS, scope
from repeat_hooks.recording import (
    FILE_NAME,
    DigestRecorder,
    DigestTrajectory,
    as_digests,
    digest_arguments,
    digest_result,
    field_digest,
    is_schema_name,
    read_folder,
    recording_files,
)
from repeat_hooks.replay import NotReplayable, RecordedCall, Tally, Trajectory, replay

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
    for path in files:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        first_call = next(line for line in lines if "n" in line)
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
from repeat_hooks.recording import DigestRecorder
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
    import subprocess
    import sys

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
    (tmp_path / f"{FILE_NAME}.3.gz").write_bytes(gzip.compress(files[0].read_bytes()))  # as logrotate leaves it
    files[0].unlink()
    (after,) = read_folder(tmp_path, pytest.fail)
    assert after == before and sum(len(response) for response in after.turns[0]) == 16
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
