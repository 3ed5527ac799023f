"""The conformance kit's scenarios on the real Claude Code CLI (the SDK's bundled one), the model scripted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_claude_agent_sdk.testing import STOP_LAG, UNSUPPORTED, Driver

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

ROOT = Path(__file__).resolve().parents[3]
PATH = [str(ROOT / "src"), str(ROOT / "adapters" / "claude_agent_sdk" / "src")]

SUPPORTED = [item for item in SCENARIOS if item.name not in UNSUPPORTED]


@pytest.mark.parametrize("case", SUPPORTED, ids=lambda case: case.name)
def test_conformance(case: Scenario) -> None:
    box = ToolBox(case)
    check(case, box, Driver().run(case, box), stop_lag=STOP_LAG)


def test_every_unsupported_scenario_exists() -> None:
    assert set(UNSUPPORTED) <= {item.name for item in SCENARIOS}


class TimedBox(ToolBox):
    """The kit's tool box, noting when each run started (``time.monotonic()``)."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.started: list[float] = []

    def run(self, name: str, query: str) -> Any:
        self.started.append(time.monotonic())
        return super().run(name, query)


def test_one_response_is_one_batch_while_claude_code_runs_its_calls_as_they_stream() -> None:
    """The model streams A, B, C, A, A slowly: Claude Code runs A before C has even arrived, and still the 3rd A
    is refused, as if the five had been decided together (B and C may change things, but not for their siblings)."""
    parallel = scenario("parallel_calls_are_one_batch")
    box = TimedBox(parallel)
    driver = Driver(delay=0.15)
    check(parallel, box, driver.run(parallel, box), stop_lag=STOP_LAG)
    assert driver.api is not None
    first_response = next(r for r in driver.api.requests if "answered_at" in r and r["body"].get("tools"))
    assert box.started[0] < first_response["answered_at"] - 0.3  # the first call ran 2+ blocks before the end


def test_a_turn_retried_in_a_second_process_runs_no_write_again(tmp_path: Path) -> None:
    """Two processes, each with its own real CLI, serve one Claude Code session through a ``SQLiteStore``: the first
    dies right after placing the order; the retry resumes the session (``resume=``) and names the same turn
    (``repeat_hooks.kit.request(turn_id=...)``): its track call counts on, and the order is not placed again."""
    code, outcome, box = run_retried("repeat_hooks_claude_agent_sdk.testing:Driver", RETRIED, tmp_path, path=PATH)
    check_retried(RETRIED, code, outcome, box)
    assert outcome.seen[0] == "FR-7731: in transit" and outcome.seen[1].startswith("Refused")
    assert any((tmp_path / "claude_home" / "claude" / "projects").glob("*/*.jsonl"))  # one session, resumed


def test_no_stop_lands_late() -> None:
    """Every stop rule lands before the model call it forbids (at PostToolBatch, or at the refusal that reaches
    max_refusals): the kit's scenarios run with no lag at all."""
    assert STOP_LAG == {}
