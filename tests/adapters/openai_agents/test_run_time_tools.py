"""Tool names in the policy next to MCP tools (issue 18 item 4), on the SDK's real loop with real stdio MCP
servers in child processes.

The check lists the MCP servers' tools at the first model call: a limit on an MCP tool passes it and is
enforced. A tool a server only offers later in the run (its tool list changes) is not there yet: the check
fails; ``guard_agent(..., check_tools=False)`` is the way through, and the limit still holds.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio
from repeat_hooks_openai_agents import GuardSetupError, GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call
from support import MCP_CARRIER

FR1 = {"tracking_number": "FR-1"}

LATE_SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import Context, FastMCP

    server = FastMCP("carrier", log_level="CRITICAL")

    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        with open(sys.argv[1], "a") as log:
            log.write("track_parcel " + tracking_number + "\\n")
        return tracking_number + ": in transit, hub Lyon"

    @server.tool()
    async def connect_carrier(ctx: Context) -> str:
        "Connect the parcel carrier: its tracking tool is offered from now on."
        server.add_tool(track_parcel)
        await ctx.session.send_tool_list_changed()
        return "connected"

    server.run("stdio")
    """
)


def shared_carrier(tmp_path: Path) -> tuple[MCPServerStdio, Path]:
    """The shared carrier's ``track_parcel`` over stdio, and the log of the calls that reached it."""
    log = tmp_path / "reached.log"
    log.touch()
    params = {
        "command": sys.executable,
        "args": [str(MCP_CARRIER), "track_parcel"],
        "env": {**os.environ, "CARRIER_LOG": str(log)},
    }
    return MCPServerStdio(params=params, client_session_timeout_seconds=20), log  # type: ignore[arg-type]


def late_carrier(tmp_path: Path) -> tuple[MCPServerStdio, Path]:
    """A server offering only ``connect_carrier`` until it is called, then ``track_parcel`` too."""
    script, log = tmp_path / "late_carrier.py", tmp_path / "reached.log"
    script.write_text(LATE_SERVER)
    log.touch()
    params = {"command": sys.executable, "args": [str(script), str(log)]}
    return MCPServerStdio(params=params, client_session_timeout_seconds=20), log  # type: ignore[arg-type]


async def test_a_limit_on_an_mcp_tool_passes_the_check_and_is_enforced(tmp_path: Path) -> None:
    server, log = shared_carrier(tmp_path)
    model = ScriptedModel(
        [tool_call("track_parcel", FR1, "c1")], [tool_call("track_parcel", FR1, "c2")], [message("In transit.")]
    )
    async with server:
        agent = guard_agent(Agent(name="tracker", model=model, mcp_servers=[server]), limits={"track_parcel": 1})
        result = await Runner.run(agent, "Where is FR-1?", context=GuardState())

    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    assert "FR-1: in transit, hub Lyon" in str(model.outputs_received(1)["c1"])  # the MCP result's text block
    assert str(model.outputs_received(2)["c2"]).startswith("Refused: you already called track_parcel")
    assert result.final_output == "In transit."


async def test_a_tool_a_server_offers_later_fails_the_check_by_default(tmp_path: Path) -> None:
    server, log = late_carrier(tmp_path)
    model = ScriptedModel([tool_call("connect_carrier", {}, "c0")], [message("Connected.")])
    async with server:
        agent = guard_agent(Agent(name="tracker", model=model, mcp_servers=[server]), limits={"track_parcel": 1})
        with pytest.raises(GuardSetupError, match=r"names 'track_parcel'.*connect_carrier"):
            await Runner.run(agent, "Where is FR-1?", context=GuardState())

    assert model.calls == 0 and log.read_text() == ""


async def test_check_tools_false_lets_a_later_tool_through_and_its_limit_holds(tmp_path: Path) -> None:
    server, log = late_carrier(tmp_path)
    model = ScriptedModel(
        [tool_call("connect_carrier", {}, "c0")],
        [tool_call("track_parcel", FR1, "c1")],
        [tool_call("track_parcel", FR1, "c2")],
        [message("In transit.")],
    )
    async with server:  # the SDK lists the server's tools at every model call (cache_tools_list=False)
        agent = guard_agent(
            Agent(name="tracker", model=model, mcp_servers=[server]), limits={"track_parcel": 1}, check_tools=False
        )
        result = await Runner.run(agent, "Where is FR-1?", context=GuardState())

    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    assert "FR-1: in transit, hub Lyon" in str(model.outputs_received(2)["c1"])  # the MCP result's text block
    assert str(model.outputs_received(3)["c2"]).startswith("Refused: you already called track_parcel")
    assert result.final_output == "In transit."
