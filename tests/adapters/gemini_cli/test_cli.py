"""The real Gemini CLI (0.61.0, from npm: ``make node-clis``), headless, with the hook installed by ``repeat-hooks
install gemini-cli`` in an isolated home, against a scripted model on loopback: how many times the tool really ran
(each run appends to a file), what the model was handed (the server's captured requests), how the run ended and its
exit code; and how the guard combines with Gemini CLI's own loop detection (on, as install leaves it)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_gemini_cli import stop_of
from repeat_hooks_gemini_cli.testing import Home, Run, function_responses, gemini_cli
from services import missing_service

from repeat_hooks import StopReason
from repeat_hooks.kit.fake_models import FakeGeminiAPI, Reply, call, install_hint
from repeat_hooks.kit.sandbox import resident_folder, served

PROMPT = "Keep the build green."
RUN = "echo run >> ran.txt && echo '3 passed'"
"""The test command: the same output every time, and a line in ``ran.txt`` each time it really runs."""
REFUSED = "Tool execution blocked: Refused: you already called run_shell_command with these exact arguments 2 times"
STOPPED = "Agent execution stopped by hook: repeat-hooks stopped the turn (ignored_refusals): I stopped: I kept calling"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """The hook installed, its calls answered by a resident server after the first (as a user's are)."""
    if not gemini_cli().exists():
        missing_service(f"no Gemini CLI at {gemini_cli()}: {install_hint()}")
    with resident_folder() as sockets:
        installed = Home(tmp_path, resident=sockets)
        installed.install()
        yield installed


def shell(command: str, description: str) -> dict[str, Any]:
    return call("run_shell_command", {"command": command, "description": description})


def scripted(home: Home, responses: Sequence[Reply], **env: str) -> tuple[Run, FakeGeminiAPI]:
    """Run the CLI on a model that answers ``responses`` in turn, then ``"Done."``."""

    def answer(request: dict[str, Any], step: int) -> Reply:
        return responses[step] if step < len(responses) else "Done."

    with FakeGeminiAPI(answer) as api:
        run = home.gemini(api, PROMPT, env=env)
    return run, api


def runs(home: Home) -> int:
    ran = home.project / "ran.txt"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


def test_the_same_command_six_times_runs_twice_and_the_run_ends_with_the_guards_message(home: Home) -> None:
    run, api = scripted(home, [[shell(RUN, f"Run the tests, take {n}")] for n in range(6)])
    assert runs(home) == 2
    seen = function_responses(api)
    assert [list(r) for r in seen] == [["output"], ["output"], ["error"], ["error"]]  # the 5th ended the run: unread
    assert all("Output: 3 passed" in r["output"] for r in seen[:2])
    assert all(r["error"].startswith(REFUSED) for r in seen[2:])
    assert len(api.model_requests()) == 5  # no 6th model call
    assert run.code == 0 and run.result["status"] == "success"
    assert f"run_shell_command: {STOPPED}" in run.stderr  # what the user reads
    stop = stop_of(run.session_id, environ=home.env())
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message in run.stderr
    assert "PGID" not in home.root.joinpath(".local/state/repeat-hooks/hooks.sqlite3").read_bytes().decode("latin-1")


def test_the_same_call_exactly_is_refused_first_then_geminis_own_detector_ends_the_run(home: Home) -> None:
    """Gemini CLI's detector (on by default) ends a run at the 5th identical call (``description`` too), before its
    ``BeforeTool``: the guard has refused the 3rd and 4th by then."""
    run, api = scripted(home, [[shell(RUN, "Run the tests")] for _ in range(6)])
    assert runs(home) == 2
    assert [list(r) for r in function_responses(api)] == [["output"], ["output"], ["error"], ["error"]]
    assert [line["message"] for line in run.of_type("error")] == ["Loop detected, stopping execution"]
    assert run.code == 0 and STOPPED not in run.stderr
    assert stop_of(run.session_id, environ=home.env()) is None  # Gemini CLI stopped it, not the guard


def test_the_tests_rerun_after_every_edit_are_never_refused(home: Home) -> None:
    responses: list[Reply] = []
    for number in range(3):
        responses.append(
            [call("write_file", {"file_path": str(home.project / "app.py"), "content": f"x = {number}\n"})]
        )
        responses.append([shell(RUN, "Run the tests")])
    run, api = scripted(home, responses)
    assert runs(home) == 3  # the same output each time: each write_file before it is the change
    assert [list(r) for r in function_responses(api)] == [["output"]] * 6
    assert run.code == 0 and "stopped" not in run.stderr and not run.of_type("error")


def test_parallel_calls_of_one_response_count_exactly(home: Home) -> None:
    """Three same calls a response, whose hook processes Gemini CLI runs at once, in two responses: two run."""
    same = [shell(RUN, f"Run the tests ({n})") for n in range(3)]
    run, api = scripted(home, [same, same])
    assert runs(home) == 2
    assert sorted(next(iter(r)) for r in function_responses(api)) == ["error"] * 4 + ["output"] * 2
    assert run.code == 0 and run.result["status"] == "success"


def test_a_failing_command_is_retried_once_then_refused(home: Home) -> None:
    failing = "echo run >> ran.txt && echo 'missing header' >&2 && exit 3"
    run, api = scripted(home, [[shell(failing, f"Build, take {n}")] for n in range(4)])
    assert runs(home) == 2
    seen = function_responses(api)
    assert all("Exit Code: 3" in r["output"] for r in seen[:2])
    refused = "Tool execution blocked: Refused: run_shell_command failed the same way 2 times with these arguments"
    assert [r.get("error", "")[: len(refused)] for r in seen[2:]] == [refused] * 2
    assert run.code == 0


def test_with_each_hook_call_in_its_own_process_the_same_loop_ends_the_same_way(home: Home) -> None:
    """The other tests' hook calls are answered by the resident server (all but the first); with
    ``REPEAT_HOOKS_RESIDENT=off`` each runs in its own process, from the same state, to the same end."""
    run, api = scripted(home, [[shell(RUN, f"Run the tests, take {n}")] for n in range(6)], REPEAT_HOOKS_RESIDENT="off")
    assert runs(home) == 2
    assert [list(r) for r in function_responses(api)] == [["output"], ["output"], ["error"], ["error"]]
    assert run.code == 0 and f"run_shell_command: {STOPPED}" in run.stderr
    assert home.resident is not None and served(home.resident) == 0


def test_without_the_guard_geminis_own_detector_misses_a_loop_whose_description_changes(tmp_path: Path) -> None:
    """The control: nothing installed, the same command with a new description 6 times all run (Gemini CLI's
    detector hashes the description too), and with the description fixed its detector lets 4 run."""
    if not gemini_cli().exists():
        missing_service(f"no Gemini CLI at {gemini_cli()}: {install_hint()}")
    bare = Home(tmp_path / "changing")
    run, _ = scripted(bare, [[shell(RUN, f"Run the tests, take {n}")] for n in range(6)])
    assert runs(bare) == 6 and run.code == 0 and not run.of_type("error")
    fixed = Home(tmp_path / "fixed")
    run, _ = scripted(fixed, [[shell(RUN, "Run the tests")] for _ in range(6)])
    assert runs(fixed) == 4 and [line["message"] for line in run.of_type("error")] == [
        "Loop detected, stopping execution"
    ]


@pytest.mark.parametrize("resident", ["resident server", "own processes"])
def test_a_recorded_session_replays_as_the_guard_decided_it(home: Home, resident: str) -> None:
    """``record`` in the user's settings: each hook call writes what it decided, with no call id to name a call by
    (Gemini CLI gives none); the replay of the folder pairs each result with its call and decides as the run did."""
    folder, key = home.record()
    env = {} if resident == "resident server" else {"REPEAT_HOOKS_RESIDENT": "off"}
    scripted(home, [[shell(RUN, f"Run the tests, take {n}")] for n in range(6)], **env)
    assert runs(home) == 2
    figures = home.replayed(folder, key)
    assert {name: figures[name] for name in ("trajectories", "calls", "refused", "harmful", "unjudged")} == {
        "trajectories": 1, "calls": 5, "refused": 3, "harmful": 0, "unjudged": 0,
    }  # fmt: skip
    assert (figures["waste_prevented"], figures["turns_stopped"]) == (3, 1)
    same = [shell(RUN, f"Run the tests ({n})") for n in range(3)]
    scripted(home, [same, same], REPEAT_HOOKS_RESIDENT="off")  # a second session: parallel hook processes
    figures = home.replayed(folder, key)
    assert (figures["trajectories"], figures["calls"], figures["refused"], figures["unjudged"]) == (2, 11, 7, 0)
