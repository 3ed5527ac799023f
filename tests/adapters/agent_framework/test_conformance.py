"""The conformance kit on Agent Framework's real agent loop: every scenario of ``repeat_hooks.kit.conformance`` (none
is unsupported), run and streamed; and ``RETRIED``, two processes on one store."""

from __future__ import annotations

from pathlib import Path

import pytest
import repeat_hooks_agent_framework
from repeat_hooks_agent_framework.testing import UNSUPPORTED, Driver

import repeat_hooks
from repeat_hooks.kit.conformance import RETRIED, SCENARIOS, Scenario, ToolBox, check, check_retried, run_retried


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda s: s.name)
def test_conformance(scenario: Scenario) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver().run(scenario, box))


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.rounds == s.branches == 1], ids=lambda s: s.name)
def test_conformance_of_streamed_runs(scenario: Scenario) -> None:
    """``agent.run(..., stream=True)`` (as ``Agent.as_tool`` runs a sub-agent): the same on every scenario the agent
    runs alone (a workflow runs its agents unstreamed, ``_agent_executor.py:838``)."""
    box = ToolBox(scenario)

    check(scenario, box, Driver(stream=True).run(scenario, box))


def test_no_scenario_is_unsupported() -> None:
    assert UNSUPPORTED == {}


def test_a_turn_retried_after_a_crash_in_another_process_runs_no_write_again(tmp_path: Path) -> None:
    """Two processes, one ``SQLiteStore``: the first dies right after placing the order; the retry (the same request:
    ``repeat_hooks.kit.request(conversation_id=..., turn_id=...)``) keeps the turn's counts and does not place it
    again."""
    path = [str(Path(module.__file__).parents[1]) for module in (repeat_hooks_agent_framework, repeat_hooks)]  # type: ignore[arg-type]

    code, outcome, box = run_retried("repeat_hooks_agent_framework.testing:Driver", RETRIED, tmp_path, path=path)

    check_retried(RETRIED, code, outcome, box)
