"""MCP tools through ADK's ``McpToolset`` (a real stdio server): guarded like any tool, with the server's
``readOnlyHint`` handed to the policy as ``ToolCall.read_only``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
from mcp import StdioServerParameters
from repeat_hooks_google_adk import RepeatGuardPlugin, read_only_hint
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks import GuardState, Policy, Refusal, ToolCall

from .conftest import new_session, run_turn, runner_for
from .test_story import ARGS, STOPPED

SERVER = Path(__file__).with_name("mcp_carrier.py")
seen: list[ToolCall] = []


class SeeingPolicy(Policy):
    """The seed-004 policy, also keeping each ToolCall it is handed (to check the hint it carried)."""

    def check_tool_call(self, state: GuardState, call: ToolCall, turn_id: str | None = None) -> Refusal | None:
        seen.append(call)
        return super().check_tool_call(state, call, turn_id)


@pytest.fixture
async def toolset(tmp_path: Path) -> AsyncIterator[tuple[McpToolset, Path]]:
    log = tmp_path / "carrier.log"
    log.touch()
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], env={"CARRIER_LOG": str(log)})
    tools = McpToolset(connection_params=StdioConnectionParams(server_params=params, timeout=30))
    try:
        yield tools, log
    finally:
        await tools.close()


async def test_the_servers_read_only_hints_reach_the_policy(toolset: tuple[McpToolset, Path]) -> None:
    tools, _ = toolset

    hints = {tool.name: read_only_hint(tool) for tool in await tools.get_tools()}

    assert hints == {"track_parcel": True, "reroute_parcel": False, "carrier_status": None}


async def test_repeated_mcp_calls_are_refused_and_carry_the_hint(toolset: tuple[McpToolset, Path]) -> None:
    tools, log = toolset
    seen.clear()
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    plugin = RepeatGuardPlugin(SeeingPolicy(match="tool", max_calls=2, max_refusals=3))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[tools]), plugin)

    turn = await run_turn(runner, await new_session(runner), "Keep checking FR-7731")

    assert log.read_text().splitlines() == ["track_parcel FR-7731"] * 2
    assert turn.final_text == STOPPED
    assert [call.read_only for call in seen] == [True] * 5
