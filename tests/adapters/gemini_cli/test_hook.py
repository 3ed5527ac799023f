"""The hook command on Gemini CLI's events, as the CLI 0.61.0 sends them (``samples/``: a real run's payloads), one
event a call: what it allows, denies and ends, how its state counts across processes, how it fails."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_gemini_cli import hook, stop_of

from repeat_hooks import StopReason

SAMPLES = Path(__file__).parent / "samples"
SESSION = "2b761e7e-685f-4c58-92fd-9f41d1b7f753"


def sample(name: str, **changed: Any) -> dict[str, Any]:
    """A real payload (``samples/<name>.stdin.json``), with ``changed`` fields."""
    return {**json.loads((SAMPLES / f"{name}.stdin.json").read_text()), **changed}


def answer(event: dict[str, Any] | bytes, home: Path, **env: str) -> tuple[int, dict[str, Any] | None, str]:
    """The hook's exit code, stdout (parsed) and stderr for one event, in this process, with ``HOME`` at ``home``."""
    raw = event if isinstance(event, bytes) else json.dumps(event).encode()
    out, err = io.StringIO(), io.StringIO()
    code = hook(stdin=io.BytesIO(raw), stdout=out, stderr=err, environ={"HOME": str(home), **env})
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else None, err.getvalue()


def command(event: dict[str, Any], home: Path) -> tuple[int, dict[str, Any] | None, str]:
    """``repeat-hooks hook gemini-cli`` as the CLI runs it: a process of its own."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "repeat-hooks"), "hook", "gemini-cli"],
        input=json.dumps(event).encode(),
        capture_output=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "REPEAT_HOOKS_RESIDENT": "off"},
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr.decode()


def model_call(home: Path) -> dict[str, Any] | None:
    before = sample("01_BeforeAgent", hook_event_name="BeforeModel", llm_request={"model": "gemini-2.5-flash"})
    return answer(before, home)[1]


def test_the_real_runs_payloads_refuse_the_third_echo_and_end_the_run_at_the_fifth(tmp_path: Path) -> None:
    """The real run's events (``echo hi`` 6 times), one model call before each response: the 3rd and 4th are denied
    with the text the model reads, the 5th ends the run with the text the user reads."""
    assert answer(sample("00_SessionStart"), tmp_path)[:2] == (0, None)
    assert answer(sample("01_BeforeAgent"), tmp_path)[:2] == (0, None)
    answers = []
    for name in ("02_BeforeTool", "04_BeforeTool", "06_BeforeTool", "07_BeforeTool", "08_BeforeTool"):
        assert model_call(tmp_path) is None
        decided = answer(sample(name), tmp_path)[1]
        answers.append(decided)
        if decided is None:
            answer(sample(f"{int(name[:2]) + 1:02d}_AfterTool"), tmp_path)
    assert answers[:2] == [None, None]
    for refused in answers[2:4]:
        assert refused is not None and refused["decision"] == "deny" and "continue" not in refused
        assert refused["reason"].startswith("Refused: you already called run_shell_command with these exact")
    last = answers[4] or {}
    assert last["continue"] is False and last["decision"] == "deny"
    assert last["stopReason"].startswith("repeat-hooks stopped the turn (ignored_refusals): I stopped: I kept calling")
    stop = stop_of(SESSION, environ={"HOME": str(tmp_path)})
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message in last["stopReason"]
    assert answer(sample("10_AfterAgent"), tmp_path)[:2] == (0, None)


def test_a_new_prompt_starts_a_fresh_turn(tmp_path: Path) -> None:
    answer(sample("01_BeforeAgent"), tmp_path)
    for _ in range(2):
        answer(sample("02_BeforeTool"), tmp_path)
        answer(sample("03_AfterTool"), tmp_path)
    assert answer(sample("02_BeforeTool"), tmp_path)[1] is not None  # the 3rd: denied
    answer(sample("01_BeforeAgent"), tmp_path)  # no turn id in Gemini: BeforeAgent is the turn's start
    assert answer(sample("02_BeforeTool"), tmp_path)[1] is None


def test_the_pgid_line_and_the_description_are_volatile(tmp_path: Path) -> None:
    """The same command with a new description, whose output differs only by its process group id, is the same
    call with the same result; a real change of output is progress."""
    answer(sample("01_BeforeAgent"), tmp_path)
    decided = []
    for number, output in enumerate(["hi", "hi", "hi", "ho"]):
        tool_input = {"command": "echo hi", "description": f"Print hi, take {number}"}
        content = f"<untrusted_context>\nOutput: {output}\nProcess Group PGID: {1000 + number}\n</untrusted_context>"
        denied = answer(sample("02_BeforeTool", tool_input=tool_input), tmp_path)[1] is not None
        decided.append(denied)
        if not denied:
            response = {"llmContent": content, "returnDisplay": output}
            answer(sample("03_AfterTool", tool_input=tool_input, tool_response=response), tmp_path)
    assert decided == [False, False, True, True]
    state = (tmp_path / ".local/state/repeat-hooks/hooks.sqlite3").read_bytes()
    assert b"echo hi" not in state and b"PGID" not in state and b"untrusted_context" not in state  # digests only


def test_reads_change_nothing_and_writes_do(tmp_path: Path) -> None:
    def session(between: str, tool_input: dict[str, Any]) -> list[bool]:
        home = tmp_path / between
        answer(sample("01_BeforeAgent"), home)
        decided = []
        for number in range(3):
            decided.append(answer(sample("02_BeforeTool"), home)[1] is not None)
            answer(sample("03_AfterTool"), home)
            changed = {key: f"{value}{number}" if key == "content" else value for key, value in tool_input.items()}
            other = sample("02_BeforeTool", tool_name=between, tool_input=changed)
            answer(other, home)
            answer({**other, "hook_event_name": "AfterTool", "tool_response": {"llmContent": "x = 1\n"}}, home)
        return decided

    assert session("read_file", {"file_path": "/work/app.py"}) == [False, False, True]
    assert session("write_file", {"file_path": "/work/app.py", "content": "x = 1\n"}) == [False, False, False]


def test_a_failing_command_is_retried_once_then_refused_with_its_own_text(tmp_path: Path) -> None:
    answer(sample("01_BeforeAgent"), tmp_path)
    failed = {"llmContent": "Output: (empty)\nExit Code: 2\nProcess Group PGID: 7", "error": None}
    decided = []
    for _ in range(3):
        decided.append(answer(sample("02_BeforeTool"), tmp_path)[1])
        if decided[-1] is None:
            answer(sample("03_AfterTool", tool_response=failed), tmp_path)
    assert decided[:2] == [None, None]
    assert (decided[2] or {})["reason"].startswith("Refused: run_shell_command failed the same way 2 times")


def test_parallel_hook_processes_count_exactly(tmp_path: Path) -> None:
    """Twelve hook processes at once for the same call (no call id: each counts): two are let through."""
    answer(sample("01_BeforeAgent"), tmp_path)
    with ThreadPoolExecutor(max_workers=12) as pool:
        answered = list(pool.map(lambda _: command(sample("02_BeforeTool"), tmp_path), range(12)))
    assert [code for code, _, _ in answered] == [0] * 12 and not any(err for _, _, err in answered)
    assert sum(output is None for _, output, _ in answered) == 2


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        (b"{not json", "the event on stdin is not JSON (Expecting property name enclosed in double quotes at char 1)"),
        (b"{}", "the hook event has no session_id"),
    ],
)
def test_an_unusable_event_fails_open_with_one_line(tmp_path: Path, stdin: bytes, said: str) -> None:
    assert answer(stdin, tmp_path) == (1, None, f"repeat-hooks hook gemini-cli: {said}; failing open\n")


def test_a_store_it_cannot_reach_fails_open_and_says_no_value(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    secret = sample("02_BeforeTool", tool_input={"command": "echo SECRET-VALUE"})
    code, output, said = answer(secret, tmp_path, REPEAT_HOOKS_STATE=str(blocker / "hooks.sqlite3"))
    assert (code, output) == (1, None) and said.count("\n") == 1 and "SECRET" not in said
    assert said.startswith("repeat-hooks hook gemini-cli: the state at ") and said.endswith("failing open\n")
