"""An agent used as a tool: its nested run belongs to the outer turn and neither resets nor forks it."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, Runner
from repeat_hooks_openai_agents import GuardHooks, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

from repeat_hooks import StopRepeatedCalls

ARGS = {"tracking_number": "FR-7731"}


@pytest.mark.parametrize("nested_hooks", [False, True])
async def test_nested_run_counts_in_the_outer_turn(carrier: Any, nested_hooks: bool) -> None:
    inner_model = ScriptedModel([tool_call("track_parcel", ARGS, "in1")], [message("FR-7731 is in Lyon.")])
    inner = guard_agent(Agent(name="lookup", model=inner_model, tools=[carrier.tool]))
    lookup_tool = inner.as_tool(
        tool_name="ask_lookup", tool_description="Ask the lookup agent.", hooks=GuardHooks() if nested_hooks else None
    )
    outer_model = ScriptedModel(
        [tool_call("track_parcel", ARGS, "out1")],
        [tool_call("ask_lookup", {"input": "Where is FR-7731?"}, "out2")],
        [tool_call("track_parcel", ARGS, "out3")],
        [message("It is in Lyon.")],
    )
    outer = guard_agent(Agent(name="desk", model=outer_model, tools=[carrier.tool, lookup_tool]))
    guard = StopRepeatedCalls(count="per_turn", match="tool", max_calls=2, max_refusals=3, limits={"ask_lookup": 5})

    result = await Runner.run(outer, "Where is FR-7731?", context=guard, hooks=GuardHooks())

    # Outer call 1 and the nested call are the turn's 2 calls; the outer 3rd call is refused.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert outer_model.outputs_received(2)["out2"] == "FR-7731 is in Lyon."
    assert outer_model.outputs_received(3)["out3"].startswith("Refused: you already called track_parcel 2 times")
    assert result.final_output == "It is in Lyon."
    assert guard.state.turn == 1  # the nested run did not start a turn of its own
    # With GuardHooks on the nested run, its model calls count in the turn's budget too.
    assert guard.state.model_calls == 4 + (2 if nested_hooks else 0)


async def test_a_stop_inside_the_nested_run_ends_the_outer_turn(carrier: Any) -> None:
    inner_model = ScriptedModel(
        *[[tool_call("track_parcel", ARGS, f"in{i}")] for i in range(1, 9)], call_id_prefix="inner"
    )
    inner = guard_agent(Agent(name="lookup", model=inner_model, tools=[carrier.tool]))
    outer_model = ScriptedModel([tool_call("ask_lookup", {"input": "Find FR-7731"}, "out1")], [message("never")])
    outer = guard_agent(
        Agent(name="desk", model=outer_model, tools=[inner.as_tool(tool_name="ask_lookup", tool_description="Ask.")])
    )
    guard = StopRepeatedCalls(count="per_turn", match="tool", max_calls=2, max_refusals=3)

    result = await Runner.run(outer, "Where is FR-7731?", context=guard, hooks=GuardHooks())

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert inner_model.calls == 5
    assert outer_model.calls == 1  # the outer turn ended too: the model never saw the nested stop
    assert result.final_output == guard.state.stop.message  # type: ignore[union-attr]
