"""The agent's own tool_use_behavior and guardrails keep working under the guard."""

from __future__ import annotations

from typing import Any

import pytest
from agents import (
    Agent,
    FunctionToolResult,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    RunContextWrapper,
    Runner,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolsToFinalOutputResult,
    function_tool,
    input_guardrail,
    tool_input_guardrail,
)
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


async def test_your_guardrail_runs_first_and_a_call_it_rejects_still_counts_as_asked() -> None:
    reached: list[str] = []

    @tool_input_guardrail
    def no_blocked_parcels(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        if "BLOCKED" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.reject_content("That parcel is confidential.")
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[no_blocked_parcels])
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        return "in transit"

    numbers = ["BLOCKED-1", "FR-1", "FR-2"]
    model = ScriptedModel(*[[tool_call("track_parcel", {"tracking_number": n}, n)] for n in numbers], [message("ok")])
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), **SEED_004)
    state = GuardState()

    await Runner.run(agent, "Track them", context=state)

    # Your guardrail's rejection is what the model read; the call was decided with its response's batch
    # (before any guardrail ran), so it used up one of the 2 calls: the model did ask for it.
    assert model.outputs_received(1)["BLOCKED-1"] == "That parcel is confidential."
    assert reached == ["FR-1"]
    assert model.outputs_received(3)["FR-2"].startswith("Refused: you already called track_parcel 2")
    assert state.turn.refusals == 1


async def test_stop_on_first_tool_still_returns_the_tool_output(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], tool_use_behavior="stop_on_first_tool"))

    result = await Runner.run(agent, "Where?", context=GuardState())

    assert result.final_output == "FR-7731: in transit, hub Lyon"
    assert model.calls == 1


async def test_stop_at_tools_still_stops(carrier: Any) -> None:
    @function_tool
    def close_ticket() -> str:
        """Close the ticket."""
        return "closed"

    model = ScriptedModel([tool_call("track_parcel", ARGS, "a")], [tool_call("close_ticket", {}, "b")])
    agent = guard_agent(
        Agent(
            name="p",
            model=model,
            tools=[carrier.tool, close_ticket],
            tool_use_behavior={"stop_at_tool_names": ["close_ticket"]},
        )
    )

    result = await Runner.run(agent, "Track, then close", context=GuardState())

    assert result.final_output == "closed"
    assert model.calls == 2


async def test_your_callable_behaviour_is_asked_first(carrier: Any) -> None:
    seen: list[list[str]] = []

    async def finish_after_two(context: RunContextWrapper[Any], results: list[FunctionToolResult]) -> Any:
        seen.append([str(r.output) for r in results])
        if len(seen) == 4:
            return ToolsToFinalOutputResult(is_final_output=True, final_output="mine")
        return ToolsToFinalOutputResult(is_final_output=False)

    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guard_agent(
        Agent(name="p", model=model, tools=[carrier.tool], tool_use_behavior=finish_after_two), **SEED_004
    )
    state = GuardState()

    result = await Runner.run(agent, "Where?", context=state)

    # Your behaviour saw every batch, refusals included, and ended the run before the guard had to.
    assert [batch[0][:8] for batch in seen] == ["FR-7731:", "FR-7731:", "Refused:", "Refused:"]
    assert result.final_output == "mine"
    assert state.turn.stop is None


async def test_agent_input_guardrails_still_trip(carrier: Any) -> None:
    @input_guardrail(run_in_parallel=False)
    def no_spam(context: RunContextWrapper[Any], agent: Agent[Any], text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="spam" in str(text))

    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], input_guardrails=[no_spam]))

    with pytest.raises(InputGuardrailTripwireTriggered):
        await Runner.run(agent, "spam spam", context=GuardState())
    assert model.calls == 0 and carrier.calls == []
