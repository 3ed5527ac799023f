"""The conformance kit on LangChain's real ``create_agent`` loop: every scenario of ``repeat_hooks.kit.conformance``,
through ``invoke`` (the sync hooks) and ``ainvoke`` (the async ones)."""

from __future__ import annotations

import pytest
from repeat_hooks_langchain.testing import Driver

from repeat_hooks.kit.conformance import SCENARIOS, Scenario, ToolBox, check


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_conformance(scenario: Scenario, asynchronous: bool) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver(asynchronous=asynchronous).run(scenario, box))
