"""The conformance kit on LangChain's real ``create_agent`` loop: every scenario of ``repeat_hooks.kit.conformance``,
through ``invoke`` (the sync hooks) and ``ainvoke`` (the async ones); and the two-process one (``RETRIED``): a turn
served through a shared ``SQLiteStore``, its process killed mid-turn and the request retried in another (the same
thread id and run id), runs no write again."""

from __future__ import annotations

from pathlib import Path

import pytest
from repeat_hooks_langchain.testing import Driver

from repeat_hooks.kit.conformance import RETRIED, SCENARIOS, Scenario, ToolBox, check, check_retried, run_retried


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_conformance(scenario: Scenario, asynchronous: bool) -> None:
    box = ToolBox(scenario)

    check(scenario, box, Driver(asynchronous=asynchronous).run(scenario, box))


def test_a_turn_retried_after_a_crash_in_another_process_runs_no_write_again(tmp_path: Path) -> None:
    code, outcome, box = run_retried("repeat_hooks_langchain.testing:Driver", RETRIED, tmp_path)

    check_retried(RETRIED, code, outcome, box)
    assert outcome.seen[0].startswith("FR-7731") and outcome.seen[1].startswith("Refused: place_order")
