"""Hostile files and inputs for the offline tools (the deployment issue's item 6): each one is a fixture written
here, and the tool that reads it answers with a named one-line message and exit 1 (2 for usage), never a
traceback, in bounded memory, reading everything else there is to read."""

from __future__ import annotations

import gc
import gzip
import json
import logging
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import Policy, StopRepeatedCalls, ToolCall
from repeat_hooks.observe import current_scope, scope
from repeat_hooks.offline.cli import main
from repeat_hooks.offline.reading import read_folder
from repeat_hooks.offline.recording import FILE_NAME, DigestRecorder, line_bytes, trajectory_lines
from repeat_hooks.offline.replay import ROWS, UNRECORDED, RecordedCall, Trajectory, printable
from repeat_hooks.offline.tune import tune

SRC = Path(__file__).resolve().parents[2] / "src"

UNPRINTABLE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
"""What must never reach the operator's terminal raw: control characters (a line's own ``\\n`` aside), bidi
and zero-width marks, lone surrogates."""


def polling(ident: str = "good", tool: str = "track") -> Trajectory:
    """One turn: a call returning the same three times (a loop the default refuses), then a new result."""
    results = ["same", "same", "same", "new"]
    return Trajectory(ident, [[[RecordedCall(tool, {"n": 1}, result)] for result in results]], True)


def digest_lines(trajectory: Trajectory) -> list[str]:
    """A trajectory as the lines of its digest recording (each ending in a newline)."""
    return [line_bytes(line).decode() for line, _, _ in trajectory_lines(trajectory)]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``repeat-hooks ARGV`` in this process: its status, stdout and stderr (a traceback would fail the test)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def console(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``repeat-hooks ARGV`` as the console script runs it: a fresh interpreter, the terminal's own streams."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "repeat_hooks", *argv]
    return subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=timeout, env=env, errors="replace"
    )


def one_line_each(err: str) -> list[str]:
    """stderr's lines; none is a traceback's."""
    assert "Traceback" not in err
    return err.splitlines()


# -- 1. a malformed value in a recording line ---------------------------------------------------------------

HOSTILE_VALUES = ["5", "[1]", "null", "Infinity", "-Infinity", "NaN", "1e999", '"x"', "{}", "[[]]", "true", '["a",1]']
VALID = {("ok", "true"), ("n", '"x"'), ("k", '"x"'), ("o", "{}"), ("a", "{}"), ("g", "null")}
VALID |= {(number, "5") for number in ("t", "m", "r", "i")}
"""The values above that are well formed where they are put (``{}``: the digests of an empty mapping)."""


def spoiled(field: str, value: str, nth: int = 1) -> tuple[str, int]:
    """The recording of ``polling("other")`` and ``polling("good")``, the ``nth`` line of "good" that has
    ``field`` giving it the JSON text ``value``; and that line's number."""
    lines = digest_lines(polling("other")) + digest_lines(polling("good"))
    seen = 0
    for number, line in enumerate(lines):
        parsed = json.loads(line)
        if field in parsed and parsed["c"] == "good":
            seen += 1
            if seen == nth:
                parsed[field] = "@hostile@"
                lines[number] = json.dumps(parsed, separators=(",", ":")).replace('"@hostile@"', value) + "\n"
                return "".join(lines), number + 1
    raise AssertionError(f"no {field} line")


@pytest.mark.parametrize("value", HOSTILE_VALUES)
@pytest.mark.parametrize("field", ["o", "m", "r", "i", "t", "ok", "a", "n", "k", "c", "g"])
def test_a_malformed_field_is_one_named_line_and_the_rest_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str
) -> None:
    path = tmp_path / "recording.jsonl"
    if field == "g":  # an agent's name: on every line of a conversation when given
        text, number = spoiled("c", '"good"')
        text = text.replace('"c":"good"', '"c":"good","g":"agent"').replace('"g":"agent"', f'"g":{value}', 1)
        number = 1 + len(digest_lines(polling("other")))
    else:
        text, number = spoiled(field, value)
    path.write_text(text)
    for command in ("replay", "tune"):
        status, out, err = cli(capsys, command, str(path), *(["--json"] if command == "replay" else []))
        problems = one_line_each(err)
        if (field, value) in VALID or (field in {"c", "g"} and value == '"x"'):
            assert (status, problems) == (0, []), (field, value)
            continue
        assert status == 1, (field, value, err)
        assert len(problems) == 1 and problems[0].startswith(f"repeat-hooks: {path}: line {number}: "), problems
        assert f"'{field}'" in problems[0], problems
        if command == "replay":
            (figures,) = json.loads(out)
            assert figures["trajectories"] == 2  # the other conversation, and what could be read of this one
            assert figures["calls"] >= 7
        else:
            assert "Proposed policy" in out


def test_deep_names_that_are_not_digests_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for field in ("da", "dr"):
        for value in ("5", '"abc"', '["a",1]', "[[]]", '{"a":1}'):
            text, number = spoiled("o" if field == "dr" else "n", '"0123456789abcdef"' if field == "dr" else '"t"')
            lines = text.splitlines(keepends=True)
            lines[number - 1] = lines[number - 1].replace('"rh":1,', f'"rh":1,"{field}":{value},', 1)
            path = tmp_path / "deep.jsonl"
            path.write_text("".join(lines))
            status, _, err = cli(capsys, "replay", str(path))
            assert status == 1
            assert one_line_each(err) == [f"repeat-hooks: {path}: line {number}: '{field}' must be a list of digests"]


def test_an_outcome_of_each_malformed_shape_leaves_its_call_without_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in ("5", "[1]", "null", '{"a":5}', '["a"]', '["a","b","c"]', '{"x":[1,2]}'):
        path = tmp_path / "outcome.jsonl"
        text, number = spoiled("o", value, nth=4)  # the new result: without it the refusal is unjudged
        path.write_text(text)
        status, out, err = cli(capsys, "replay", str(path), "--json")
        assert status == 1, value
        assert one_line_each(err) == [f"repeat-hooks: {path}: line {number}: 'o' must be an outcome's digests"]
        (figures,) = json.loads(out)
        assert figures["trajectories"] == 2 and figures["calls"] == 8
        assert figures["unjudged"] == 1 and figures["harmful"] == 1  # the other conversation's new result


def test_infinity_as_a_response_number_is_refused_not_an_overflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "recording.jsonl"
    text, number = spoiled("m", "Infinity")
    path.write_text(text)
    status, out, err = cli(capsys, "replay", str(path), "--json")
    assert status == 1
    assert one_line_each(err) == [f"repeat-hooks: {path}: line {number}: 'm' must be a response number"]
    assert json.loads(out)[0]["trajectories"] == 2
    status, out, err = cli(capsys, "tune", str(path))
    assert status == 1 and "Proposed policy" in out and len(one_line_each(err)) == 1


def test_a_full_record_with_hostile_numbers_is_replayed_and_tuned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "full.jsonl"
    call = {"name": "track", "arguments": {"n": float("inf")}, "result": float("nan"), "ok": 5}
    record = {"id": "x", "turns": [[call, call, call, {**call, "arguments": "Infinity"}]]}
    path.write_text(json.dumps(record) + "\n")
    for command in ("replay", "tune"):
        status, _, err = cli(capsys, command, str(path))
        assert status == 0 and err == ""


# -- 2. a trajectory with no turns ----------------------------------------------------------------------


def test_tune_reads_a_trajectory_with_no_turns_as_replay_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.jsonl"
    good = {"id": "good", "success": True, "turns": [[{"name": "t", "result": "same"}] * 4]}
    path.write_text("".join(json.dumps(r) + "\n" for r in ({"id": "empty", "success": True, "turns": []}, good)))
    status, out, err = cli(capsys, "replay", str(path), "--json")
    assert status == 0 and json.loads(out)[0]["trajectories"] == 2
    status, out, err = cli(capsys, "tune", str(path))
    assert status == 0 and err == ""
    assert re.search(r"^trajectories +2 +2$", out, re.MULTILINE)
    proposal = tune([Trajectory("empty", [], True), Trajectory("labelled", [], None), Trajectory("turns", [[]])])
    assert proposal.default.trajectories == 3 and proposal.default.successful == 1


# -- 3. one huge line in a small gzip -------------------------------------------------------------------

MEASURED = """
import json, resource, sys
from repeat_hooks.offline import reading
reading.MAX_LINE_CHARS = 1 << 20  # a 100 MB line is then decisive for a 1 MiB cap
from repeat_hooks.offline.cli import main
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
status = main(sys.argv[1:])
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"status": status, "grown_kb": grown}), file=sys.stderr)
"""


def test_a_huge_line_in_a_rotated_gzip_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    folder.mkdir()
    with gzip.open(folder / f"{FILE_NAME}.1.gz", "wb", compresslevel=1) as gz:
        gz.writelines(line.encode() for line in digest_lines(polling("before")))
        chunk = b"a" * (1 << 20)
        for _ in range(100):  # one line of 100 MB (about 100 kB compressed)
            gz.write(chunk)
        gz.write(b"\n")
        gz.writelines(line.encode() for line in digest_lines(polling("after")))
    (folder / FILE_NAME).write_text("".join(digest_lines(polling("current"))))
    assert (folder / f"{FILE_NAME}.1.gz").stat().st_size < 1_000_000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, "replay", str(folder), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    *problems, said = one_line_each(done.stderr)
    measured = json.loads(said)
    assert measured["status"] == 1
    huge = len(digest_lines(polling("before"))) + 1
    assert problems == [f"repeat-hooks: {folder}: {FILE_NAME}.1.gz: line {huge}: over {1 << 20} characters"]
    assert json.loads(done.stdout)[0]["trajectories"] == 3  # before it, after it, and the current file
    assert measured["grown_kb"] < 48 * 1024, measured  # unbounded, the line alone held 100 MB, twice


def test_the_folder_reader_and_the_file_reader_share_one_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from repeat_hooks.offline import reading

    monkeypatch.setattr(reading, "MAX_LINE_CHARS", 4096)
    lines = digest_lines(polling("kept"))
    text = "".join([*lines[:3], "x" * 10_000 + "\n", *lines[3:]])
    (tmp_path / FILE_NAME).write_text(text)
    problems: list[str] = []
    (kept,) = read_folder(tmp_path, problems.append)
    assert problems == [f"{FILE_NAME}: line 4: over 4096 characters"] and kept.id == "kept"


# -- 4 and 5. names that would crash or drive the operator's terminal --------------------------------------

NAMES = ["tr\udc80ck", "\x1b]0;pwned\x07track", "\x1b[2J\x1b[31mtrack", "track\u202e", "a\tb\rc\x00", "tr\x9bck"]


def written_names(tmp_path: Path) -> list[Path]:
    """The same loop under each hostile name, as a full record and as a digest recording."""
    full = tmp_path / "full.jsonl"
    records = [
        {
            "id": f"id {name}",
            "success": True,
            "turns": [[{"name": name, "arguments": {"n": 1}, "result": r} for r in ("a", "a", "a", "b")]],
        }
        for name in NAMES
    ]
    full.write_text("".join(json.dumps(record) + "\n" for record in records))  # ensure_ascii: escapes
    digests = tmp_path / "digests.jsonl"
    digests.write_text("".join(line for name in NAMES for line in digest_lines(polling(f"id {name}", name))))
    return [full, digests]


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable("plain name, é ü 字") == "plain name, é ü 字"
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("x\ud800y\u202ez\x9b") == "x\\ud800y\\u202ez\\x9b"
    assert printable("line\nnext") == "line\\nnext" and printable(printable("\x07")) == printable("\x07")


def test_hostile_names_reach_no_terminal_raw_and_crash_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in written_names(tmp_path):
        page = tmp_path / f"{path.stem}.html"
        status, out, err = cli(capsys, "replay", str(path), "--examples", "--html", str(page))
        assert status == 0 and err == ""
        assert not UNPRINTABLE.search(out)
        examples = [line for line in out.splitlines() if line.startswith("harmful (default): ")]
        assert len(examples) == len(NAMES)
        for name in NAMES:
            assert f"harmful (default): id {printable(name)} turn 1: {printable(name)}" in examples
        html = page.read_text(encoding="utf-8")  # written, as UTF-8
        assert not UNPRINTABLE.search(html.replace("\n", " "))
        assert "tr\\udc80ck" in html and "\\x1b[2J\\x1b[31mtrack" in html
        status, out, err = cli(capsys, "tune", str(path))
        assert status == 0 and err == "" and not UNPRINTABLE.search(out)
        status, out, _ = cli(capsys, "replay", str(path), "--json")  # JSON escapes them itself, exactly
        assert status == 0 and not UNPRINTABLE.search(out)


def test_the_console_script_prints_hostile_names_escaped(tmp_path: Path) -> None:
    full, digests = written_names(tmp_path)
    done = console("replay", str(full), str(digests), "--examples", "--html", str(tmp_path / "page.html"))
    assert done.returncode == 0 and done.stderr == ""
    assert "harmful (default): id tr\\udc80ck turn 1: tr\\udc80ck" in done.stdout
    assert not UNPRINTABLE.search(done.stdout)


def test_an_error_line_naming_a_hostile_id_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keyed"
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    record = {"id": "\x1b[2Jwho", "turns": [[{"name": "t", "arguments": {"order": 1}, "result": "x"}]]}
    (tmp_path / "full.jsonl").write_text(json.dumps(record) + "\n")
    recorded = cli(capsys, "record", str(tmp_path / "full.jsonl"), "--out", str(path), "--digest-key-file", str(key))
    assert recorded[0] == 0
    status, out, err = cli(capsys, "replay", str(path), "--policy", '{"ignore_arguments": ["order"]}')
    assert status == 2 and not UNPRINTABLE.search(err)
    assert one_line_each(err) == [
        f"repeat-hooks: {path}: \\x1b[2Jwho was recorded with a digest key and no digest key was given: "
        "ignore_arguments and ignore_results name fields by their digests (repeat-hooks replay --digest-key-file FILE)"
    ]
    status, out, err = cli(capsys, "replay", str(tmp_path / "full.jsonl"), "--policy", '{\n"count": "per_turn"}')
    assert status == 0 and len(out.splitlines()) == 1 + len(ROWS)  # a label with a newline stays one cell
    assert out.splitlines()[0].split() == ['{\\n"count":', '"per_turn"}']


# -- 6. symbolic links planted in a recorder's folder ----------------------------------------------------


def drive(conversation: str) -> None:
    with scope(conversation_id=conversation):
        guard = StopRepeatedCalls()
        guard.pre_agent_turn()
        call = ToolCall("lookup", {"q": 1})
        assert guard.pre_tool_call(call) is None
        guard.post_tool_call(call, result="found")


def test_the_recorder_never_follows_a_planted_symlink(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "recordings"
    folder.mkdir()
    target = tmp_path / "outside.txt"
    target.write_text("keep\n")
    (folder / FILE_NAME).symlink_to(target)  # the first file set's file
    (folder / ".repeat-hooks-2.jsonl.lock").symlink_to(tmp_path / "created")  # the second's claim, dangling
    with caplog.at_level(logging.WARNING, logger="repeat_hooks"), DigestRecorder(folder) as recorder:
        drive("kept")
    assert target.read_text() == "keep\n" and not (tmp_path / "created").exists()
    assert recorder.path == folder / "repeat-hooks-3.jsonl"  # the first set whose files are its own
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        f"repeat_hooks recording: {folder / FILE_NAME} is a symbolic link, not followed: writing another file set"
        " [conversation=kept]",  # the hook call's conversation, which the recorder served
        f"repeat_hooks recording: {folder / '.repeat-hooks-2.jsonl.lock'} is a symbolic link, not followed: "
        "writing another file set [conversation=kept]",
    ]
    status, out, err = cli(capsys, "replay", str(folder), "--json")
    assert status == 1
    assert one_line_each(err) == [f"repeat-hooks: {folder}: {FILE_NAME}: a symbolic link, not read"]
    assert json.loads(out)[0]["trajectories"] == 1  # the conversation recorded, nothing of the target


def test_a_recorder_whose_file_becomes_a_symlink_stops_writing_there(tmp_path: Path, caplog: Any) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("keep\n")
    with caplog.at_level(logging.WARNING, logger="repeat_hooks"), DigestRecorder(tmp_path / "r", max_bytes=1024) as rec:
        drive("one")
        rec.close()  # the file set freed: the next line claims it again
        rec.path.unlink()
        rec.path.symlink_to(target)
        for n in range(20):  # rotates past max_bytes too
            drive(f"two-{n}")
    assert target.read_text() == "keep\n"
    assert rec.path.name == "repeat-hooks-2.jsonl"


def test_the_reader_refuses_symlinks_and_special_files_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    folder.mkdir()
    (folder / FILE_NAME).write_text("".join(digest_lines(polling("own"))))
    planted = tmp_path / "elsewhere.jsonl"
    planted.write_text("".join(digest_lines(polling("planted"))))
    (folder / f"{FILE_NAME}.1").symlink_to(planted)
    (folder / "repeat-hooks-2.jsonl").symlink_to(tmp_path / "missing")
    os.mkfifo(folder / f"{FILE_NAME}.2")  # opened naively, it would wait for a writer forever
    done = console("replay", str(folder), "--json", timeout=120)
    assert done.returncode == 1
    assert one_line_each(done.stderr) == [  # each writer's files oldest first, as they are read
        f"repeat-hooks: {folder}: {FILE_NAME}.2: not a regular file, not read",
        f"repeat-hooks: {folder}: {FILE_NAME}.1: a symbolic link, not read",
        f"repeat-hooks: {folder}: repeat-hooks-2.jsonl: a symbolic link, not read",
    ]
    assert json.loads(done.stdout)[0]["trajectories"] == 1


# -- 8. a conversation id that is not text ------------------------------------------------------------


def test_a_conversation_id_that_is_not_text_is_recorded_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with DigestRecorder(tmp_path) as recorder:
        with scope(conversation_id=42, agent_name=7):  # type: ignore[arg-type]
            assert current_scope().conversation_id == "42" and current_scope().agent_name == "7"
            drive_scoped()
        with scope(conversation_id="a\ud800b"):
            assert current_scope().conversation_id == "a\\ud800b"  # as ToolCall names and turn ids are kept
        recorder.label(42, success=True)  # type: ignore[arg-type]
    status, out, err = cli(capsys, "replay", str(tmp_path), "--json")
    assert status == 0 and err == ""
    (figures,) = json.loads(out)
    assert figures["trajectories"] == 1 and figures["calls"] == 1 and figures["successful"] == 1


def drive_scoped() -> None:
    guard = StopRepeatedCalls()
    guard.pre_agent_turn()
    call = ToolCall("lookup", {"q": 1})
    assert guard.pre_tool_call(call) is None
    guard.post_tool_call(call, result="found")


# -- 9. calls whose outcome never comes -------------------------------------------------------------------


@pytest.mark.slow  # 20,000 decisions traced: left out of mutation testing
def test_calls_whose_outcome_never_comes_hold_nothing_in_the_recorder(tmp_path: Path) -> None:
    """An exempt tool whose outcome is never told, decided 20,000 times: the recorder keeps nothing per call (the
    reader pairs an outcome with its call by ``u``), so it does not grow; the outcome told at last is the first
    call's."""
    guard = StopRepeatedCalls(policy=Policy(exempt={"ping"}))
    with DigestRecorder(tmp_path, max_bytes=None), scope(conversation_id="pings"):
        guard.pre_agent_turn()
        call = ToolCall("ping", {})
        for _ in range(256):
            assert guard.pre_tool_call(call) is None
        gc.collect()
        tracemalloc.start()
        try:
            held = tracemalloc.get_traced_memory()[0]
            for _ in range(20_000):
                assert guard.pre_tool_call(call) is None
            grown = tracemalloc.get_traced_memory()[0] - held
        finally:
            tracemalloc.stop()
        assert grown < 64 * 1024, grown
        guard.post_tool_call(call, result="pong")
    (read,) = read_folder(tmp_path, pytest.fail)
    results = [c.result for response in read.turns[0] for c in response]
    assert len(results) == 20_256 and results[0] != UNRECORDED and results[1:] == [UNRECORDED] * 20_255
