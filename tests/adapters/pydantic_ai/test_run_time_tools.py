"""Tool names in the policy next to MCP tools (issue 18 item 4), on pydantic-ai's real loop with a real stdio
MCP server (the shared ``support.mcp_carrier``).

The check reads the first request's tools, which hold an ``MCPToolset``'s: a limit on an MCP tool passes it
and is enforced. A tool that joins the run later (a dynamic toolset connecting the server mid-run) is not
there yet: the check fails, naming the tools the agent has; ``RepeatGuard(check_tools=False)`` is the way
through, and the limit still holds once the tool is there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, RunContext
from pydantic_ai.mcp import MCPToolset
from repeat_hooks_pydantic_ai import RepeatGuard, refusals_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, steps
from support import MCP_CARRIER

from repeat_hooks import GuardSetupError

FR1 = ("track_parcel", {"tracking_number": "FR-1"})


def carrier(tmp_path: Path) -> tuple[MCPToolset[Any], Path]:
    """The carrier's ``track_parcel`` over stdio, and the log of the calls that reached it."""
    log = tmp_path / "reached.log"
    log.touch()
    transport = StdioTransport(
        command=sys.executable, args=[str(MCP_CARRIER), "track_parcel"], env={**os.environ, "CARRIER_LOG": str(log)}
    )
    return MCPToolset(transport), log


def connect_carrier() -> str:
    """Connect the parcel carrier (its tools are offered from the next step on)."""
    return "connected"


def late_agent(model: ScriptedModel, server: MCPToolset[Any], guard: RepeatGuard) -> Agent[None, str]:
    """An agent whose MCP tools join the run after ``connect_carrier`` ran (a dynamic toolset)."""
    agent = Agent(model, tools=[connect_carrier], capabilities=[guard])

    @agent.toolset
    def carrier_once_connected(ctx: RunContext[None]) -> MCPToolset[Any] | None:
        connected = any(
            getattr(part, "tool_name", None) == "connect_carrier" and part.part_kind == "tool-return"
            for message in ctx.messages
            for part in message.parts
        )
        return server if connected else None

    return agent


async def test_a_limit_on_an_mcp_tool_passes_the_check_and_is_enforced(tmp_path: Path) -> None:
    server, log = carrier(tmp_path)
    model = ScriptedModel(steps([FR1], [FR1], "In transit."))
    agent = Agent(model, toolsets=[server], capabilities=[RepeatGuard(limits={"track_parcel": 1})])

    result = await agent.run("Where is FR-1?")

    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    assert model.tool_returns(1) == ["FR-1: in transit, hub Lyon"]
    (refusal,) = model.tool_returns(2)
    assert refusal.startswith("Refused: you already called track_parcel with these exact arguments once")
    assert result.output == "In transit."


async def test_a_tool_that_joins_the_run_later_fails_the_check_by_default(tmp_path: Path) -> None:
    server, log = carrier(tmp_path)
    model = ScriptedModel(steps([("connect_carrier", {})], [FR1], "In transit."))
    agent = late_agent(model, server, RepeatGuard(limits={"track_parcel": 1}))

    with pytest.raises(GuardSetupError, match=r"names 'track_parcel'.*connect_carrier"):
        await agent.run("Where is FR-1?")
    assert log.read_text() == "" and model.calls == 0


async def test_check_tools_false_lets_a_later_tool_through_and_its_limit_holds(tmp_path: Path) -> None:
    server, log = carrier(tmp_path)
    model = ScriptedModel(steps([("connect_carrier", {})], [FR1], [FR1], "In transit."))
    agent = late_agent(model, server, RepeatGuard(limits={"track_parcel": 1}, check_tools=False))

    result = await agent.run("Where is FR-1?")

    assert log.read_text().splitlines() == ["track_parcel FR-1"]  # joined at step 2; the repeat was refused
    assert model.tool_returns(2) == ["FR-1: in transit, hub Lyon"]
    assert [name for name, _ in refusals_of(result)] == ["track_parcel"]
    assert result.output == "In transit."


def test_check_tools_is_a_spec_setting() -> None:
    assert RepeatGuard.from_spec(check_tools=False, max_calls=2).check_tools is False
    assert RepeatGuard().check_tools is True
