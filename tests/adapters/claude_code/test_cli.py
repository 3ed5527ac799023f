"""The real Claude Code CLI (2.1.332, bundled with the Claude Agent SDK), headless, with the hook installed by
``repeat-hooks install claude-code`` in an isolated home, against a scripted model on loopback: how many times the
tool really ran (each run appends to a file), what the model was handed (the server's captured requests), how the
run ended and its exit code."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_claude_code import stop_of, trajectory
from repeat_hooks_claude_code.testing import LOOP_HOOK, Home, Run, claude_cli, tool_results

from repeat_hooks import Policy, StopReason
from repeat_hooks.kit.fake_messages import FakeMessagesAPI, Reply, steps, tool_use
from repeat_hooks.kit.sandbox import resident_folder, served
from repeat_hooks.offline.replay import UNRECORDED, RecordedCall, Trajectory, replay

pytestmark = pytest.mark.skipif(not claude_cli().exists(), reason="no Claude Code CLI (pip install claude-agent-sdk)")

PROMPT = "Keep the build green."
RUN = "echo run >> ran.txt && echo '3 passed'"
"""The test command: the same output every time, and a line in ``ran.txt`` each time it really runs."""
REFUSED = "PreToolUse:Bash hook error: Refused: you already called Bash with these exact arguments 2 times"


def bash(command: str, description: str) -> dict[str, Any]:
    return tool_use("Bash", {"command": command, "description": description})


def scripted(home: Home, responses: Sequence[Reply], **env: str) -> tuple[Run, FakeMessagesAPI]:
    """Run the CLI on a model that answers ``responses`` in turn, then ``"Done."``."""

    def answer(request: dict[str, Any]) -> Reply:
        step = steps(request, PROMPT)
        return responses[step] if step < len(responses) else "Done."

    with FakeMessagesAPI(answer) as api:
        run = home.claude(api, PROMPT, env=env)
    return run, api


def runs(home: Home) -> int:
    ran = home.project / "ran.txt"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """The hook installed, its calls answered by a resident server after the first (as a user's are)."""
    with resident_folder() as sockets:
        installed = Home(tmp_path, resident=sockets)
        installed.install()
        yield installed


@pytest.fixture(params=["resident server", "own processes"])
def resident_env(request: pytest.FixtureRequest, home: Home) -> Iterator[dict[str, str]]:
    """Every hook call after the first answered by the resident server (the default, as in the other tests), or each
    in its own process (``REPEAT_HOOKS_RESIDENT=off``)."""
    assert home.resident is not None
    if request.param == "resident server":
        yield {}
        assert served(home.resident) > 0  # it did answer calls of the run
    else:
        yield {"REPEAT_HOOKS_RESIDENT": "off"}
        assert served(home.resident) == 0


def test_the_same_command_six_times_runs_twice_and_the_run_ends_with_the_guards_message(
    home: Home, resident_env: dict[str, str]
) -> None:
    run, api = scripted(home, [[bash(RUN, f"Run the tests, take {n}")] for n in range(6)], **resident_env)
    assert runs(home) == 2
    seen = tool_results(api)
    assert [error for error, _ in seen] == [False, False, True, True]  # the 5th's refusal ended the run: unread
    assert all(text.startswith("3 passed") for _, text in seen[:2])
    assert all(text.startswith(REFUSED) for _, text in seen[2:])
    assert len(api.model_requests()) == 5  # no 6th model call
    assert (run.code, run.result["terminal_reason"], run.result["is_error"]) == (0, "hook_stopped", False)
    stop = stop_of(run.result, environ=home.env())
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert run.system_messages == [
        f"PreToolUse:Bash says: repeat-hooks stopped the turn (ignored_refusals): {stop.message}"
    ]
    (transcript,) = (home.config / "projects").glob("*/*.jsonl")
    calls = [
        call for response in trajectory(json.loads(line) for line in transcript.open()).turns[0] for call in response
    ]
    assert [call.result for call in calls] == [{"stdout": "3 passed", "stderr": ""}] * 2 + [UNRECORDED] * 3  # refused


def test_the_tests_rerun_after_every_edit_are_never_refused(home: Home) -> None:
    responses: list[Reply] = []
    for number in range(3):
        responses.append([tool_use("Write", {"file_path": str(home.project / "app.py"), "content": f"x = {number}\n"})])
        responses.append([bash(RUN, "Run the tests")])
    run, api = scripted(home, responses)
    assert runs(home) == 3  # the same output each time: each Write before it is the change
    assert [error for error, _ in tool_results(api)] == [False] * 6
    assert (run.code, run.result["terminal_reason"], run.result["result"]) == (0, "completed", "Done.")


def test_parallel_calls_of_one_response_count_exactly(home: Home) -> None:
    """Three same calls a response, whose hook processes Claude Code runs at once, in two responses: two run."""
    same = [bash(RUN, f"Run the tests ({n})") for n in range(3)]
    run, api = scripted(home, [same, same])
    assert runs(home) == 2
    assert sorted(error for error, _ in tool_results(api)) == [False, False, True, True, True, True]
    assert (run.code, run.result["terminal_reason"], run.result["result"]) == (0, "completed", "Done.")


def test_a_failing_command_is_retried_once_then_refused(home: Home) -> None:
    failing = "echo run >> ran.txt && echo 'missing header' >&2 && exit 3"
    run, api = scripted(home, [[bash(failing, f"Build, take {n}")] for n in range(4)])
    assert runs(home) == 2
    seen = tool_results(api)
    assert [error for error, _ in seen] == [True] * 4
    assert all("Exit code 3" in text for _, text in seen[:2])
    assert all(
        text.startswith("PreToolUse:Bash hook error: Refused: Bash failed the same way 2 times") for _, text in seen[2:]
    )
    assert (run.code, run.result["terminal_reason"]) == (0, "completed")


def test_a_store_it_cannot_reach_lets_every_call_run(home: Home, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    run, api = scripted(home, [[bash(RUN, "Run the tests")]] * 4, REPEAT_HOOKS_STATE=str(blocker / "hooks.sqlite3"))
    assert runs(home) == 4
    assert [error for error, _ in tool_results(api)] == [False] * 4
    assert (run.code, run.result["terminal_reason"]) == (0, "completed")
    transcript = "".join(path.read_text() for path in (home.config / "projects").glob("*/*.jsonl"))
    said = "Failed with non-blocking status code: repeat-hooks hook claude-code: the state at "
    assert transcript.count(said) >= 4  # exit code 1: Claude Code keeps the line (the transcript view shows it)


def test_a_recorded_session_replays_as_the_guard_decided_it(home: Home, resident_env: dict[str, str]) -> None:
    """Every hook call writes what it decided (the resident server, or each call's own process: a writer each); the
    replay of the folder pairs each result with its call and decides as the live run did: nothing of a value."""
    folder, key = home.record()
    run, _ = scripted(home, [[bash(RUN, f"Run the tests, take {n}")] for n in range(6)], **resident_env)
    assert runs(home) == 2 and run.result["terminal_reason"] == "hook_stopped"
    figures = home.replayed(folder, key)
    assert {name: figures[name] for name in ("trajectories", "calls", "refused", "harmful", "unjudged")} == {
        "trajectories": 1, "calls": 5, "refused": 3, "harmful": 0, "unjudged": 0,
    }  # fmt: skip
    assert (figures["waste_prevented"], figures["turns_stopped"]) == (3, 1)
    written = "".join(path.read_text() for path in folder.glob("repeat-hooks*.jsonl"))
    assert run.result["session_id"] in written and "Bash" in written
    assert "passed" not in written and "ran.txt" not in written and "take" not in written  # digests only


def test_parallel_calls_recorded_by_processes_of_their_own_pair_with_their_results(home: Home) -> None:
    """Three same calls a response, their hook processes at once and each its own writer: each result reaches its
    call in the replay (none unjudged), which refuses what the guard refused."""
    folder, key = home.record()
    same = [bash(RUN, f"Run the tests ({n})") for n in range(3)]
    scripted(home, [same, same], REPEAT_HOOKS_RESIDENT="off")
    assert runs(home) == 2
    figures = home.replayed(folder, key)
    # the figures of the same calls as a full trajectory: the first response's third call, refused before the model
    # saw any result of it, counts as harmful there too
    full = Trajectory("s", [[[RecordedCall("Bash", {"command": RUN}, "3 passed") for _ in range(3)]] * 2])
    expected = replay(Policy(), [full])
    assert (figures["calls"], figures["refused"], figures["harmful"], figures["unjudged"]) == (
        expected.calls, expected.refused, expected.harmful, 0,
    ) == (6, 4, 1, 0)  # fmt: skip


def test_a_recording_it_cannot_write_is_said_and_the_guard_goes_on(home: Home) -> None:
    blocker = home.root / "not-a-folder"
    blocker.write_text("")
    home.user_settings.parent.mkdir(parents=True, exist_ok=True)
    home.user_settings.write_text(json.dumps({"record": str(blocker / "recordings")}))
    run, _ = scripted(home, [[bash(RUN, f"Run the tests, take {n}")] for n in range(6)], REPEAT_HOOKS_RESIDENT="off")
    assert runs(home) == 2 and run.result["terminal_reason"] == "hook_stopped"  # guarded all the same
    done = home.repeat_hooks("hook", "claude-code", event=json.dumps({
        "hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt_id": "p", "prompt": "go",
    }), REPEAT_HOOKS_RESIDENT="off")  # fmt: skip
    assert done.returncode == 0
    assert done.stderr.startswith("repeat-hooks hook claude-code: recording: cannot write ")
    assert done.stderr.endswith("; the guard goes on\n") and done.stderr.count("\n") == 1


def test_a_session_run_without_the_guard_replays_from_its_transcript(tmp_path: Path) -> None:
    """A user's own session, guard off: its transcript read as the hook sees calls (no ``description``, ``Read``
    read-only), and ``repeat-hooks replay`` says what the default policy would have refused."""
    home = Home(tmp_path)  # nothing installed
    response = [bash(RUN, "Run the tests"), tool_use("Read", {"file_path": "ran.txt"})]
    run, _ = scripted(
        home,
        [
            [{**response[0], "input": {**response[0]["input"], "description": f"Take {n}"}}, response[1]]
            for n in range(6)
        ],
    )
    assert runs(home) == 6 and run.result["terminal_reason"] == "completed"
    (transcript,) = (home.config / "projects").glob("*/*.jsonl")
    session = trajectory(json.loads(line) for line in transcript.read_text().splitlines())
    assert session.id == run.result["session_id"] and len(session.turns) == 1 and len(session.turns[0]) == 6
    for number, (test, read) in enumerate(session.turns[0], 1):
        assert (test.name, test.arguments, test.result, test.ok) == (
            "Bash",
            {"command": RUN},
            {"stdout": "3 passed", "stderr": ""},
            True,
        )
        assert (read.name, read.read_only, read.result["file"]["content"]) == ("Read", True, "run\n" * number)
    replayed = home.repeat_hooks("replay", str(transcript), "--json")
    assert replayed.returncode == 0, replayed.stderr
    (figures,) = json.loads(replayed.stdout)
    assert (figures["trajectories"], figures["calls"], figures["refused"], figures["harmful"]) == (1, 12, 4, 0)
    assert (figures["waste_prevented"], figures["loops_caught"], figures["turns_stopped"]) == (4, 1, 1)


def test_a_tool_the_agent_lacks_is_refused_like_any_failing_call_and_the_run_ends(home: Home) -> None:
    """Claude Code answers a call of a tool it does not have itself, with no ``PreToolUse``: the guard decides it at
    the batch's end, so the model reads the refusal after Claude Code's error from the third try on, and the run ends
    once it has ignored 3 refusals."""
    run, api = scripted(home, [[tool_use("mcp__kit__hex", {"query": "255"})]] * 8)
    seen = tool_results(api)
    assert len(api.model_requests()) == 5  # not 9
    assert all(error and text.startswith("<tool_use_error>Error: No such tool available") for error, text in seen)
    notes = ["PostToolBatch hook additional context: Refused: mcp__kit__hex failed the same way 2 times" in text
             for _, text in seen]  # fmt: skip
    assert notes == [False, False, True, True]  # the 5th call's error and refusal ended the run: never read
    assert (run.code, run.result["terminal_reason"]) == (0, "hook_stopped")
    stop = stop_of(run.result, environ=home.env())
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert run.system_messages == [
        f"PostToolBatch says: repeat-hooks stopped the turn (ignored_refusals): {stop.message}"
    ]


def test_a_users_loop_answered_the_same_round_after_round_is_ended(home: Home) -> None:
    """A ``Stop`` hook of the user's runs the agent again at each answer (5 rounds): with ``max_same_answers: 3`` the
    guard's ``Stop`` hook ends the loop at the third same answer, whatever the user's hook answers."""
    script = home.root / "loop.py"
    script.write_text(LOOP_HOOK)
    settings = json.loads(home.settings.read_text())
    loop = {"hooks": [{"type": "command", "command": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"}]}
    settings["hooks"]["Stop"].insert(0, loop)  # the user's own, before the guard's
    home.settings.write_text(json.dumps(settings))
    home.user_settings.parent.mkdir(parents=True, exist_ok=True)
    home.user_settings.write_text(json.dumps({"max_same_answers": 3}))
    with FakeMessagesAPI(lambda request: "FR-7731 is in transit.") as api:
        run = home.claude(api, PROMPT, env={"KIT_ROUNDS": "5", "KIT_ROUNDS_FILE": str(home.root / "rounds")})
    assert len(api.model_requests()) == 3  # not 5
    assert (run.code, run.result["terminal_reason"], run.result["result"]) == (0, "stop_hook_prevented", "")
    stop = stop_of(run.result, environ=home.env())
    assert stop is not None and stop.reason is StopReason.REPEATED_ANSWER
    assert run.system_messages == [f"Stop says: repeat-hooks stopped the turn (repeated_answer): {stop.message}"]
