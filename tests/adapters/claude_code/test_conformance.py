"""The conformance kit on the real Claude Code CLI (2.1.332, bundled with the Claude Agent SDK), headless, with the hook
command installed: every scenario of ``repeat_hooks.kit.conformance`` (``UNSUPPORTED``: none), the kit tools an MCP
server in this process, the model scripted on loopback, rounds Claude Code's own loop (a ``Stop`` hook that blocks); and
``RETRIED``, two processes on one SQLite state file, which Claude Code cannot serve as one turn (``RETRIED_NOTE``).

``BUGS``: what the guard gets wrong on Claude Code's loop, each a strict xfail until the adapter does it right."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import repeat_hooks_claude_code
from repeat_hooks_claude_code.testing import RETRIED_NOTE, STOP_LAG, UNSUPPORTED, Driver, claude_cli

import repeat_hooks
from repeat_hooks.kit.conformance import (
    CONVERSATION,
    CRASH_EXIT,
    RETRIED,
    SCENARIOS,
    Scenario,
    ToolBox,
    TurnOutcome,
    check,
    check_retried,
    run_retried,
)
from repeat_hooks.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.skipif(not claude_cli().exists(), reason="no Claude Code CLI (pip install claude-agent-sdk)")

BUGS: dict[str, str] = {}
"""Scenarios the guard gets wrong on Claude Code's loop: what it does, and what it should do."""


def _param(scenario: Scenario) -> Any:
    if scenario.name in BUGS:
        return pytest.param(scenario, marks=pytest.mark.xfail(strict=True, reason=BUGS[scenario.name]))
    return scenario


@pytest.mark.parametrize(
    "scenario", [_param(s) for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda scenario: scenario.name
)
def test_conformance(scenario: Scenario) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver().run(scenario, box), stop_lag=STOP_LAG)


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, TurnOutcome, ToolBox]:
    """``RETRIED`` served by two processes of the driver, one state file: the first dies right after placing the
    order (the CLI with it), the second resumes the session (``--resume``) with the same prompt."""
    folder = tmp_path_factory.mktemp("retried")
    path = [str(Path(module.__file__).parents[1]) for module in (repeat_hooks_claude_code, repeat_hooks)]  # type: ignore[arg-type]
    code, outcome, box = run_retried("repeat_hooks_claude_code.testing:Driver", RETRIED, folder, path=path)
    return folder, code, outcome, box


def test_a_retried_prompt_is_a_new_turn_of_the_same_session(retried: tuple[Path, int, TurnOutcome, ToolBox]) -> None:
    """``RETRIED_NOTE``: the first process died at the crash; the retry resumed its session, and Claude Code gave the
    same prompt a new ``prompt_id``, which the hook command took as a second turn."""
    folder, code, _, _ = retried
    session = str(uuid.uuid5(uuid.NAMESPACE_URL, f"repeat-hooks:{CONVERSATION}"))
    (transcript,) = (folder / "home" / ".claude" / "projects").glob(f"*/{session}.jsonl")
    entries = [json.loads(line) for line in transcript.read_text().splitlines() if line.strip()]
    prompts = [
        entry["promptId"]
        for entry in entries
        if entry.get("type") == "user" and RETRIED.turns[0].message in json.dumps(entry["message"]["content"])
    ]
    state = asyncio.run(SQLiteStore(folder / "states.db").load(session))

    assert code == CRASH_EXIT
    assert len(prompts) == 2 and prompts[0] != prompts[1]
    assert state is not None and (state.turn.number, state.turn.id) == (2, prompts[1])


@pytest.mark.xfail(strict=True, reason=f"{RETRIED_NOTE}: the crashed turn's order (its outcome unknown) is sent again")
def test_a_turn_retried_after_a_crash_in_another_process_runs_no_write_again(
    retried: tuple[Path, int, TurnOutcome, ToolBox],
) -> None:
    _, code, outcome, box = retried

    check_retried(RETRIED, code, outcome, box)
