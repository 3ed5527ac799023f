"""The conformance kit on Strands' real agent loop: every scenario of ``repeat_hooks.kit.conformance``, with Strands'
default (concurrent) tool executor and with its sequential one."""

from __future__ import annotations

import pytest
from repeat_hooks_strands.testing import Driver
from strands.tools.executors import ConcurrentToolExecutor, SequentialToolExecutor

from repeat_hooks.kit.conformance import SCENARIOS, Scenario, ToolBox, check


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
