"""The core's conformance kit on pydantic-ai's real agent graph: every scenario the SDK can express, run
straight through and with every turn paused at a tool step and resumed."""

from __future__ import annotations

import pytest
from pydantic_ai.exceptions import UnexpectedModelBehavior
from repeat_hooks_pydantic_ai.testing import UNSUPPORTED, Driver

from repeat_hooks.kit.conformance import SCENARIOS, Scenario, ToolBox, check, scenario

SUPPORTED = [item for item in SCENARIOS if item.name not in UNSUPPORTED]


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
    assert sorted(UNSUPPORTED) == [  # the two: no construct runs an agent again around it
        "a_stop_ends_the_loop_around_the_agent",
        "one_call_id_for_different_calls",
        "the_loop_around_the_agent_runs_every_round",
    ]


def test_one_call_id_for_different_calls_is_refused_by_pydantic_ai_itself() -> None:
    """pydantic-ai fails the run before any tool runs (or any hook sees the calls as tool calls)."""
    case = scenario("one_call_id_for_different_calls")
    box = ToolBox(case)
    with pytest.raises(UnexpectedModelBehavior, match=r"unique `tool_call_id`.*\['call_0'\]"):
        Driver().run(case, box)
    assert box.runs == {"track_parcel": 0}
