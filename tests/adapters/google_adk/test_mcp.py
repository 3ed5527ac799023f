"""MCP tools through ADK's ``McpToolset`` (a real stdio server): guarded like any tool, with the server's
``readOnlyHint`` handed to the policy as ``ToolCall.read_only``, results digested without their ``_meta``
and ``isError`` results counted as failures."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
from mcp import StdioServerParameters
from repeat_hooks_google_adk import STOP_METADATA, RepeatGuardPlugin
from repeat_hooks_google_adk.calls import tool_call
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks import GuardState, Policy, Refusal, ToolCall

from .conftest import ARGS, STOPPED, new_session, run_turn, runner_for

pytestmark = pytest.mark.filterwarnings(
    "ignore:MCPTool class is deprecated:DeprecationWarning"  # ADK 2.11's own McpToolset builds its deprecated MCPTool
)

SERVER = Path(__file__).with_name("mcp_carrier.py")
seen: list[ToolCall] = []


class SeeingPolicy(Policy):
    """The seed-004 policy, also keeping the ToolCalls of each model response it decides (each response's
    calls are decided as one batch), to check the hints they carried."""

    def decide_tool_calls(
        self, state: GuardState, calls: Sequence[ToolCall], *, turn_id: str | None = None
    ) -> list[Refusal | None]:
        seen.extend(calls)
        return super().decide_tool_calls(state, calls, turn_id=turn_id)


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


async def test_the_servers_explicit_hints_reach_the_policy(toolset: tuple[McpToolset, Path]) -> None:
    tools, _ = toolset

    calls = {tool.name: tool_call(tool, {}, None) for tool in await tools.get_tools()}
    hints = {name: call.read_only for name, call in calls.items()}

    assert hints == {
        "track_parcel": True,
        "reroute_parcel": False,
        "carrier_status": None,
        "parcel_events": None,
        "customs_status": None,
    }
    # Only annotations the server set explicitly: reroute_parcel says destructiveHint=False; nobody says
    # idempotentHint; MCP's defaults for unannotated tools are not taken as hints.
    assert {name: (call.destructive, call.idempotent) for name, call in calls.items()} == {
        "track_parcel": (None, None),
        "reroute_parcel": (False, None),
        "carrier_status": (None, None),
        "parcel_events": (None, None),
        "customs_status": (None, None),
    }


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


async def test_the_same_answer_with_a_fresh_request_id_is_refused_on_the_third_call(
    toolset: tuple[McpToolset, Path],
) -> None:
    tools, log = toolset
    model = ScriptedLlm(then=keep_calling("parcel_events", ARGS))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[tools]), RepeatGuardPlugin(Policy()))

    turn = await run_turn(runner, await new_session(runner), "What happened to FR-7731?")

    assert log.read_text().splitlines() == ["parcel_events FR-7731"] * 2
    # ADK hands the model the whole result, the server's _meta included (as "meta"): a new request id
    # each time, around the same text.
    first, second = turn.tool_responses[:2]
    assert first["meta"]["request_id"] != second["meta"]["request_id"]
    assert first["content"] == second["content"] == [{"type": "text", "text": "FR-7731: scanned at hub Lyon"}]
    # The 3rd call did not run: the model read a refusal in its place.
    (third,) = model.responses_received(3).values()
    assert third["error"].startswith("Refused: you already called parcel_events")
    assert turn.final.custom_metadata[STOP_METADATA] == "ignored_refusals"


async def test_an_mcp_error_result_is_a_failure(toolset: tuple[McpToolset, Path]) -> None:
    tools, log = toolset
    model = ScriptedLlm(then=keep_calling("customs_status", ARGS))
    plugin = RepeatGuardPlugin(Policy(count_failures=False, max_errors_in_a_row=3))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[tools]), plugin)

    turn = await run_turn(runner, await new_session(runner), "Has FR-7731 cleared customs?")

    # Failed calls are not counted as repeats (count_failures=False): 3 reached the server, all isError.
    assert log.read_text().splitlines() == ["customs_status FR-7731"] * 3
    assert [response["isError"] for response in turn.tool_responses] == [True] * 3
    assert "customs API timed out" in turn.tool_responses[0]["content"][0]["text"]
    assert turn.final.custom_metadata[STOP_METADATA] == "too_many_errors"
