"""The conformance kit on ADK's real Runner: every scenario of ``repeat_hooks.kit.conformance`` (none unsupported): the
loop around the agent is a ``LoopAgent``, isolated branches a ``ParallelAgent``, approval ``require_confirmation``;
and the two-process scenario, each process a Runner of its own on one ``SQLiteStore``."""

from __future__ import annotations

from pathlib import Path

import pytest
from repeat_hooks_google_adk.testing import UNSUPPORTED, Driver

from repeat_hooks import MemoryStore
from repeat_hooks.kit.conformance import RETRIED, SCENARIOS, Scenario, ToolBox, check, check_retried, run_retried

ROOT = Path(__file__).resolve().parents[3]
PATH = (str(ROOT / "src"), str(ROOT / "adapters" / "google_adk" / "src"))


@pytest.mark.parametrize(
    "scenario", [s for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda scenario: scenario.name
)
def test_conformance(scenario: Scenario) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver().run(scenario, box))


def test_every_scenario_runs_on_adk() -> None:
    assert UNSUPPORTED == {}


def test_a_turn_retried_in_another_process_runs_no_write_again(tmp_path: Path) -> None:
    """The retry names the session (``session_id``) and the invocation (``run_async(invocation_id=...)``) the first
    process served: the turn goes on with its counts, and the order placed before the crash is not placed again."""
    code, outcome, box = run_retried("repeat_hooks_google_adk.testing:Driver", RETRIED, tmp_path, path=PATH)

    check_retried(RETRIED, code, outcome, box)


@pytest.mark.parametrize(
    "scenario", [s for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda scenario: scenario.name
)
def test_conformance_with_the_states_in_a_store(scenario: Scenario) -> None:
    """Every scenario again, the counts in a ``MemoryStore`` instead of the session state (loops, branches and
    approvals included): the same outcomes."""
    box = ToolBox(scenario)

    check(scenario, box, Driver(store=MemoryStore()).run(scenario, box))
