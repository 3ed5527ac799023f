"""The hook command on Codex's events, as the CLI 0.169.0 sends them (``samples/``: a real run's payloads), one
event a call: what it allows and denies, how it says the turn is over (Codex lets no hook end one), how its state
counts across processes, how it fails."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_codex import hook, stop_of

from repeat_hooks import StopReason

SAMPLES = Path(__file__).parent / "samples"
SESSION = "01a23341-6903-7b91-ba04-f74cda2ebd59"
REFUSED = "Refused: you already called Bash with these exact arguments 2 times"


def sample(name: str, **changed: Any) -> dict[str, Any]:
    """A real payload (``samples/<name>.stdin.json``), with ``changed`` fields."""
    return {**json.loads((SAMPLES / f"{name}.stdin.json").read_text()), **changed}


def answer(event: dict[str, Any] | bytes, home: Path, **env: str) -> tuple[int, dict[str, Any] | None, str]:
    """The hook's exit code, stdout (parsed) and stderr for one event, in this process, with ``HOME`` at ``home``."""
    raw = event if isinstance(event, bytes) else json.dumps(event).encode()
    out, err = io.StringIO(), io.StringIO()
    code = hook(stdin=io.BytesIO(raw), stdout=out, stderr=err, environ={"HOME": str(home), **env})
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else None, err.getvalue()


def reason(output: dict[str, Any] | None) -> str | None:
    """A deny's text (``None``: the call goes on); asserts the deny is the one shape Codex takes."""
    if output is None:
        return None
    specific = output["hookSpecificOutput"]
    assert set(output) == {"hookSpecificOutput"} and specific["permissionDecision"] == "deny"  # never `continue`
    return str(specific["permissionDecisionReason"])


def model_request(home: Path, turn: str | None = None) -> tuple[int, dict[str, Any] | None, str]:
    event = {key: value for key, value in sample("01_UserPromptSubmit").items() if key != "prompt"}
    return answer({**event, "hook_event_name": "PreModelRequest", **({"turn_id": turn} if turn else {})}, home)


def test_the_real_runs_payloads_refuse_the_third_echo_and_say_the_turn_is_over_from_the_fifth(tmp_path: Path) -> None:
    assert answer(sample("00_SessionStart"), tmp_path)[:2] == (0, None)
    assert answer(sample("01_UserPromptSubmit"), tmp_path)[:2] == (0, None)
    said = []
    for number, name in enumerate(
        ["02_PreToolUse", "04_PreToolUse", "06_PreToolUse", "07_PreToolUse", "08_PreToolUse", "09_PreToolUse"]
    ):
        assert model_request(tmp_path)[:2] == (0, None)  # at a stop too: Codex rejects continue:false there
        said.append(reason(answer(sample(name), tmp_path)[1]))
        if said[-1] is None:
            answer(sample(f"{number * 2 + 3:02d}_PostToolUse"), tmp_path)
    over = "This turn is over (ignored_refusals): do not call any more tools; answer with what you know"  # Codex: ". "
    assert said[:2] == [None, None]
    assert all(text is not None and text.startswith(REFUSED) and over not in text for text in said[2:4])
    assert said[4] is not None and said[4].startswith(REFUSED) and said[4].endswith(over)
    assert (
        said[5]
        == "Refused: this turn has ended (ignored_refusals). Do not call any more tools: answer with what you know"
    )
    stop = stop_of({"type": "thread.started", "thread_id": SESSION}, environ={"HOME": str(tmp_path)})
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert answer(sample("10_Stop"), tmp_path)[:2] == (0, None)


def test_a_new_turn_id_starts_a_fresh_turn(tmp_path: Path) -> None:
    answer(sample("01_UserPromptSubmit"), tmp_path)
    for number in range(2):
        answer(sample("02_PreToolUse", tool_use_id=f"call_{number}"), tmp_path)
        answer(sample("03_PostToolUse", tool_use_id=f"call_{number}"), tmp_path)
    assert reason(answer(sample("02_PreToolUse", tool_use_id="call_3"), tmp_path)[1]) is not None
    turn = "01a23341-9999-7813-9c21-1ede6484b96c"
    answer(sample("01_UserPromptSubmit", turn_id=turn), tmp_path)
    assert reason(answer(sample("02_PreToolUse", tool_use_id="call_4", turn_id=turn), tmp_path)[1]) is None


def test_a_redelivered_event_counts_once(tmp_path: Path) -> None:
    answer(sample("01_UserPromptSubmit"), tmp_path)
    again = [reason(answer(sample("02_PreToolUse"), tmp_path)[1]) for _ in range(3)]  # one tool_use_id
    answer(sample("03_PostToolUse"), tmp_path)
    assert again == [None, None, None]
    assert reason(answer(sample("04_PreToolUse"), tmp_path)[1]) is None
    answer(sample("05_PostToolUse"), tmp_path)
    assert reason(answer(sample("06_PreToolUse"), tmp_path)[1]) is not None


def test_a_command_whose_output_changes_is_never_refused(tmp_path: Path) -> None:
    answer(sample("01_UserPromptSubmit"), tmp_path)
    for number in range(6):
        ident = f"call_{number}"
        assert reason(answer(sample("02_PreToolUse", tool_use_id=ident), tmp_path)[1]) is None
        answer(sample("03_PostToolUse", tool_use_id=ident, tool_response=f"{number} passed\n"), tmp_path)


def test_parallel_hook_processes_count_exactly(tmp_path: Path) -> None:
    """Twelve hook processes at once for the same call with twelve call ids: two are let through."""
    answer(sample("01_UserPromptSubmit"), tmp_path)

    def run(number: int) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "repeat-hooks"), "hook", "codex"],
            input=json.dumps(sample("02_PreToolUse", tool_use_id=f"call_{number:02d}")).encode(),
            capture_output=True,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "REPEAT_HOOKS_RESIDENT": "off"},
            timeout=60,
            check=False,
        )

    with ThreadPoolExecutor(max_workers=12) as pool:
        done = list(pool.map(run, range(12)))
    assert [d.returncode for d in done] == [0] * 12 and not any(d.stderr for d in done)
    assert sum(not d.stdout.strip() for d in done) == 2


@pytest.mark.parametrize(
    ("stdin", "said"),
    [(b"[1]", "the event on stdin is a JSON array, not an object"), (b"{}", "the hook event has no session_id")],
)
def test_an_unusable_event_fails_open_with_one_line(tmp_path: Path, stdin: bytes, said: str) -> None:
    assert answer(stdin, tmp_path) == (1, None, f"repeat-hooks hook codex: {said}; failing open\n")


def test_a_store_it_cannot_reach_fails_open_or_closed(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    state = str(blocker / "hooks.sqlite3")
    secret = sample("02_PreToolUse", tool_input={"command": "echo SECRET-VALUE"})
    code, output, said = answer(secret, tmp_path, REPEAT_HOOKS_STATE=state)
    assert (code, output) == (1, None) and said.count("\n") == 1 and "SECRET" not in said
    settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"fail": "closed"}')
    code, output, said = answer(secret, tmp_path, REPEAT_HOOKS_STATE=state)
    assert code == 0 and str(reason(output)).startswith("Refused: the loop guard could not read this turn's calls")
    assert said.endswith("failing closed\n")
