"""Claude Code's sub-agents (the ``Agent`` tool) on the real CLI: each counts apart from its parent, and a sub-agent
the guard stops ends alone, its parent going on with the result Claude Code hands it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from cas_parcels import REFUSAL, SEED_004, STOPPED, TRACK, TRACKED, Turn, allowed, call, carrier, converse
from claude_agent_sdk import AgentDefinition, AssistantMessage, TaskStartedMessage, ToolUseBlock, UserMessage
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, read_state, result_text, stop_of
from repeat_hooks_claude_agent_sdk.testing import (
    FakeMessagesAPI,
    Reply,
    offline_options,
    steps,
    tool_results,
    tool_use,
)

from repeat_hooks import StopReason

TRACKER = "TRACKER SUB-AGENT: track the parcel."
"""The sub-agent's system prompt, by which the fake model tells its requests apart."""


def parent_then_tracker(request: dict[str, Any]) -> Reply:
    """The parent starts one tracker sub-agent in the foreground, then calls track_parcel twice itself and
    answers; the tracker calls track_parcel in every response, forever."""
    if TRACKER in json.dumps(request.get("system")):
        return call("track_parcel")
    step = steps(request, "Where is FR-7731?")
    if step == 0:
        arguments = {"description": "track", "prompt": "Track FR-7731", "subagent_type": "tracker"}
        return [tool_use("Agent", {**arguments, "run_in_background": False})]
    return call("track_parcel") if step < 3 else "done"


async def test_a_stopped_sub_agent_ends_alone_and_its_parent_counts_apart(tmp_path: Path) -> None:
    parcels = carrier()
    guard = RepeatGuardHooks(**SEED_004)
    with FakeMessagesAPI(parent_then_tracker) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Where is FR-7731?"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=[*allowed("track_parcel"), "Agent"],
            tools=["Agent"],
            agents={  # maxTurns: a guard that fails to stop it fails this test rather than hanging it
                "tracker": AgentDefinition(description="Tracks a parcel.", prompt=TRACKER, tools=[TRACK], maxTurns=10)
            },
        )
    requests = api.model_requests()
    tracker = [request for request in requests if TRACKER in json.dumps(request.get("system"))]
    parent = [request for request in requests if request not in tracker]

    # The sub-agent: two runs, then refusals (true: it did call twice), and its 3rd refusal ends it: no 6th
    # model call of it.
    assert [tool_results(request) for request in tracker] == [[], [TRACKED], [TRACKED], [REFUSAL], [REFUSAL]]
    (started,) = [message for message in turn.messages if isinstance(message, TaskStartedMessage)]
    agent_results = [
        result_text(block.content)
        for message in turn.messages
        if isinstance(message, UserMessage) and message.parent_tool_use_id == started.tool_use_id
        for block in message.content
        if not isinstance(block, str) and hasattr(block, "tool_use_id")
    ]
    assert agent_results == [TRACKED, TRACKED, REFUSAL, REFUSAL, REFUSAL]
    stop = await stop_of(turn.result, guard=guard, agent_id=started.task_id)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED

    # The parent reads the sub-agent's result as Claude Code hands it back, then calls track_parcel twice: both
    # run (the sub-agent's calls are not the parent's), and its turn ends with its own answer.
    assert "agentId: " + started.task_id in tool_results(parent[1])[0]
    assert [tool_results(request) for request in parent[2:]] == [[TRACKED], [TRACKED]]
    assert parcels.count("track_parcel") == 4
    assert (turn.result.terminal_reason, turn.result.result) == ("completed", "done")
    assert await stop_of(turn.result, guard=guard) is None
    parent_calls = [
        block.name
        for message in turn.messages
        if isinstance(message, AssistantMessage) and message.parent_tool_use_id is None
        for block in message.content
        if isinstance(block, ToolUseBlock)
    ]
    assert parent_calls == ["Agent", TRACK, TRACK]

    # Each keeps its own state in the guard's store: the parent's turn saw no refusal.
    state = await read_state(turn.result, guard=guard)
    assert state is not None and state.turn.stop is None and state.turn.refused_responses == 0
    assert state.turn.model_calls == 3  # each response with calls, once they resolved: not the answer
    agent_state = await read_state(turn.result, guard=guard, agent_id=started.task_id)
    assert agent_state is not None and agent_state.turn.id == started.task_id
    assert agent_state.turn.model_calls == 5


def parent_then_background_trackers(request: dict[str, Any]) -> Reply:
    """The parent starts three tracker sub-agents in the background at once and answers; each tracker calls
    track_parcel once, then answers."""
    if TRACKER in json.dumps(request.get("system")):
        return call("track_parcel") if steps(request, "Track FR-7731") == 0 else "tracked"
    if steps(request, "Where is FR-7731?") == 0:
        return [
            tool_use(
                "Agent",
                {
                    "description": f"track {n}",
                    "prompt": f"Track FR-7731 ({n})",
                    "subagent_type": "tracker",
                    "run_in_background": True,
                },
            )
            for n in range(3)
        ]
    return "started"


async def test_background_sub_agents_count_apart_after_their_parents_turn_ended(tmp_path: Path) -> None:
    """Background sub-agents run on after the parent's ``ResultMessage``: each tracks the parcel once, and none is
    told it already called (each is its own conversation, with its own state)."""
    parcels = carrier()
    guard = RepeatGuardHooks()
    tracker_requests: list[dict[str, Any]] = []
    with FakeMessagesAPI(parent_then_background_trackers) as api:
        options = offline_options(
            api,
            tmp_path,
            mcp_servers={"parcels": parcels.server},
            allowed_tools=[*allowed("track_parcel"), "Agent"],
            tools=["Agent"],
            agents={"tracker": AgentDefinition(description="Tracks a parcel.", prompt=TRACKER, tools=[TRACK])},
        )
        async with guard.client(options) as client:
            await client.query("Where is FR-7731?")
            turn = Turn([message async for message in client.receive_response()])
            assert turn.result.result == "started"
            with anyio.fail_after(60):  # the CLI stays up while its background sub-agents finish
                while len(tracker_requests) < 6:
                    await anyio.sleep(0.05)
                    requests = api.model_requests()
                    tracker_requests = [r for r in requests if TRACKER in json.dumps(r.get("system"))]
    assert parcels.count("track_parcel") == 3
    assert sorted(map(tool_results, tracker_requests)) == [[], [], [], [TRACKED], [TRACKED], [TRACKED]]
    started = [message for message in turn.messages if isinstance(message, TaskStartedMessage)]
    assert len(started) == 3
    for task in started:
        agent_state = await read_state(turn.result, guard=guard, agent_id=task.task_id)
        assert agent_state is not None and agent_state.turn.id == task.task_id
        assert agent_state.turn.refused_responses == 0


def parent_then_busy_tracker(request: dict[str, Any]) -> Reply:
    """The parent starts one tracker sub-agent in the foreground, then answers; the tracker tracks a new parcel in
    every response, forever (each call is progress: no repeat rule trips)."""
    if TRACKER in json.dumps(request.get("system")):
        return call("track_parcel", {"tracking_number": f"FR-{steps(request, 'Track FR-7731')}"})
    if steps(request, "Where is FR-7731?") == 0:
        arguments = {"description": "track", "prompt": "Track FR-7731", "subagent_type": "tracker"}
        return [tool_use("Agent", {**arguments, "run_in_background": False})]
    return "done"


async def test_a_sub_agents_budget_ends_it_before_its_next_model_call(tmp_path: Path) -> None:
    """max_model_calls=3 applies to the sub-agent on its own: once its 3rd response's call has resolved, it ends
    (its PostToolBatch's continue: false), with no 4th model call; the parent goes on to its answer."""
    parcels = carrier()
    guard = RepeatGuardHooks(max_model_calls=3)
    with FakeMessagesAPI(parent_then_busy_tracker) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Where is FR-7731?"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=[*allowed("track_parcel"), "Agent"],
            tools=["Agent"],
            agents={  # maxTurns: a guard that fails to stop it fails this test rather than hanging it
                "tracker": AgentDefinition(description="Tracks a parcel.", prompt=TRACKER, tools=[TRACK], maxTurns=10)
            },
        )
    tracker = [request for request in api.model_requests() if TRACKER in json.dumps(request.get("system"))]
    assert len(tracker) == 3 and parcels.count("track_parcel") == 3
    (started,) = [message for message in turn.messages if isinstance(message, TaskStartedMessage)]
    stop = await stop_of(turn.result, guard=guard, agent_id=started.task_id)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert (turn.result.terminal_reason, turn.result.result) == ("completed", "done")
    assert await stop_of(turn.result, guard=guard) is None
