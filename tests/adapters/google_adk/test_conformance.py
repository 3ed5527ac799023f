"""The conformance kit on ADK's real Runner: every scenario of ``repeat_hooks.kit.conformance`` (none unsupported): the
loop around the agent is a ``LoopAgent``, isolated branches a ``ParallelAgent``, approval ``require_confirmation``."""

from __future__ import annotations

import pytest
from repeat_hooks_google_adk.testing import UNSUPPORTED, Driver

from repeat_hooks.kit.conformance import SCENARIOS, Scenario, ToolBox, check


@pytest.mark.parametrize(
    "scenario", [s for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda scenario: scenario.name
)
def test_conformance(scenario: Scenario) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver().run(scenario, box))


def test_every_scenario_runs_on_adk() -> None:
    assert UNSUPPORTED == {}
