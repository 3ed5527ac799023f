"""The core's conformance kit on pydantic-ai's real agent graph: every scenario the SDK can express, run
straight through and with every turn paused at a tool step and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
import repeat_hooks_pydantic_ai
from pydantic_ai.exceptions import UnexpectedModelBehavior
from repeat_hooks_pydantic_ai.testing import UNSUPPORTED, Driver

import repeat_hooks
from repeat_hooks import MemoryStore
from repeat_hooks.kit.conformance import (
    RETRIED,
    SCENARIOS,
    Scenario,
    ToolBox,
    check,
    check_retried,
    run_retried,
    scenario,
)

SUPPORTED = [item for item in SCENARIOS if item.name not in UNSUPPORTED]
PATH = [str(Path(module.__file__ or "").parents[1]) for module in (repeat_hooks, repeat_hooks_pydantic_ai)]
"""Where the two processes of ``run_retried`` import the core and this adapter from."""


@pytest.mark.parametrize("case", SUPPORTED, ids=lambda item: item.name)
def test_conformance(case: Scenario) -> None:
    box = ToolBox(case)
    check(case, box, Driver().run(case, box))


@pytest.mark.parametrize("pause_after", [1, 2, 3])
@pytest.mark.parametrize("case", SUPPORTED, ids=lambda item: item.name)
def test_conformance_with_every_turn_paused_and_resumed(case: Scenario, pause_after: int) -> None:
    """Each turn broken off at a tool step and resumed with ``message_history=`` (no new prompt) is the same
    turn: every scenario ends as it does uninterrupted (tool runs, refusals the model read, stops, finals)."""
    box = ToolBox(case)
    check(case, box, Driver(pause_after=pause_after).run(case, box))


def test_only_what_pydantic_ai_cannot_express_is_left_out() -> None:
    assert set(UNSUPPORTED) <= {item.name for item in SCENARIOS}
    assert sorted(UNSUPPORTED) == [  # duplicate call ids; and no construct runs an agent again around it
        "a_stop_ends_the_loop_around_the_agent",
        "one_call_id_for_different_calls",
        "the_loop_around_the_agent_runs_every_round",
        "the_same_answer_round_after_round_ends_the_loop",
    ]


def test_one_call_id_for_different_calls_is_refused_by_pydantic_ai_itself() -> None:
    """pydantic-ai fails the run before any tool runs (or any hook sees the calls as tool calls)."""
    case = scenario("one_call_id_for_different_calls")
    box = ToolBox(case)
    with pytest.raises(UnexpectedModelBehavior, match=r"unique `tool_call_id`.*\['call_0'\]"):
        Driver().run(case, box)
    assert box.runs == {"track_parcel": 0}


@pytest.mark.parametrize("pause_after", [None, 2])
@pytest.mark.parametrize("case", SUPPORTED, ids=lambda item: item.name)
def test_conformance_with_the_states_in_a_store(case: Scenario, pause_after: int | None) -> None:
    """``RepeatGuard(store=MemoryStore())``: the counts live in the store, and a resumed turn reads them there
    instead of rebuilding them from the history; every scenario ends as it does without a store."""
    box = ToolBox(case)
    check(case, box, Driver(pause_after=pause_after, store=MemoryStore()).run(case, box))


def test_a_turn_retried_after_a_crash_runs_no_write_again(tmp_path: Path) -> None:
    """Two processes, one ``SQLiteStore``: the first dies inside ``place_order``; the retry (the same
    ``conversation_id`` and ``run_id``) tracks again, its count going on, and the order is refused."""
    code, outcome, box = run_retried("repeat_hooks_pydantic_ai.testing:Driver", RETRIED, tmp_path, path=PATH)
    check_retried(RETRIED, code, outcome, box)
