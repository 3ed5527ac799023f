"""The real Codex CLI (0.169.0, from npm: ``make node-clis``), headless (``codex exec --json``), with the hook
installed by ``repeat-hooks install codex`` in an isolated ``CODEX_HOME``, against a scripted Responses API on
loopback: how many times the tool really ran (each run appends to a file), what the model was handed (the server's
captured requests), how the run ended and its exit code. Codex lets no hook end a turn: once the model has ignored
the refusals, every later call of the turn is refused with the turn-over text, until the model answers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_codex import stop_of
from repeat_hooks_codex.testing import Home, Run, codex_cli, tool_outputs
from services import missing_service

from repeat_hooks import StopReason
from repeat_hooks.kit.fake_models import FakeResponsesAPI, Reply, call, install_hint
from repeat_hooks.kit.sandbox import resident_folder, served

PROMPT = "Keep the build green."
RUN = "echo run >> ran.txt && echo '3 passed'"
"""The test command: the same output every time, and a line in ``ran.txt`` each time it really runs."""
BLOCKED = "Command blocked by PreToolUse hook: "
REFUSED = BLOCKED + "Refused: you already called Bash with these exact arguments 2 times"
OVER = "This turn is over (ignored_refusals): do not call any more tools; answer with what you know."
ENDED = BLOCKED + "Refused: this turn has ended (ignored_refusals). Do not call any more tools"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """The hook installed, its calls answered by a resident server after the first (as a user's are)."""
    if not codex_cli().exists():
        missing_service(f"no Codex CLI at {codex_cli()}: {install_hint()}")
    with resident_folder() as sockets:
        installed = Home(tmp_path, resident=sockets)
        installed.install()
        yield installed


def shell(command: str) -> dict[str, Any]:
    return call("exec_command", {"cmd": command})


def scripted(
    home: Home, responses: Sequence[Reply], *, trusted: bool = False, **env: str
) -> tuple[Run, FakeResponsesAPI]:
    """Run the CLI on a model that answers ``responses`` in turn, then ``"Done."``."""

    def answer(request: dict[str, Any], step: int) -> Reply:
        return responses[step] if step < len(responses) else "Done."

    with FakeResponsesAPI(answer) as api:
        run = home.codex(api, PROMPT, env=env, trusted=trusted)
    return run, api


def runs(home: Home) -> int:
    ran = home.project / "ran.txt"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


def test_the_same_command_six_times_runs_twice_then_the_turn_is_over_for_every_call(home: Home) -> None:
    run, api = scripted(home, [[shell(RUN)] for _ in range(6)])
    assert runs(home) == 2
    seen = tool_outputs(api)
    assert len(seen) == 6 and all("Output:\n3 passed" in text for text in seen[:2])
    assert all(text.startswith(REFUSED) and OVER not in text for text in seen[2:4])
    assert seen[4].startswith(REFUSED) and OVER in seen[4]  # where Claude Code and Gemini CLI would end the run
    assert seen[5].startswith(ENDED)
    assert len(api.model_requests()) == 7  # each refused call still costs a model call: Codex ends no turn
    assert run.code == 0 and run.items("agent_message")[-1]["text"] == "Done."
    assert [line["type"] for line in run.lines][-1] == "turn.completed"
    stop = stop_of(run.thread_id, environ=home.env())
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


def test_the_tests_rerun_after_every_edit_are_never_refused(home: Home) -> None:
    """Codex 0.169 offers the model no file tool here: the edit is a shell command, and a shell command that
    succeeded may have changed anything, so the rerun runs."""
    responses: list[Reply] = []
    for number in range(3):
        responses += [[shell(f"printf 'x = {number}\\n' > app.py")], [shell(RUN)]]
    run, api = scripted(home, responses)
    assert runs(home) == 3
    seen = tool_outputs(api)
    assert len(seen) == 6 and not any(text.startswith(BLOCKED) for text in seen)
    assert run.code == 0 and stop_of(run.thread_id, environ=home.env()) is None


def test_parallel_calls_of_one_response_count_exactly(home: Home) -> None:
    """Three same calls a response, whose hook processes Codex runs at once, in two responses: two run."""
    same = [shell(RUN)] * 3
    run, api = scripted(home, [same, same])
    assert runs(home) == 2
    seen = tool_outputs(api)
    assert sorted(text.startswith(REFUSED) for text in seen) == [False, False, True, True, True, True]
    assert run.code == 0


def test_a_failing_command_is_retried_once_then_refused(home: Home) -> None:
    """Codex hands the hook a command's output, not its exit code: the failure counts as the same result again."""
    failing = "echo run >> ran.txt && echo 'missing header' >&2 && exit 3"
    run, api = scripted(home, [[shell(failing)] for _ in range(4)])
    assert runs(home) == 2
    seen = tool_outputs(api)
    assert all("Process exited with code 3" in text for text in seen[:2])
    assert all(text.startswith(REFUSED) for text in seen[2:]) and len(seen) == 4
    assert run.code == 0


def test_with_each_hook_call_in_its_own_process_the_same_loop_ends_the_same_way(home: Home) -> None:
    """The other tests' hook calls are answered by the resident server (all but the first); with
    ``REPEAT_HOOKS_RESIDENT=off`` each runs in its own process, from the same state, to the same end."""
    run, api = scripted(home, [[shell(RUN)] for _ in range(6)], REPEAT_HOOKS_RESIDENT="off")
    assert runs(home) == 2
    seen = tool_outputs(api)
    assert [text.startswith(BLOCKED) for text in seen] == [False, False, True, True, True, True]
    assert seen[5].startswith(ENDED) and run.code == 0
    assert home.resident is not None and served(home.resident) == 0


def test_without_the_guard_every_repeat_runs(tmp_path: Path) -> None:
    """The control: nothing installed, Codex runs the same command 6 times (it has no detector of its own)."""
    if not codex_cli().exists():
        missing_service(f"no Codex CLI at {codex_cli()}: {install_hint()}")
    bare = Home(tmp_path)
    run, api = scripted(bare, [[shell(RUN)] for _ in range(6)])
    assert runs(bare) == 6 and run.code == 0
    assert not any(text.startswith(BLOCKED) for text in tool_outputs(api))


@pytest.mark.parametrize("resident", ["resident server", "own processes"])
def test_a_recorded_session_replays_as_the_guard_decided_it(home: Home, resident: str) -> None:
    """``record`` in the user's settings: each hook call writes what it decided; the replay of the folder pairs each
    result with its call and decides as the run did (Codex ends no turn: the guard refused to the end)."""
    folder, key = home.record()
    env = {} if resident == "resident server" else {"REPEAT_HOOKS_RESIDENT": "off"}
    scripted(home, [[shell(RUN)] for _ in range(6)], **env)
    assert runs(home) == 2
    figures = home.replayed(folder, key)
    assert {name: figures[name] for name in ("trajectories", "calls", "refused", "harmful", "unjudged")} == {
        "trajectories": 1, "calls": 6, "refused": 4, "harmful": 0, "unjudged": 0,
    }  # fmt: skip
    assert (figures["waste_prevented"], figures["turns_stopped"]) == (4, 1)
    scripted(home, [[shell(RUN)] * 3] * 2, REPEAT_HOOKS_RESIDENT="off")  # a second session: parallel hook processes
    figures = home.replayed(folder, key)
    assert (figures["trajectories"], figures["calls"], figures["refused"], figures["unjudged"]) == (2, 12, 8, 0)


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted project", "untrusted project"])
def test_the_projects_hooks_file_guards_a_trusted_project_only(tmp_path: Path, trusted: bool) -> None:
    """``install codex --project`` alone (no user hooks): Codex reads the project's ``.codex/hooks.json`` in a project
    the user trusts (``config.toml``'s ``trust_level``), and in no other, where every repeat runs."""
    if not codex_cli().exists():
        missing_service(f"no Codex CLI at {codex_cli()}: {install_hint()}")
    home = Home(tmp_path)
    assert home.repeat_hooks("install", "codex", "--project").returncode == 0
    assert not home.settings.exists() and (home.project / ".codex" / "hooks.json").exists()
    run, api = scripted(home, [[shell(RUN)] for _ in range(4)], trusted=trusted, REPEAT_HOOKS_RESIDENT="off")
    assert run.code == 0
    assert runs(home) == (2 if trusted else 4)
    assert sum(text.startswith(REFUSED) for text in tool_outputs(api)) == (2 if trusted else 0)
