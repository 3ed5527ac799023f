"""The conformance kit (``repeat_hooks.kit.conformance``) on the SDK's real ``Runner``, run and streamed.

Every scenario of the catalogue runs through ``repeat_hooks_openai_agents.testing.Driver``: a guarded
agent, a ``GuardState`` per conversation, a scripted model at the SDK's ``Model`` seam. The scenarios the
SDK cannot express are listed in ``UNSUPPORTED``; ``test_sdk_behaviour_*`` below proves what the SDK does
instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ModelBehaviorError, RunConfig, Runner
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import UNSUPPORTED, Driver, ScriptedModel, kit_tool, message, tool_call

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

SUPPORTED = [item for item in SCENARIOS if item.name not in UNSUPPORTED]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("case", SUPPORTED, ids=lambda item: item.name)
async def test_conformance(case: Scenario, streamed: bool) -> None:
    box = ToolBox(case)
    check(case, box, await Driver(streamed=streamed).run_async(case, box))


def test_the_driver_runs_outside_an_event_loop() -> None:
    case = scenario("same_result_is_refused")
    box = ToolBox(case)
    check(case, box, Driver().run(case, box))


def test_every_unsupported_scenario_exists() -> None:
    assert set(UNSUPPORTED) <= {item.name for item in SCENARIOS}


async def test_sdk_behaviour_one_call_id_for_different_calls_fails_the_run_before_any_tool_runs() -> None:
    case = scenario("one_call_id_for_different_calls")
    box = ToolBox(case)
    model = ScriptedModel(
        [tool_call("track_parcel", {"query": q}, "call_0") for q in ("FR-1", "FR-2", "FR-3")], [message("done")]
    )
    agent = guard_agent(Agent(name="kit", tools=[kit_tool(tool, box) for tool in case.tools]), case.policy)

    state = GuardState()

    with pytest.raises(ModelBehaviorError, match="reused a tool call ID for a different invocation"):
        await Runner.run(agent, "Where are my three parcels?", context=state, run_config=RunConfig(model=model))

    assert box.runs == {"track_parcel": 0}
    assert state.turn.counts == {}  # the guard decided nothing for a response the SDK rejects


async def test_sdk_behaviour_a_call_id_reused_across_responses_runs_once_and_is_counted_once() -> None:
    case = scenario("call_ids_reused_across_responses")
    box = ToolBox(case)
    model = ScriptedModel(*[[tool_call("track_parcel", {"query": "FR-7731"}, "call_0")]] * 4, [message("done")])
    agent = guard_agent(Agent(name="kit", tools=[kit_tool(tool, box) for tool in case.tools]), case.policy)
    state = GuardState()

    result = await Runner.run(agent, "Where is FR-7731?", context=state, run_config=RunConfig(model=model))

    # The SDK ran the call once and dropped its three repeats; the guard counted the one call that ran.
    assert box.runs == {"track_parcel": 1}
    assert list(state.turn.counts.values()) == [1] and state.turn.refusals == 0
    assert result.final_output == "done" and model.calls == 5


def test_a_turn_retried_after_a_crash_runs_no_write_again(tmp_path: Path) -> None:
    """Two processes, one conversation in a SQLiteStore: the first dies right after placing the order, the retry
    (the same conversation and turn ids, through ``repeat_hooks.kit.request``) refuses to place it again."""
    code, outcome, box = run_retried("repeat_hooks_openai_agents.testing:Driver", RETRIED, tmp_path)
    check_retried(RETRIED, code, outcome, box)
    assert outcome.seen[1].startswith("Refused: place_order")


async def test_sdk_behaviour_agents_run_as_tools_at_once_count_in_the_outer_turn() -> None:
    # The SDK's one construct running agents at once: tools of another agent, called in one response. Each nested
    # run shares the outer run's context and Usage, so the three branches' calls are the one turn's: 3rd refused.
    case = scenario("isolated_branches_count_apart")
    box = ToolBox(case)
    tools = [kit_tool(tool, box) for tool in case.tools]

    def branch(n: int) -> Any:
        model = ScriptedModel([tool_call("track_parcel", {"query": "FR-7731"}, f"b{n}")], [message("done")])
        agent = guard_agent(Agent(name=f"branch_{n}", tools=tools, model=model), case.policy)
        return agent.as_tool(tool_name=f"ask_branch_{n}", tool_description="Ask one branch.")

    model = ScriptedModel([tool_call(f"ask_branch_{n}", {"input": "go"}, f"o{n}") for n in range(3)], [message("done")])
    state = GuardState()
    orchestrator = guard_agent(
        Agent(name="orchestrator", tools=[branch(n) for n in range(3)], model=model), case.policy
    )

    result = await Runner.run(orchestrator, "Where is FR-7731?", context=state)

    assert result.final_output == "done" and box.runs == {"track_parcel": 2}
    assert state.turn.number == 1 and state.turn.refusals == 1
