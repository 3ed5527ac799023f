"""The hook command on Claude Code's events, one event a call as the CLI runs it: what it allows, denies and ends,
how its state counts across processes, and how it fails (a bad event, a store it cannot reach, a misspelt setting)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cc_events import SESSION, Answered, answer, command, event
from repeat_hooks_claude_code import stop_of

from repeat_hooks import StopReason
from repeat_hooks.kit.command import MAX_EVENT_BYTES
from repeat_hooks.messages import STORE_DOWN_REFUSAL

OUTPUT = {"stdout": "5 passed", "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}


class Session:
    """One Claude Code session's hook events, answered by the hook in this process (``home``: its ``HOME``)."""

    def __init__(self, home: Path, **env: str) -> None:
        self.home, self.env, self.ids = home, env, 0

    def send(self, name: str, tool: str | None = None, tool_input: Any = None, **fields: Any) -> Answered:
        return answer(event(name, tool, tool_input, **fields), self.home, **self.env)

    def call(self, tool: str, tool_input: dict[str, Any], result: Any = OUTPUT, *, ok: bool = True) -> Answered:
        """One model response with one call: ``PreToolUse``, then (if it ran) its outcome and ``PostToolBatch``."""
        self.ids += 1
        ident = f"toolu_{self.ids:04d}"
        decided = self.send("PreToolUse", tool, tool_input, tool_use_id=ident)
        if decided.ends:
            return decided
        if decided.denied:  # Claude Code still ends the response with its PostToolBatch
            self.send("PostToolBatch", tool_calls=[{"tool_name": tool, "tool_use_id": ident}])
            return decided
        if ok:
            self.send("PostToolUse", tool, tool_input, tool_use_id=ident, tool_response=result)
        else:
            self.send("PostToolUseFailure", tool, tool_input, tool_use_id=ident, error=result)
        ended = self.send("PostToolBatch", tool_calls=[{"tool_name": tool, "tool_use_id": ident}])
        return ended if ended.output is not None else decided


def bash(command: str, description: str = "Run it") -> dict[str, str]:
    return {"command": command, "description": description}


def test_the_same_command_with_a_new_description_is_refused_at_its_third_run(tmp_path: Path) -> None:
    session = Session(tmp_path)
    session.send("UserPromptSubmit", prompt="Run the tests.")
    first = session.call("Bash", bash("pytest -q", "Run the test suite"))
    second = session.call("Bash", bash("pytest -q", "Run the tests again"))
    third = session.call("Bash", bash("pytest -q", "Run the tests once more"))
    assert (first.code, first.output, second.output) == (0, None, None)
    assert third.denied and third.code == 0
    assert third.reason.startswith("Refused: you already called Bash with these exact arguments 2 times")
    assert not session.call("Bash", bash("pytest -q tests/unit", "Run the tests once more")).denied  # not the command


def test_only_bashs_description_is_volatile(tmp_path: Path) -> None:
    session = Session(tmp_path)
    issues = [{"title": "Flaky test", "description": f"Seen {n} times"} for n in range(3)]
    assert [session.call("mcp__jira__create_issue", issue).denied for issue in issues] == [False] * 3


def test_a_test_rerun_after_each_edit_is_never_refused(tmp_path: Path) -> None:
    session = Session(tmp_path)
    for number in range(8):
        edit = {"file_path": "/work/app.py", "old_string": f"v{number}", "new_string": f"v{number + 1}"}
        assert not session.call("Edit", edit, {"filePath": "/work/app.py"}).denied
        assert not session.call("Bash", bash("pytest -q")).denied  # the same output each time: the edit is the change
    unchanged = Session(tmp_path / "control")
    assert [unchanged.call("Bash", bash("pytest -q")).denied for _ in range(3)] == [False, False, True]


def test_a_command_whose_output_changes_is_never_refused(tmp_path: Path) -> None:
    session = Session(tmp_path)
    for number in range(8):
        output = {**OUTPUT, "stdout": f"{number} passed"}
        assert not session.call("Bash", bash("pytest -q", f"Run {number}"), output).denied


def test_reads_change_nothing_and_writes_do(tmp_path: Path) -> None:
    reading = Session(tmp_path / "reads")
    read = {"file_path": "/work/app.py"}
    answers = []
    for _ in range(3):
        answers.append(reading.call("Bash", bash("make check")).denied)
        reading.call("Read", read, {"type": "text", "file": {"filePath": "/work/app.py", "content": "x = 1\n"}})
    assert answers == [False, False, True]  # Read, Grep...: a read between two runs restarts nothing
    writing = Session(tmp_path / "writes")
    answers = []
    for number in range(3):
        answers.append(writing.call("Bash", bash("make check")).denied)
        writing.call("Write", {"file_path": "/work/app.py", "content": f"x = {number}\n"}, {"type": "update"})
    assert answers == [False, False, False]


def test_a_failing_command_is_retried_once_then_refused_with_its_own_text(tmp_path: Path) -> None:
    session = Session(tmp_path)
    answers = [session.call("Bash", bash("make build"), "Exit code 2\nmissing header", ok=False) for _ in range(3)]
    assert [a.denied for a in answers] == [False, False, True]
    assert answers[2].reason.startswith("Refused: Bash failed the same way 2 times with these arguments")


def test_with_warn_the_last_run_let_through_carries_the_warning(tmp_path: Path) -> None:
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"warn": true}')
    session = Session(tmp_path)
    notes = []
    for number in range(2):
        ident = f"toolu_w{number}"
        session.send("PreToolUse", "Bash", bash("make lint"), tool_use_id=ident)
        ran = session.send("PostToolUse", "Bash", bash("make lint"), tool_use_id=ident, tool_response=OUTPUT)
        session.send("PostToolBatch", tool_calls=[{"tool_use_id": ident}])
        notes.append(((ran.output or {}).get("hookSpecificOutput") or {}).get("additionalContext"))
    assert notes[0] is None and str(notes[1]).startswith("Note: Bash has now run 2 times like this")  # after the result


def test_a_sub_agents_calls_count_apart_from_the_main_agents(tmp_path: Path) -> None:
    main, sub = Session(tmp_path), Session(tmp_path)
    sub.ids = 100
    for _ in range(2):
        main.call("Bash", bash("make test"))
    original = sub.send

    def as_sub_agent(name: str, tool: str | None = None, tool_input: Any = None, **fields: Any) -> Answered:
        return original(name, tool, tool_input, agent_id="a1b2c3", agent_type="general-purpose", **fields)

    sub.send = as_sub_agent  # type: ignore[method-assign]
    assert [sub.call("Bash", bash("make test")).denied for _ in range(3)] == [False, False, True]
    assert main.call("Bash", bash("make test")).denied  # the main agent's third


def test_a_redelivered_event_counts_once(tmp_path: Path) -> None:
    session = Session(tmp_path)
    call = bash("pytest -q")
    again = [session.send("PreToolUse", "Bash", call, tool_use_id="toolu_same").denied for _ in range(3)]
    for _ in range(2):
        session.send("PostToolUse", "Bash", call, tool_use_id="toolu_same", tool_response=OUTPUT)
    session.send("PostToolBatch", tool_calls=[{"tool_use_id": "toolu_same"}])
    assert again == [False, False, False]
    assert [session.call("Bash", call).denied for _ in range(2)] == [False, True]  # its 2nd run, then refused


def test_ignored_refusals_end_the_run_with_a_message_the_user_sees(tmp_path: Path) -> None:
    session = Session(tmp_path)
    answers = [session.call("Bash", bash("echo hi", f"Say hi, take {n}")) for n in range(5)]
    assert [a.denied for a in answers] == [False, False, True, True, True]
    assert [a.ends for a in answers] == [False, False, False, False, True]
    last = answers[-1].output or {}
    assert last["stopReason"].startswith("I stopped: I kept calling Bash")
    assert last["systemMessage"] == f"repeat-hooks stopped the turn (ignored_refusals): {last['stopReason']}"
    stop = stop_of({"type": "result", "session_id": SESSION}, environ={"HOME": str(tmp_path)})
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == last["stopReason"]
    assert stop_of("another-session", environ={"HOME": str(tmp_path)}) is None


def test_a_response_end_stops_the_run_at_the_errors_in_a_row(tmp_path: Path) -> None:
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"max_errors_in_a_row": 2}))
    session = Session(tmp_path)
    first = session.call("Bash", bash("make a"), "Exit code 1", ok=False)
    second = session.call("Bash", bash("make b"), "Exit code 1", ok=False)
    assert not first.ends and second.ends and not second.denied  # PostToolBatch's answer: no further model call
    assert (second.output or {})["systemMessage"].startswith("repeat-hooks stopped the turn (too_many_errors)")


def test_parallel_hook_processes_count_exactly(tmp_path: Path) -> None:
    """Twelve hook processes at once for the same call of one response: the same two run as when they come one by
    one (an update lost between two processes would let more through)."""
    call = bash("make test")
    events = [event("PreToolUse", "Bash", call, tool_use_id=f"toolu_{n:02d}") for n in range(12)]
    one_by_one = [answer(given, tmp_path / "sequential").denied for given in events]
    with ThreadPoolExecutor(max_workers=12) as pool:
        at_once = list(pool.map(lambda given: command(given, tmp_path / "parallel"), events))
    assert sum(not denied for denied in one_by_one) == 2
    assert [a.code for a in at_once] == [0] * 12 and not any(a.stderr for a in at_once)
    assert sum(not a.denied for a in at_once) == 2


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        (b"{not json", "the event on stdin is not JSON (Expecting property name enclosed in double quotes at char 1)"),
        (b"[1, 2]", "the event on stdin is a JSON array, not an object"),
        (b"{}", "the hook event has no session_id"),
        (b" " * (MAX_EVENT_BYTES + 1), f"the event on stdin is over {MAX_EVENT_BYTES} bytes"),
    ],
)
def test_an_unusable_event_fails_open_with_one_line(tmp_path: Path, stdin: bytes, said: str) -> None:
    answered = answer(stdin, tmp_path)
    assert answered == Answered(1, None, f"repeat-hooks hook claude-code: {said}; failing open\n")


def test_an_unusable_event_ends_the_run_when_failing_closed(tmp_path: Path) -> None:
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"fail": "closed"}\n')
    answered = command(b"garbage", tmp_path)  # no event read: it may be a call about to run, so it is denied too
    assert answered.code == 0 and answered.ends and answered.stderr.endswith("; failing closed\n")
    assert answered.output is not None and answered.output["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "cannot guard this session (the event on stdin is not JSON" in answered.output["systemMessage"]
    # A call about to run that the hook cannot use is denied, not only the run ended (continue: false alone would
    # let this very call run).
    nameless = {**event("PreToolUse", "Bash", bash("ls"), tool_use_id="toolu_1"), "session_id": ""}
    denied = command(json.dumps(nameless).encode(), tmp_path)
    assert denied.code == 0 and denied.ends and denied.output is not None
    assert denied.output["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "has no session_id" in denied.output["systemMessage"]


def test_a_store_it_cannot_reach_fails_open_or_closed(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    state = str(blocker / "hooks.sqlite3")
    call = event("PreToolUse", "Bash", bash("echo SECRET-VALUE"), tool_use_id="toolu_1")
    opened = command(call, tmp_path, REPEAT_HOOKS_STATE=state)
    assert (opened.code, opened.output) == (1, None)
    assert opened.stderr.count("\n") == 1 and opened.stderr.startswith(
        f"repeat-hooks hook claude-code: the state at {state}"
    )
    assert opened.stderr.endswith("failing open\n") and "SECRET" not in opened.stderr
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"fail": "closed"}')
    closed = command(call, tmp_path, REPEAT_HOOKS_STATE=state)
    assert closed.code == 0 and closed.denied and closed.reason == STORE_DOWN_REFUSAL and not closed.ends
    batch = command(event("PostToolBatch", tool_calls=[]), tmp_path, REPEAT_HOOKS_STATE=state)
    assert batch.code == 0 and batch.ends


def test_a_misspelt_setting_is_named_with_its_right_spelling(tmp_path: Path) -> None:
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"max_cals": 3}')
    answered = command(event("PreToolUse", "Bash", bash("ls"), tool_use_id="toolu_1"), tmp_path)
    assert answered.code == 1 and answered.output is None
    assert "got an unknown setting 'max_cals' (did you mean max_calls?)" in answered.stderr
    assert answered.stderr.count("\n") == 1 and str(settings) in answered.stderr
    settings.write_text('{"fial": "closed"}')
    assert "did you mean fail?" in command(event("UserPromptSubmit"), tmp_path).stderr


def test_the_project_file_wins_over_the_users_key_by_key(tmp_path: Path) -> None:
    user = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    user.parent.mkdir(parents=True)
    user.write_text('{"max_calls": 5, "exempt": ["Bash"]}')
    project = tmp_path / "project"
    project.mkdir()
    (project / ".repeat-hooks.json").write_text('{"exempt": []}')
    session = Session(tmp_path, CLAUDE_PROJECT_DIR=str(project))
    assert [session.call("Bash", bash("make")).denied for _ in range(6)] == [False] * 5 + [True]
    (project / ".repeat-hooks.json").write_text('{"state": "/tmp/elsewhere.sqlite3"}')
    said = session.send("UserPromptSubmit").stderr
    assert "'state' is a user setting" in said


def test_a_cli_without_its_adapter_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from repeat_hooks.offline import hooks

    monkeypatch.setitem(hooks.CLIS, "gemini-cli", ("repeat_hooks_not_installed", "repeat-hooks-gemini-cli"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{}")))
    monkeypatch.setenv("REPEAT_HOOKS_RESIDENT", "off")
    assert hooks.hook(["gemini-cli"]) == 1
    assert capsys.readouterr().err == (
        "repeat-hooks hook: the gemini-cli hook needs its adapter: pip install repeat-hooks-gemini-cli\n"
    )
    assert (
        "the CLI is one of claude-code, gemini-cli, codex, not 'cursor'"
        in command(b"{}", tmp_path, "hook", "cursor").stderr
    )


def test_the_hook_path_loads_none_of_the_offline_tools(tmp_path: Path) -> None:
    given = json.dumps(event("PreToolUse", "Bash", bash("ls"), tool_use_id="toolu_1")).encode()
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "from repeat_hooks.offline.cli import main; main(['hook', 'claude-code'])",
        ],
        input=given,
        capture_output=True,
        env={**os.environ, "HOME": str(tmp_path), "REPEAT_HOOKS_RESIDENT": "off"},
        timeout=60,
        check=True,
    )
    loaded = {
        line.split("|")[-1].strip() for line in done.stderr.decode().splitlines() if line.startswith("import time:")
    }
    assert "repeat_hooks_claude_code.guard" in loaded and "repeat_hooks.stores.sqlite" in loaded
    unneeded = {"argparse", "asyncio", "redis", "repeat_hooks.offline.console", "repeat_hooks.offline.replay"}
    unneeded |= {"repeat_hooks.offline.reading", "repeat_hooks.offline.recording", "repeat_hooks.kit.conformance"}
    assert loaded & unneeded == set()


LACKED = "<tool_use_error>Error: No such tool available: mcp__kit__hex</tool_use_error>"
"""What Claude Code 2.1.332 answers a call of a tool the agent lacks (no ``PreToolUse``, no ``PostToolUseFailure``)."""


def note(answered: Answered) -> str | None:
    """The note a ``PostToolBatch`` answer hands the model (``additionalContext``)."""
    return ((answered.output or {}).get("hookSpecificOutput") or {}).get("additionalContext")


def test_a_tool_the_agent_lacks_is_refused_at_its_third_try_and_the_run_ends_at_the_third_refusal(
    tmp_path: Path,
) -> None:
    """Claude Code shows such a call only in ``PostToolBatch``: it is decided and recorded as failed there, so the
    same failure is refused in the batch's note at its third try, and the third refused response ends the run."""
    session = Session(tmp_path)
    session.send("UserPromptSubmit", prompt="Convert 255 to hex.")
    called = {"tool_name": "mcp__kit__hex", "tool_input": {"query": "255"}, "tool_response": LACKED}
    batches = [session.send("PostToolBatch", tool_calls=[{**called, "tool_use_id": f"toolu_h{n}"}]) for n in range(5)]
    notes = [note(batch) for batch in batches]
    assert notes[:2] == [None, None] and [batch.ends for batch in batches] == [False] * 4 + [True]
    assert all(str(text).startswith("Refused: mcp__kit__hex failed the same way 2 times") for text in notes[2:])
    last = batches[-1].output or {}
    assert last["systemMessage"].startswith("repeat-hooks stopped the turn (ignored_refusals): I stopped")
    stop = stop_of(SESSION, environ={"HOME": str(tmp_path)})
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


def test_a_call_decided_at_its_pre_tool_use_is_not_decided_again_in_its_batch(tmp_path: Path) -> None:
    """A call with a ``PreToolUse`` (its ``tool_use_id``) that Claude Code then answered itself (its permissions): the
    batch does not decide it again nor record it as a failure; a lacked tool beside it counts, as a failure."""
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"max_errors_in_a_row": 2}))
    session = Session(tmp_path)
    session.send("UserPromptSubmit", prompt="Build it.")
    denied = "<tool_use_error>Permission to use Bash has been denied.</tool_use_error>"
    assert not session.send("PreToolUse", "Bash", bash("make"), tool_use_id="toolu_b1").denied
    batch = session.send("PostToolBatch", tool_calls=[
        {"tool_name": "Bash", "tool_input": bash("make"), "tool_use_id": "toolu_b1", "tool_response": denied},
        {"tool_name": "mcp__kit__hex", "tool_input": {}, "tool_use_id": "toolu_h1", "tool_response": LACKED},
    ])  # fmt: skip
    assert (batch.output, batch.ends) == (None, False)  # one failure in a row (the lacked tool's), not two
    lacked = {"tool_name": "mcp__kit__hex", "tool_input": {}, "tool_use_id": "toolu_h2", "tool_response": LACKED}
    again = session.send("PostToolBatch", tool_calls=[lacked])
    assert again.ends and (again.output or {})["systemMessage"].startswith("repeat-hooks stopped the turn (too_many")


def test_the_same_answer_round_after_round_of_a_users_loop_ends_it(tmp_path: Path) -> None:
    """A ``Stop`` hook of the user's runs the agent again each time it answers: ours answers nothing (the user's hook
    decides), until the answer came ``max_same_answers`` times in a row: then ``continue: false`` ends the loop."""
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"max_same_answers": 3}))
    session = Session(tmp_path)
    session.send("UserPromptSubmit", prompt="Keep watching FR-7731.")
    session.call("mcp__parcels__track", {"id": "FR-7731"})
    said = "FR-7731 is in transit."
    stops = [session.send("Stop", stop_hook_active=n > 0, last_assistant_message=said) for n in range(3)]
    assert [stop.output for stop in stops[:2]] == [None, None] and stops[2].ends
    assert stops[2].output == {
        "continue": False,
        "stopReason": (reason := stops[2].output["stopReason"]),
        "systemMessage": f"repeat-hooks stopped the turn (repeated_answer): {reason}",
    }
    stop = stop_of(SESSION, environ={"HOME": str(tmp_path)})
    assert stop is not None and stop.reason is StopReason.REPEATED_ANSWER
    other = Session(tmp_path / "new answers")
    other.send("UserPromptSubmit", prompt="Keep watching FR-7731.")
    answers = [f"FR-7731 is {n} km away." for n in range(5)]
    assert [other.send("Stop", stop_hook_active=n > 0, last_assistant_message=text).output for n, text in
            enumerate(answers)] == [None] * 5  # fmt: skip


def test_an_answer_that_ends_the_turn_is_never_stopped(tmp_path: Path) -> None:
    """The turn's answer at exactly ``max_model_calls``: no loop has run the agent again, so the hook answers nothing
    (a stop would empty Claude Code's result); a loop that then runs it again is stopped at its next answer."""
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"max_model_calls": 2}))
    session = Session(tmp_path)
    session.send("UserPromptSubmit", prompt="Run the tests.")
    assert session.call("Bash", bash("pytest -q")).output is None
    assert session.send("Stop", stop_hook_active=False, last_assistant_message="5 passed.").output is None
    assert stop_of(SESSION, environ={"HOME": str(tmp_path)}) is None
    looped = session.send("Stop", stop_hook_active=True, last_assistant_message="5 passed.")
    assert looped.ends and (looped.output or {})["systemMessage"].startswith(
        "repeat-hooks stopped the turn (max_steps)"
    )


def test_max_same_answers_is_kept_for_claude_code_and_left_out_where_no_answer_comes(tmp_path: Path) -> None:
    from repeat_hooks_claude_code import FEEDS

    from repeat_hooks.kit.command import settings as command_settings
    from repeat_hooks.stop_rules import Feed

    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"max_same_answers": 3}))
    environ = {"HOME": str(tmp_path)}
    ours = command_settings(None, environ, owner="repeat-hooks hook claude-code", feeds=FEEDS)
    assert (ours.policy.max_same_answers, ours.unused) == (3, ())
    theirs = command_settings(None, environ, owner="repeat-hooks hook gemini-cli", feeds=(Feed.OUTCOMES,))
    assert theirs.policy.max_same_answers is None
    assert theirs.unused == ("max_same_answers (this CLI's hook events carry no text answer)",)
