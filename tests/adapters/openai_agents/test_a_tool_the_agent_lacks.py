"""A model calling a tool the agent does not have (the kit's ``a_tool_the_agent_lacks_fails_like_any_other``, listed in
``testing.UNSUPPORTED``): what the SDK does on the real ``Runner``, run and streamed. By default it fails the run at
the first such call (``ModelBehaviorError``): no loop. ``RunConfig(tool_not_found_behavior="return_error_to_model")``
lets the model ask again and again, and the SDK answers each before any tool guardrail: the guard sees none of them,
so ``max_turns`` bounds such a run (the adapter's README says so)."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, MaxTurnsExceeded, ModelBehaviorError, RunConfig, Runner
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, kit_tool

from repeat_hooks.kit.conformance import ToolBox, scenario

CASE = scenario("a_tool_the_agent_lacks_fails_like_any_other")
STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])


def kit_agent() -> tuple[ToolBox, Agent[Any], ScriptedModel]:
    """The scenario's agent (track_parcel only, guarded) and a model that calls hex in every response."""
    box = ToolBox(CASE)
    agent = guard_agent(Agent(name="kit", tools=[kit_tool(tool, box) for tool in CASE.tools]), CASE.policy)
    return box, agent, ScriptedModel(then=keep_calling("hex", {"query": "255"}))


async def run(agent: Agent[Any], config: RunConfig, streamed: bool, max_turns: int = 10) -> None:
    if streamed:
        result = Runner.run_streamed(
            agent, "Convert 255 to hex", context=GuardState(), run_config=config, max_turns=max_turns
        )
        async for _ in result.stream_events():
            pass
        return
    await Runner.run(agent, "Convert 255 to hex", context=GuardState(), run_config=config, max_turns=max_turns)


@STREAMED
async def test_sdk_behaviour_a_tool_the_agent_lacks_fails_the_run_at_its_first_call_by_default(streamed: bool) -> None:
    box, agent, model = kit_agent()
    with pytest.raises(ModelBehaviorError, match=r"^Tool hex not found in agent kit$"):
        await run(agent, RunConfig(model=model), streamed)
    assert model.calls == 1 and box.runs == {"track_parcel": 0}  # the SDK's own protection: nothing to stop


@STREAMED
async def test_sdk_behaviour_returned_to_the_model_the_calls_go_on_until_max_turns(streamed: bool) -> None:
    box, agent, model = kit_agent()
    config = RunConfig(model=model, tool_not_found_behavior="return_error_to_model")
    with pytest.raises(MaxTurnsExceeded):
        await run(agent, config, streamed, max_turns=6)
    assert model.calls == 6 and box.runs == {"track_parcel": 0}  # no hook saw them: the guard counted none
