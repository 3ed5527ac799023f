"""``repeat-hooks replay``: recorded trajectories through policies, on files a user would have."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import Policy
from repeat_hooks.offline.cli import main, parse_record, read_trajectories
from repeat_hooks.offline.replay import RecordedCall, Trajectory, replay

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "corpora" / "tau2.jsonl.gz"


def call(name: str, result: str = "same", ok: bool = True, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "result": result, "ok": ok}


LOOP = {
    "id": "loop",
    "success": False,
    "turns": [[call("track", n=1), call("track", n=1), call("track", n=1), call("track", n=1)]],
}
RECHECK = {
    "id": "recheck",
    "success": True,
    "turns": [
        [
            call("speed_test", "slow"),
            call("fix_apn"),
            call("speed_test", "slow"),
            call("reboot"),
            call("speed_test", "ok"),
        ]
    ],
}
NEW_RESULT = {
    "id": "polling",
    "success": True,
    "turns": [[call("track", status, n=2) for status in ("queued", "in transit", "delivered", "delivered")]],
}


def write_jsonl(path: Path, records: list[Any], gz: bool = False) -> Path:
    text = "".join(json.dumps(record) + "\n" for record in records)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def figures(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main(["replay", *argv, "--json"]) == 0
    result: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return result


def test_generic_format_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl.gz", [LOOP, RECHECK, NEW_RESULT], gz=True)
    progress, per_turn = figures(capsys, str(path), "--policy", "{}", "--policy", '{"count": "per_turn"}')
    assert progress["trajectories"] == per_turn["trajectories"] == 3
    assert progress["successful"] == 2
    # the loop: the 3rd and 4th identical calls are refused, and their results repeat the last one
    assert progress["waste_prevented"] == 2 and progress["harmful"] == 0
    assert progress["successful_with_refusal"] == 0 and progress["loops_caught"] == progress["loops"] == 1
    # counting per turn refuses the 3rd speed test (a new result) and the 3rd and 4th polls (new to the model)
    assert per_turn["harmful"] == 3 and per_turn["harmful_in_successful"] == 3
    assert per_turn["successful_with_refusal"] == 2


def test_chat_format_written_by_a_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def assistant(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": ident, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                for ident, name, arguments in calls
            ],
        }

    def tool(ident: str, content: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": ident, "content": content}

    parcel = {"tracking_number": "FR-7731"}
    messages = [
        {"role": "system", "content": "You track parcels."},
        {"role": "user", "content": "Where is FR-7731?"},
        assistant(("c1", "track_parcel", parcel)),
        tool("c1", "in transit"),
        assistant(("c2", "track_parcel", parcel)),
        tool("c2", "in transit"),
        # three parallel calls in one response: one more would already be a 3rd run
        assistant(("c3", "track_parcel", parcel), ("c4", "track_parcel", parcel), ("c5", "track_parcel", parcel)),
        tool("c3", "in transit"),
        tool("c4", "in transit"),
        tool("c5", "in transit"),
        {"role": "assistant", "content": "It is in transit."},
        {"role": "user", "content": "And now?"},
        assistant(("c6", "track_parcel", parcel)),
        tool("c6", "delivered"),
    ]
    one = tmp_path / "conversation.json"
    one.write_text(json.dumps(messages))
    many = write_jsonl(tmp_path / "conversations.jsonl", [{"messages": messages, "success": True}])
    for path in (one, many):
        (result,) = figures(capsys, str(path))
        assert result["trajectories"] == 1 and result["turns"] == 2
        assert result["refused"] == 3 and result["waste_prevented"] == 3 and result["harmful"] == 0
    trajectory = parse_record(messages, "x")
    assert [len(turn) for turn in trajectory.turns] == [3, 1]
    assert [len(response) for response in trajectory.turns[0]] == [1, 1, 3]


def test_a_malformed_line_is_named_and_the_rest_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(LOOP) + "\n{not json\n" + json.dumps({"turns": "nope"}) + "\n" + json.dumps(RECHECK))
    assert main(["replay", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert "line 2" in captured.err and "line 3" in captured.err and "'turns' must be" in captured.err
    (result,) = json.loads(captured.out)
    assert result["trajectories"] == 2 and result["waste_prevented"] == 2


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ('{"max_calls": -1}', "max_calls: Input should be greater than or equal to 0"),
        ('{"max_cals": 3}', "max_cals is not a setting; did you mean max_calls?"),
        ("{nope", "Invalid JSON"),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, reason: str
) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [LOOP])
    for command in ("replay", "tune"):
        assert main([command, str(path), "--policy", policy]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith(f"repeat-hooks {command}: --policy {policy}: ")
        assert reason in captured.err and captured.err.count("\n") == 1
        assert "usage:" not in captured.err and "pydantic" not in captured.err


def test_the_table_prints_one_column_per_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [LOOP, RECHECK])
    assert main(["replay", str(path), "--policy", "{}", "--policy", '{"count":"per_turn"}']) == 0
    lines = capsys.readouterr().out.splitlines()
    waste = next(line for line in lines if line.startswith("waste prevented"))
    assert waste.split()[-2:] == ["2", "2"]
    assert lines[0].split() == ["{}", '{"count":"per_turn"}']


def test_replay_is_deterministic() -> None:
    trajectory = Trajectory("t", [[[RecordedCall("a", {"x": 1}, "r")]] * 5], success=True)
    first, second = replay(Policy(), [trajectory] * 3), replay(Policy(), [trajectory] * 3)
    assert first == second and first.refused == 3 * 3


def test_the_console_script_and_python_dash_m_agree(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [LOOP])
    script = Path(sys.executable).with_name("repeat-hooks")
    via_script = subprocess.run([str(script), "replay", str(path)], capture_output=True, text=True, check=True)
    via_module = subprocess.run(
        [sys.executable, "-m", "repeat_hooks", "replay", str(path)], capture_output=True, text=True, check=True
    )
    assert via_script.stdout == via_module.stdout and "waste prevented" in via_script.stdout


def test_the_default_on_the_tau2_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    (result,) = figures(capsys, str(CORPUS))
    assert result["trajectories"] == 858 and result["successful"] == 543
    assert result["successful_with_refusal"] <= 5
    assert result["harmful_in_successful"] == 0
    assert result["waste_prevented"] >= 890


@pytest.mark.slow
def test_the_tau2_corpus_with_a_fresh_request_id_in_every_result() -> None:
    # bench/replay_tau2.py prints these figures; real tools stamp every result with a fresh id.
    sys.path.insert(0, str(CORPUS.parents[1]))
    try:
        from replay_tau2 import stamped  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    trajectories = [stamped(trajectory) for trajectory in read_trajectories(CORPUS)]
    masked = replay(Policy(), trajectories)
    assert masked.successful_with_refusal <= 5 and masked.harmful_in_successful == 0
    assert masked.waste_prevented >= 800
    assert replay(Policy(mask_volatile=False), trajectories).waste_prevented == 0  # what the mask saves


def chat(*turns: list[list[tuple[str, str, str]]]) -> list[dict[str, Any]]:
    """A chat-format conversation: each turn a list of responses, each response (id, tool, result) calls."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        messages.append({"role": "user", "content": "go"})
        for response in turn:
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}
                        for i, name, _ in response
                    ],
                }
            )
            messages += [{"role": "tool", "tool_call_id": i, "content": result} for i, _, result in response]
    return messages


def test_jsonl_of_chat_lists_and_a_pretty_printed_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = chat([[("c0", "track", "x")], [("c1", "track", "x")], [("c2", "track", "x")]])
    lines = write_jsonl(tmp_path / "lists.jsonl", [loop, loop])
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps({"messages": loop, "success": True}, indent=2))
    (from_lines,) = figures(capsys, str(lines))
    (from_pretty,) = figures(capsys, str(pretty))
    assert from_lines["trajectories"] == 2 and from_lines["waste_prevented"] == 2
    assert from_pretty["trajectories"] == 1 and from_pretty["waste_prevented"] == 1


def test_call_ids_reused_across_turns_keep_their_own_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turn = [[("call_0", "track", "x")], [("call_1", "track", "x")], [("call_2", "track", "x")]]
    path = tmp_path / "reused.json"
    path.write_text(json.dumps(chat(turn, turn)))
    (result,) = figures(capsys, str(path))
    assert result["turns"] == 2 and result["loops"] == 2 and result["loops_caught"] == 2
    assert result["waste_prevented"] == 2 and result["harmful"] == 0


def test_bad_shapes_and_a_truncated_file_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = {"messages": [{"role": "user"}, {"role": "assistant", "tool_calls": 5}]}
    path = write_jsonl(tmp_path / "bad.jsonl", [bad, LOOP])
    assert main(["replay", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert "line 1" in captured.err and "'tool_calls' must be a list" in captured.err
    assert json.loads(captured.out)[0]["trajectories"] == 1
    whole = gzip.compress(("".join(json.dumps(LOOP) + "\n" for _ in range(200))).encode())
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    assert main(["replay", str(truncated), "--json"]) == 1
    captured = capsys.readouterr()
    assert "unreadable after line" in captured.err and json.loads(captured.out)[0]["trajectories"] >= 1


def test_parallel_calls_are_decided_together_as_an_sdk_does() -> None:
    responses = [
        [RecordedCall("b", {"x": 0}, 0)],
        [RecordedCall("b", {"x": 0}, 1), RecordedCall("b", {"x": 0}, 1)],
    ]
    tally = replay(Policy(), [Trajectory("t", [responses], True)])
    assert tally.refused == 1  # checked together: the 3rd is refused before the 2nd's new result is known


def test_model_calls_are_counted_and_unreplayable_budgets_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [RECHECK])
    capped, budget = figures(capsys, str(path), "--policy", '{"max_model_calls": 2}', "--policy", '{"max_cost_usd": 1}')
    assert capped["turns_stopped"] == 1 and capped["refused"] == 3  # the 3rd response ends the turn
    assert budget["turns_stopped"] == 0
    main(["replay", str(path), "--policy", '{"max_cost_usd": 1}'])
    assert "never trip in a replay" in capsys.readouterr().err


def test_every_tally_adds_up_over_turns() -> None:
    loop_turn = [[RecordedCall("track", {"n": 1}, "x")]] * 4  # 4 responses of one call: the 3rd and 4th refused
    new_turn = [[RecordedCall("track", {"n": 1}, "x")]] * 2
    stopping = Trajectory("stops", [loop_turn, new_turn, loop_turn], success=True)
    tally = replay(Policy(max_refusals=2), [stopping])
    assert tally.calls == 10 and tally.turns == 3
    assert tally.refused == 4 and tally.waste_prevented == 4 and tally.harmful == 0
    assert tally.turns_stopped == 2  # the 1st and 3rd turns: two refused responses, then the answer is replaced
    assert tally.successful_with_refusal == 1 and tally.loops == tally.loops_caught == 2


def test_harmful_refusals_are_listed_and_a_late_refusal_does_not_catch_a_loop() -> None:
    calls = [RecordedCall("poll", {}, "same")] * 3 + [RecordedCall("poll", {}, "new")]
    tally = replay(Policy(max_calls=3), [Trajectory("late", [[[c] for c in calls]], success=True)])
    assert tally.refused == 1 and tally.harmful == tally.harmful_in_successful == 1
    assert tally.examples == ["late turn 1: poll"]  # turns count from 1, as the recorder and OpenTelemetry
    assert tally.loops == 1 and tally.loops_caught == 0  # refused at the 4th run, not by the 3rd
    quiet = replay(Policy(), [Trajectory("ok", [[[RecordedCall("a", {}, "r")]]], success=True)])
    assert quiet.successful_with_refusal == 0 and quiet.loops == 0 and quiet.examples == []


def test_the_examples_flag_prints_where_harm_happened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [RECHECK])
    assert main(["replay", str(path), "--policy", '{"count": "per_turn"}', "--examples"]) == 0
    assert 'harmful ({"count": "per_turn"}): recheck turn 1: speed_test' in capsys.readouterr().out


def test_chat_results_errors_and_positions() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "function": {"name": "get", "arguments": '{"n": 1}'}},
                {"id": "b", "function": {"name": "get", "arguments": '{"n": 2}'}},
                {"id": "c", "function": {"name": "put", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "denied", "is_error": True},
        {"role": "tool", "tool_call_id": "b", "content": "two", "status": "error"},
        {"role": "tool", "tool_call_id": "a", "content": "one"},
    ]
    trajectory = parse_record({"id": "x", "messages": messages, "success": False}, "fallback")
    (response,) = trajectory.turns[0]
    assert [(c.name, c.arguments, c.result, c.ok) for c in response] == [
        ("get", '{"n": 1}', "one", True),
        ("get", '{"n": 2}', "two", False),
        ("put", "{}", "denied", False),
    ]
    assert trajectory.id == "x" and trajectory.success is False


def test_generic_records_keep_every_field() -> None:
    record = {"turns": [[{"name": "t", "arguments": {"a": 1}, "result": "r", "ok": False, "read_only": True}]]}
    trajectory = parse_record(record, "file:7")
    (call,) = trajectory.turns[0][0]
    assert (call.name, call.arguments, call.result, call.ok, call.read_only) == ("t", {"a": 1}, "r", False, True)
    assert trajectory.id == "file:7" and trajectory.success is None
    bare = parse_record({"turns": [[{"name": "t"}]]}, "f")
    assert bare.turns[0][0][0].ok is True and bare.turns[0][0][0].read_only is None


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"turns": [[{"arguments": {}}]]}, "every call needs a 'name'"),
        ({"turns": [[]], "success": "yes"}, "'success' must be true, false or null"),
        ({"other": 1}, "expected 'turns' (generic format) or 'messages' (chat format)"),
        (7, "expected an object or a list of messages, got int"),
        ({"messages": [{"content": "no role"}]}, "each with a 'role'"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"id": 1}]}]}, "every tool call needs 'function'"),
        ({"turns": [[{"name": "t"}]], "id": object()}, None),
    ],
)
def test_malformed_records_say_what_is_wrong(record: Any, message: str | None) -> None:
    from repeat_hooks.offline.cli import MalformedRecord

    if message is None:
        assert parse_record(record, "f").turns
        return
    with pytest.raises(MalformedRecord, match=re.escape(message)):
        parse_record(record, "f")


def test_a_json_list_of_records_or_of_conversations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = tmp_path / "records.json"
    records.write_text(json.dumps([LOOP, RECHECK], indent=1))
    conversations = tmp_path / "conversations.json"
    loop = chat([[("c0", "track", "x")], [("c1", "track", "x")], [("c2", "track", "x")]])
    conversations.write_text(json.dumps([loop, loop], indent=1))
    (from_records,) = figures(capsys, str(records))
    (from_conversations,) = figures(capsys, str(conversations))
    assert from_records["trajectories"] == 2 and from_conversations["trajectories"] == 2
    assert from_conversations["waste_prevented"] == 2


def test_unreadable_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "turns": [\n')
    assert main(["replay", str(broken), "--json"]) == 1
    captured = capsys.readouterr()
    assert "not JSON Lines, nor one JSON document" in captured.err
    assert json.loads(captured.out)[0]["trajectories"] == 0


def test_a_progress_bar_on_large_files_at_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from repeat_hooks.offline import console

    path = write_jsonl(tmp_path / "runs.jsonl", [LOOP] * 120)
    monkeypatch.setattr(console, "PROGRESS_BYTES", 10)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["replay", str(path), "--json"]) == 0
    err = capsys.readouterr().err
    assert "runs.jsonl:  " in err and err.rstrip().endswith("runs.jsonl: 100%")


def test_the_help_says_what_each_option_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "replay recorded trajectories through one or more policies" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in (
        "JSONL or JSON files (optionally gzipped), or a DigestRecorder's folder (its files read together)",
        "Policy settings as JSON",
        "repeat to compare (default: the default policy)",
        "print the figures as JSON",
        "list where harmful refusals happened",
    ):
        assert words in text
    with pytest.raises(SystemExit):
        main([])


def test_long_policy_labels_are_shortened_in_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [LOOP])
    label = '{"read_only": ["get_order", "get_user", "list_orders"]}'
    assert main(["replay", str(path), "--policy", label]) == 0
    head = capsys.readouterr().out.splitlines()[0].strip()
    assert head == label[:37] + "..."
    assert main(["replay", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0].strip() == "default"


def test_a_bad_first_line_of_json_lines_is_named_and_the_rest_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps({"id": "a", "turns": [[{"name": "t", "arguments": {}, "result": "x"}]]})
    for bad in ("not json", "[" * 100_000 + "]" * 100_000):
        path = tmp_path / "mixed.jsonl"
        path.write_text(f"{bad}\n{good}\n")
        assert main(["replay", str(path), "--json"]) == 1
        out = capsys.readouterr()
        assert json.loads(out.out)[0]["trajectories"] == 1 and "line 1:" in out.err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["replay", str(empty)]) == 0
    assert "no records" in capsys.readouterr().err


def one_call_per_response(*calls: RecordedCall) -> list[list[RecordedCall]]:
    return [[c] for c in calls]


def test_a_tally_given_is_added_to() -> None:
    tally = replay(Policy(), [Trajectory("a", [], success=True)])
    assert replay(Policy(), [Trajectory("b", [], success=False)], tally) is tally
    assert (tally.trajectories, tally.successful, tally.successful_with_refusal) == (2, 1, 0)


def test_a_refusal_is_waste_only_when_that_same_call_returned_the_same_outcome() -> None:
    turn = one_call_per_response(
        RecordedCall("search", {"q": 1}, "x"),
        RecordedCall("lookup", {"q": 1}, "y"),  # another tool, same arguments
        RecordedCall("search", {"q": 2}, "y"),  # the same tool, other arguments
        RecordedCall("search", {"q": 1}, "x"),  # refused: the model already read "x" for it
        RecordedCall("lookup", {"q": 1}, "y", ok=False),  # refused: the same text, but now a failure
    )
    tally = replay(Policy(count="per_turn", max_calls=1), [Trajectory("t", [turn], success=True)])
    assert (tally.refused, tally.waste_prevented, tally.harmful) == (2, 1, 1)
    assert tally.examples == ["t turn 1: lookup"]


def test_a_read_only_hint_in_the_record_reaches_the_policy() -> None:
    turn = one_call_per_response(
        RecordedCall("track", {"n": 1}, "x"),
        RecordedCall("peek", {}, "p", read_only=True),  # changes nothing: the next track is a repeat
        RecordedCall("track", {"n": 1}, "x"),
        RecordedCall("peek", {}, "q", read_only=True),
        RecordedCall("track", {"n": 1}, "x"),
    )
    tally = replay(Policy(), [Trajectory("t", [turn])])
    assert tally.refused == 1 and tally.waste_prevented == 1


def test_recorded_failures_are_replayed_as_failures() -> None:
    turn = one_call_per_response(*(RecordedCall(f"step_{n}", {}, "Error: down", ok=False) for n in range(3)))
    tally = replay(Policy(max_errors_in_a_row=2, max_cycle_period=None), [Trajectory("t", [turn], success=True)])
    assert tally.turns_stopped == 1 and tally.successful_with_refusal == 1


def test_an_alarm_in_an_earlier_turn_stays_an_alarm() -> None:
    repeated = one_call_per_response(*[RecordedCall("track", {"n": 1}, "x")] * 3)
    clean = one_call_per_response(RecordedCall("track", {"n": 1}, "x"))
    tally = replay(Policy(), [Trajectory("t", [repeated, clean], success=True)])
    assert tally.refused == 1 and tally.successful_with_refusal == 1


def test_responses_without_calls_still_count_as_model_calls() -> None:
    tally = replay(Policy(max_model_calls=1), [Trajectory("chatty", [[[], []]], success=True)])
    assert tally.turns_stopped == 1 and tally.successful_with_refusal == 1


def test_only_the_first_examples_are_kept() -> None:
    from repeat_hooks.offline.replay import MAX_EXAMPLES

    turn = one_call_per_response(*(RecordedCall("poll", {}, str(n)) for n in range(MAX_EXAMPLES + 5)))
    tally = replay(Policy(count="per_turn", max_calls=1, max_refusals=None), [Trajectory("t", [turn])])
    assert tally.harmful == MAX_EXAMPLES + 4 and len(tally.examples) == MAX_EXAMPLES


def test_a_harmful_refusal_shows_the_calls_around_it_by_their_digests() -> None:
    """The context of a harmful refusal: up to 3 calls either side, each by position (from 1), tool, 8 hex characters
    of its arguments' digest, the first 8 of its outcome's ("?" when unrecorded), whether it failed and whether the
    guard refused it."""
    import hashlib

    from repeat_hooks.call import canonical_arguments
    from repeat_hooks.offline.replay import UNRECORDED, ContextCall
    from repeat_hooks.result import outcome_digest

    odd = {"q": "\ud800"}  # a lone surrogate: digested as the guard keeps it, never a crash
    calls = [
        *[RecordedCall("poll", {"n": 1}, "same")] * 3,
        RecordedCall("lookup", odd, "nothing", ok=False),
        RecordedCall("note", {}, UNRECORDED),
        RecordedCall("poll", {"n": 1}, "new"),
    ]
    policy = Policy(max_calls=3, count="per_turn")
    tally = replay(policy, [Trajectory("late", [[[c] for c in calls]], success=True)])
    (harm,) = tally.harmful_refusals

    def digest(arguments: object) -> str:
        text = canonical_arguments(arguments).encode("utf-8", "surrogatepass")
        return hashlib.blake2b(text, digest_size=4).hexdigest()

    assert (
        harm.context
        == (  # the 4th poll, refused, and the three calls before it
            ContextCall(3, "poll", digest({"n": 1}), outcome_digest(True, "same")[:8], ok=True, refused=False),
            ContextCall(4, "lookup", digest(odd), outcome_digest(False, "nothing")[:8], ok=False, refused=False),
            ContextCall(5, "note", digest({}), "?", ok=True, refused=False),
            ContextCall(6, "poll", digest({"n": 1}), outcome_digest(True, "new")[:8], ok=True, refused=True),
        )
    )
    assert len(digest({"n": 1})) == 8 and digest({"n": 1}) != digest({"n": 2})


def test_replay_shows_the_warnings_and_they_change_no_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [LOOP, RECHECK, NEW_RESULT])
    plain, warned = figures(capsys, str(path), "--policy", "{}", "--policy", '{"warn": true}')
    # the loop's 2nd track (its 3rd is refused), and the poll's 2nd "delivered" (a 5th poll would be)
    assert plain["warned"] == 0 and warned["warned"] == 2
    assert {k: v for k, v in warned.items() if k not in ("warned", "policy")} == {
        k: v for k, v in plain.items() if k not in ("warned", "policy")
    }
