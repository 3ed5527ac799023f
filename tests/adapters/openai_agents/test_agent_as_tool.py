"""An agent used as a tool: its nested run belongs to the outer turn and neither resets nor forks it."""

from __future__ import annotations

from typing import Any

from agents import Agent, Runner
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


async def test_nested_run_counts_in_the_outer_turn(carrier: Any) -> None:
    inner_model = ScriptedModel([tool_call("track_parcel", ARGS, "in1")], [message("FR-7731 is in Lyon.")])
    inner = guard_agent(Agent(name="lookup", model=inner_model, tools=[carrier.tool]), **SEED_004)
    lookup_tool = inner.as_tool(tool_name="ask_lookup", tool_description="Ask the lookup agent.")
    outer_model = ScriptedModel(
        [tool_call("track_parcel", ARGS, "out1")],
        [tool_call("ask_lookup", {"input": "Where is FR-7731?"}, "out2")],
        [tool_call("track_parcel", ARGS, "out3")],
        [message("It is in Lyon.")],
    )
    outer = guard_agent(
        Agent(name="desk", model=outer_model, tools=[carrier.tool, lookup_tool]), **SEED_004, limits={"ask_lookup": 5}
    )
    state = GuardState()

    result = await Runner.run(outer, "Where is FR-7731?", context=state)

    # Outer call 1 and the nested call are the turn's 2 calls; the outer 3rd call is refused.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert outer_model.outputs_received(2)["out2"] == "FR-7731 is in Lyon."
    assert outer_model.outputs_received(3)["out3"].startswith("Refused: you already called track_parcel 2 times")
    assert result.final_output == "It is in Lyon."
    assert state.turn.number == 1  # the nested run did not start a turn of its own
    assert state.turn.model_calls == 4 + 2  # the nested agent's model calls count in the turn's budget too


async def test_a_stop_inside_the_nested_run_ends_the_outer_turn(carrier: Any) -> None:
    inner_model = ScriptedModel(
        *[[tool_call("track_parcel", ARGS, f"in{i}")] for i in range(1, 9)], call_id_prefix="inner"
    )
    inner = guard_agent(Agent(name="lookup", model=inner_model, tools=[carrier.tool]), **SEED_004)
    outer_model = ScriptedModel([tool_call("ask_lookup", {"input": "Find FR-7731"}, "out1")], [message("never")])
    outer = guard_agent(
        Agent(name="desk", model=outer_model, tools=[inner.as_tool(tool_name="ask_lookup", tool_description="Ask.")]),
        **SEED_004,
    )
    state = GuardState()

    result = await Runner.run(outer, "Where is FR-7731?", context=state)

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert inner_model.calls == 5
    assert outer_model.calls == 1  # the outer turn ended too: the model never saw the nested stop
    assert result.final_output == state.turn.stop.message  # type: ignore[union-attr]
