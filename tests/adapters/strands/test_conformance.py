"""The conformance kit on Strands' real agent loop: every scenario of ``repeat_hooks.kit.conformance``, with Strands'
default (concurrent) tool executor and with its sequential one; and ``RETRIED``, two processes on one store."""

from __future__ import annotations

from pathlib import Path

import pytest
import repeat_hooks_strands
from repeat_hooks_strands.testing import Driver
from strands.tools.executors import ConcurrentToolExecutor, SequentialToolExecutor

import repeat_hooks
from repeat_hooks.kit.conformance import RETRIED, SCENARIOS, Scenario, ToolBox, check, check_retried, run_retried


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_conformance(scenario: Scenario) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver().run(scenario, box))


@pytest.mark.parametrize("executor", [ConcurrentToolExecutor, SequentialToolExecutor], ids=lambda e: e.__name__)
@pytest.mark.parametrize(
    "scenario",
    [s for s in SCENARIOS if any(len(r) > 1 for t in s.turns for r in t.script if not isinstance(r, str))],
    ids=lambda scenario: scenario.name,
)
def test_conformance_of_batches_with_either_executor(scenario: Scenario, executor: type) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver(tool_executor=executor()).run(scenario, box))


def test_a_turn_retried_after_a_crash_in_another_process_runs_no_write_again(tmp_path: Path) -> None:
    """Two processes, one ``SQLiteStore``: the first dies right after placing the order; the retry (the same request:
    ``repeat_hooks.kit.request(conversation_id=...)`` and ``invocation_state={TURN_KEY: ...}``) keeps the turn's
    counts and does not place it again."""
    path = [str(Path(module.__file__).parents[1]) for module in (repeat_hooks_strands, repeat_hooks)]  # type: ignore[arg-type]

    code, outcome, box = run_retried("repeat_hooks_strands.testing:Driver", RETRIED, tmp_path, path=path)

    check_retried(RETRIED, code, outcome, box)
