"""The core's conformance scenarios, each on rc11's real agent loop (scripted model at the provider seam)."""

from __future__ import annotations

from pathlib import Path

import pytest
from repeat_hooks_mistral.testing import Driver

from repeat_hooks.kit.conformance import (
    FINAL,
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
PATH = (str(ROOT / "src"), str(ROOT / "adapters" / "mistral" / "src"))

SUPPORTED = [item for item in SCENARIOS if item.name not in Driver.UNSUPPORTED]


@pytest.mark.parametrize("scenario", SUPPORTED, ids=[item.name for item in SUPPORTED])
def test_conformance(scenario: Scenario) -> None:
    box = ToolBox(scenario)
    check(scenario, box, Driver().run(scenario, box))


def test_unsupported_scenarios_are_the_sdk_s_own_limits() -> None:
    """rc11 refuses a response that uses one call id twice: the turn fails before any hook or tool runs. (It has no
    construct that runs an agent again after its answer either: the loop scenarios; and it answers a call of a tool
    the agent lacks where no hook sees it: the next test.)"""
    loops = {item.name for item in SCENARIOS if item.rounds > 1}
    assert {"a_stop_ends_the_loop_around_the_agent", "the_loop_around_the_agent_runs_every_round"} <= loops
    assert set(Driver.UNSUPPORTED) == {
        "one_call_id_for_different_calls",
        "a_tool_the_agent_lacks_fails_like_any_other",
        *loops,
    }
    duplicate = scenario("one_call_id_for_different_calls")
    box = ToolBox(duplicate)

    with pytest.raises(RuntimeError, match="duplicate model tool call ID 'call_0'"):
        Driver().run(duplicate, box)
    assert box.runs == {"track_parcel": 0}


UNSUPPORTED_TOOL = (
    '{"result":{"type":"error","error":{"name":"InvalidToolCall","message":"unsupported top-level tool \\"hex\\""}}}'
)
"""What the model reads for a call of ``hex``: rc11's own error (its native core writes it)."""


def test_a_tool_the_agent_lacks_is_answered_by_rc11_where_the_guard_never_sees_it() -> None:
    """The model calls ``hex``, which the agent lacks, 8 times: rc11's native core answers every call with its
    InvalidToolCall error, no hook sees one, so none is refused and the turn ends only when the model answers."""
    lacking = scenario("a_tool_the_agent_lacks_fails_like_any_other")
    box = ToolBox(lacking)

    [outcome] = Driver().run(lacking, box)

    assert outcome.seen == [UNSUPPORTED_TOOL] * 8, "the model reads rc11's error each time, never a refusal"
    assert box.runs == {"track_parcel": 0}
    assert outcome.stop is None and outcome.final == FINAL
    assert outcome.model_calls == 9, "8 responses calling hex, then the answer: the guard ended nothing"


def test_a_turn_retried_in_another_process_runs_no_write_again(tmp_path: Path) -> None:
    """Two processes, one conversation, one SQLite store: rc11 gives each process's session its own ids, so the
    driver names the conversation and the turn around ``Guard.run`` (``repeat_hooks.kit.request``); the retry
    keeps the turn's counts, and the order placed before the crash is not placed again."""
    code, outcome, box = run_retried("repeat_hooks_mistral.testing:Driver", RETRIED, tmp_path, path=PATH)
    check_retried(RETRIED, code, outcome, box)
