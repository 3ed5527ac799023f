"""The conformance kit on the core itself: a reference driver (the simplest agent loop an adapter could
drive) runs every scenario, so the catalogue is known to be consistent before any SDK meets it."""

from __future__ import annotations

import pytest

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.testing import (
    FINAL,
    SCENARIOS,
    Scenario,
    ToolBox,
    ToolFailed,
    TurnOutcome,
    call_id,
    check,
    response,
)


class ReferenceDriver:
    """An agent loop in a few lines: the guard's hooks at the five points, parallel calls as one batch."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        guard = StopRepeatedCalls(policy=scenario.policy)
        hints = {tool.name: tool.read_only for tool in scenario.tools}
        outcomes = []
        for number, _turn in enumerate(scenario.turns):
            guard.pre_agent_turn(turn_id=f"t{number}")
            seen: list[str] = []
            final = None
            for step in range(50):
                stop = guard.pre_llm_call()
                if stop is not None:
                    final = stop.message
                    break
                guard.post_llm_call()
                reply = response(scenario, number, step)
                if isinstance(reply, str):
                    final = reply
                    break
                calls = [
                    ToolCall(c.tool, {"query": c.query}, call_id=call_id(number, step, k, c), read_only=hints[c.tool])
                    for k, c in enumerate(reply)
                ]
                decisions = guard.pre_tool_calls(calls)
                for call, decision in zip(calls, decisions, strict=True):
                    if decision is not None:
                        seen.append(decision.message)
                        continue
                    try:
                        result, ok = box.run(call.name, call.arguments["query"]), True
                    except ToolFailed as error:
                        result, ok = str(error), False
                    guard.post_tool_call(call, ok, result=result)
                    seen.append(str(result))
            assert final is not None
            outcomes.append(TurnOutcome(final=final, stop=guard.stop, seen=seen))
        return outcomes


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_holds_on_the_reference_loop(scenario: Scenario) -> None:
    box = ToolBox(scenario)
    check(scenario, box, ReferenceDriver().run(scenario, box))


def test_check_names_what_differs() -> None:
    scenario = SCENARIOS[1]
    box = ToolBox(scenario)
    box.runs["track_parcel"] = 3
    with pytest.raises(AssertionError, match=r"tool runs \{'track_parcel': 3\}, expected \{'track_parcel': 2\}"):
        check(scenario, box, [TurnOutcome(final=FINAL, stop=None, seen=["Refused: ..."])])
