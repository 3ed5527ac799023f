"""Human in the loop: a turn paused for approval, saved, and resumed elsewhere keeps its counts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, Tool, function_tool
from agents.run_config import RunConfig, ToolExecutionConfig
from repeat_hooks_openai_agents import GuardState, context_deserializer, context_serializer, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, tool_call

STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}

# The resuming side, run in a fresh Python process: it knows the agent's shape, nothing else.
RESUME = textwrap.dedent(
    """
    import asyncio, json, sys
    from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
    from repeat_hooks_openai_agents import context_deserializer, guard_agent
    from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling

    set_tracing_disabled(True)
    reached, notified = [], []

    @function_tool
    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        reached.append(tracking_number)
        return "in transit"

    @function_tool(needs_approval=True)
    def notify_customer(text: str) -> str:
        "Tell the customer (needs a human's approval)."
        notified.append(text)
        return "notified"

    async def main():
        model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}), call_id_prefix="r")
        agent = guard_agent(
            Agent(name="parcel-tracker", model=model, tools=[track_parcel, notify_customer]),
            count="per_turn", match="tool", max_calls=2, max_refusals=3,
        )
        saved = json.loads(open(sys.argv[1]).read())
        state = await RunState.from_json(agent, saved, context_deserializer=context_deserializer)
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(agent, state)
        guard = result.context_wrapper.context
        print(json.dumps({
            "reached": reached, "notified": notified, "final": result.final_output, "model_calls": model.calls,
            "first_request": model.outputs_received(0), "turn": guard.turn.number, "turn_id": guard.turn.id,
        }))

    asyncio.run(main())
    """
)


def tools(carrier: Any) -> tuple[list[Tool], list[str]]:
    notified: list[str] = []

    @function_tool(needs_approval=True)
    def notify_customer(text: str) -> str:
        """Tell the customer (needs a human's approval)."""
        notified.append(text)
        return "notified"

    return [carrier.tool, notify_customer], notified


def paused_model() -> ScriptedModel:
    return ScriptedModel(
        [tool_call("track_parcel", ARGS, "c1")],
        [tool_call("track_parcel", ARGS, "c2")],
        [tool_call("notify_customer", {"text": "Still looking"}, "c3")],
    )


async def pause(carrier: Any) -> tuple[Any, GuardState]:
    agent_tools, _ = tools(carrier)
    agent = guard_agent(Agent(name="parcel-tracker", model=paused_model(), tools=agent_tools), **SEED_004)
    state = GuardState()
    result = await Runner.run(agent, "Keep checking FR-7731", context=state)
    assert [item.name for item in result.interruptions] == ["notify_customer"]
    return result, state


async def test_a_paused_turn_resumed_in_another_process_keeps_its_counts(carrier: Any, tmp_path: Path) -> None:
    result, guard = await pause(carrier)
    assert carrier.calls == ["FR-7731", "FR-7731"]
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps(result.to_state().to_json(context_serializer=context_serializer)))

    child = subprocess.run(
        [sys.executable, "-c", RESUME, str(saved)], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 0, child.stderr
    resumed = json.loads(child.stdout.strip().splitlines()[-1])

    # The approved call ran; the turn had already used its 2 track_parcel calls, so none ran again.
    assert resumed["notified"] == ["Still looking"]
    assert resumed["reached"] == []
    assert resumed["first_request"]["c3"] == "notified"
    assert resumed["final"] == STOPPED
    assert resumed["model_calls"] == 3  # 3 refusals, then the turn ended without a 4th call
    assert resumed["turn"] == 1 and resumed["turn_id"] == guard.turn.id


async def test_both_the_sdk_default_dump_and_ours_keep_the_counts(carrier: Any) -> None:
    result, guard = await pause(carrier)
    default = result.to_state().to_json()["context"]["context"]
    ours = result.to_state().to_json(context_serializer=context_serializer)["context"]["context"]

    # The SDK dumps pydantic contexts with exclude_unset=True; the core's models count every field as set.
    assert default["turn"]["counts"] == guard.turn.counts and guard.turn.counts
    assert GuardState.model_validate(default) == guard
    assert context_deserializer(ours) == guard


async def test_resumed_with_fresh_objects_in_process(carrier: Any) -> None:
    result, _ = await pause(carrier)
    saved = json.dumps(result.to_state().to_json(context_serializer=context_serializer))

    fresh_tools, notified = tools(carrier)
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS), call_id_prefix="r")
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=fresh_tools), **SEED_004)
    state = await RunState.from_json(agent, json.loads(saved), context_deserializer=context_deserializer)
    for item in state.get_interruptions():
        state.approve(item)
    resumed = await Runner.run(agent, state)

    assert notified == ["Still looking"]
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert resumed.final_output == STOPPED
    assert model.calls == 3


async def test_guardrails_run_before_and_after_approval_count_the_call_once() -> None:
    sent: list[str] = []

    @function_tool(needs_approval=True)
    def send_update(text: str) -> str:
        """Send an update (needs a human's approval)."""
        sent.append(text)
        return "sent"

    model = ScriptedModel(
        [tool_call("send_update", {"text": "hi"}, "u1")], [tool_call("send_update", {"text": "hi"}, "u2")]
    )
    agent = guard_agent(Agent(name="notifier", model=model, tools=[send_update]))
    guard = GuardState()
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))

    result = await Runner.run(agent, "Update the customer", context=guard, run_config=config)
    for _ in range(2):  # each call: guardrail before the pause, approval, guardrail again before it runs
        state = result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(agent, state, run_config=config)

    assert sent == ["hi", "hi"]  # 2 allowed: neither call was counted twice
    assert list(guard.turn.counts.values()) == [2]
    assert guard.turn.refusals == 0
