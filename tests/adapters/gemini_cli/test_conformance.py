"""The conformance kit on the real Gemini CLI (0.61.0, from npm: ``make node-clis``), headless, with the hook command
installed: every scenario of ``repeat_hooks.kit.conformance`` it can express (``UNSUPPORTED``: approvals, and a tool the
CLI lacks, each with a test of the CLI's own behaviour here), the kit tools an MCP server in this process, the model
scripted on loopback, rounds Gemini CLI's own loop (an ``AfterAgent`` hook that blocks), branches its sub-agents
(``invoke_agent``).

Each ``gemini -p`` takes 3-9 s, nearly all of it waiting (node, the hook processes, the loopback servers): the
scenarios run ``WORKERS`` at a time in threads of this process (``outcomes``), each test checking its own.

``BUGS``: what the guard gets wrong on Gemini CLI's loop, each a strict xfail until the adapter does it right."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import repeat_hooks_claude_code
import repeat_hooks_gemini_cli
from repeat_hooks_gemini_cli.testing import RETRIED_NOTE, STOP_LAG, UNSUPPORTED, Driver, Home, chat_log, gemini_cli

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
    scenario,
)
from repeat_hooks.kit.fake_models import install_hint
from repeat_hooks.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.skipif(not gemini_cli().exists(), reason=f"no Gemini CLI: {install_hint()}")

WORKERS = 3
"""Scenarios run at once."""

_STOPPED_AT_A_REFUSAL = (
    "the refusal that reaches max_refusals is answered deny + continue: false (calls.denied); Gemini CLI 0.61.0 reads "
    "continue: false first and hands the call 'Agent execution stopped by hook: <stopReason>' instead of the refusal "
    "(the chat log, which a resumed session hands the model, holds 2 refusals, not 3). It should deny with the refusal "
    "alone and end the run at the BeforeModel that follows (fired before the next model call: no extra call, the "
    "stop already in the turn's state); but a stop at BeforeModel prints nothing in stream-json mode (measured), where "
    "the user reads this one on stderr: a script would not see its run was ended. Kept until Gemini CLI shows it"
)
BUGS = {
    "seed_004_story": _STOPPED_AT_A_REFUSAL,
    "a_cycle_going_on_after_its_refusal_is_refused_throughout": _STOPPED_AT_A_REFUSAL,
    "a_stop_ends_the_loop_around_the_agent": _STOPPED_AT_A_REFUSAL,
    "the_same_answer_round_after_round_ends_the_loop": (
        "max_same_answers is left out of the hook command's policy (kit/command.py NO_FEED: 'a hook command sees no "
        "text answer before its turn is over'), yet Gemini CLI's AfterAgent event carries each round's answer "
        "(prompt_response) when its loop runs the agent again: the guard takes no AfterAgent event, and the loop runs "
        "all 5 rounds with no stop"
    ),
    "isolated_branches_count_apart": (
        "Gemini CLI 0.61.0 fires a sub-agent's BeforeTool/AfterTool/BeforeModel with its parent's session_id and no "
        "agent id, so the hook command keys all three branches to one state: the 3rd branch's first call is refused "
        "('you already called'), which that sub-agent never did, and the shared turn then ends the whole run with "
        "ignored_refusals (measured: 2 runs, not 3; 7 model calls, not 6). It should count each sub-agent apart"
    ),
}
"""Scenarios the guard gets wrong on Gemini CLI's loop: what it does, and what it should do."""

RUN = [item for item in SCENARIOS if item.name not in UNSUPPORTED]


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[str, Future[tuple[ToolBox, list[TurnOutcome]]]]]:
    """Every scenario of ``RUN`` started on the driver, ``WORKERS`` at a time: its box and outcomes, by name."""

    def run(item: Scenario) -> tuple[ToolBox, list[TurnOutcome]]:
        box = ToolBox(item)
        return box, Driver().run(item, box)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="gemini-kit") as pool:
        yield {item.name: pool.submit(run, item) for item in RUN}


def _param(item: Scenario) -> Any:
    if item.name in BUGS:
        return pytest.param(item, marks=pytest.mark.xfail(strict=True, reason=BUGS[item.name]))
    return item


@pytest.mark.parametrize("scenario", [_param(item) for item in RUN], ids=lambda item: item.name)
def test_conformance(scenario: Scenario, outcomes: dict[str, Future[tuple[ToolBox, list[TurnOutcome]]]]) -> None:
    box, seen = outcomes[scenario.name].result()

    check(scenario, box, seen, stop_lag=STOP_LAG)


def test_a_call_that_needs_confirmation_is_not_offered_headless() -> None:
    """``UNSUPPORTED``'s approvals: the kit server untrusted, ``--approval-mode default``: ``gemini -p`` has no one to
    ask: the tool is not in the model's declarations, and its call is answered as a tool the CLI does not have."""
    item = scenario("approved_calls_run_once_and_keep_counts")
    box = ToolBox(item)
    driver = Driver(trust=False, approval_mode="default")

    first, _ = driver.run(item, box)

    assert driver.api is not None
    declared = {
        declaration["name"]
        for request in driver.api.model_requests()
        for tool in request.get("tools") or []
        for declaration in tool.get("functionDeclarations") or []
    }
    assert "mcp_kit_refund_order" not in declared and "invoke_agent" in declared
    assert first.seen == [first.seen[0]] * 3 and first.seen[0].startswith('Tool "mcp_kit_refund_order" not found')
    assert box.runs == {"refund_order": 0} and box.asked == {"refund_order": 0}


def test_a_call_of_a_tool_the_cli_lacks_never_reaches_the_hook() -> None:
    """``UNSUPPORTED``'s tool the agent lacks: Gemini CLI answers each of the 8 calls itself, and the guard, hearing of
    none, refuses none and never stops the turn: the model is called after every one."""
    item = scenario("a_tool_the_agent_lacks_fails_like_any_other")
    box = ToolBox(item)

    (outcome,) = Driver().run(item, box)

    assert len(outcome.seen) == 8 and all(text.startswith('Tool "mcp_kit_hex" not found') for text in outcome.seen)
    assert (outcome.stop, outcome.model_calls, outcome.final) == (None, 9, "done")


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, TurnOutcome, ToolBox]:
    """``RETRIED`` served by two processes of the driver, one state file: the first dies right after placing the
    order (the CLI with it), the second resumes the session (``--resume``) with the same prompt."""
    folder = tmp_path_factory.mktemp("retried")
    modules = (repeat_hooks_gemini_cli, repeat_hooks_claude_code, repeat_hooks)
    path = [str(Path(module.__file__).parents[1]) for module in modules]  # type: ignore[arg-type]
    code, outcome, box = run_retried("repeat_hooks_gemini_cli.testing:Driver", RETRIED, folder, path=path)
    return folder, code, outcome, box


def test_a_retried_prompt_is_a_new_turn_of_the_same_session(retried: tuple[Path, int, TurnOutcome, ToolBox]) -> None:
    """``RETRIED_NOTE``: the first process died at the crash; the retry resumed its session, and the hook command, which
    starts a turn at every ``BeforeAgent`` (Gemini CLI names no turn), took the same prompt as a second turn."""
    folder, code, _, _ = retried
    session = str(uuid.uuid5(uuid.NAMESPACE_URL, f"repeat-hooks:{CONVERSATION}"))
    home = Home(folder / "home", settings={})
    prompts = [message for message in chat_log(home, session) if message.get("type") == "user"]
    asked = [message for message in prompts if RETRIED.turns[0].message in json.dumps(message.get("content"))]
    state = asyncio.run(SQLiteStore(folder / "states.db").load(session))

    assert code == CRASH_EXIT
    assert len(asked) == 2
    assert state is not None and state.turn.number == 2


@pytest.mark.xfail(strict=True, reason=f"{RETRIED_NOTE}: the crashed turn's order (its outcome unknown) is sent again")
def test_a_turn_retried_after_a_crash_in_another_process_runs_no_write_again(
    retried: tuple[Path, int, TurnOutcome, ToolBox],
) -> None:
    _, code, outcome, box = retried

    check_retried(RETRIED, code, outcome, box)
