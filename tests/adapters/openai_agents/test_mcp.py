"""Local MCP servers' tools are guarded: a real stdio server (FastMCP) in a child process."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from agents import Agent, Runner
from agents.mcp import MCPServerStdio
from repeat_hooks_openai_agents import GuardHooks, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling

from repeat_hooks import StopRepeatedCalls

SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("carrier")

    @server.tool()
    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        with open(sys.argv[1], "a") as log:
            log.write(tracking_number + "\\n")
        return f"{tracking_number}: in transit"

    server.run("stdio")
    """
)


def carrier_server(tmp_path: Path) -> tuple[MCPServerStdio, Path]:
    script, log = tmp_path / "carrier_server.py", tmp_path / "reached.log"
    script.write_text(SERVER)
    log.touch()
    params = {"command": sys.executable, "args": [str(script), str(log)]}
    return MCPServerStdio(params=params, cache_tools_list=True, client_session_timeout_seconds=20), log  # type: ignore[arg-type]


async def test_mcp_tools_are_refused_past_the_limit(tmp_path: Path) -> None:
    server, log = carrier_server(tmp_path)
    async with server:
        model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
        agent = guard_agent(Agent(name="parcel-tracker", model=model, mcp_servers=[server]))
        guard = StopRepeatedCalls(count="per_turn", match="tool", max_calls=2, max_refusals=3)

        result = await Runner.run(agent, "Keep checking FR-7731", context=guard, hooks=GuardHooks())

        # An unguarded agent sharing the server is not affected (its context holds no guard).
        plain_model = ScriptedModel(*[keep_calling("track_parcel", {"tracking_number": "X"})] * 3)
        plain = Agent(name="plain", model=plain_model, mcp_servers=[server])
        await Runner.run(plain, "Check X", context=None)

    reached = log.read_text().split()
    assert reached == ["FR-7731", "FR-7731", "X", "X", "X"]
    assert model.calls == 5
    assert str(model.outputs_received(3)["call_3"]).startswith("Refused: you already called track_parcel 2 times")
    assert result.final_output == guard.state.stop.message  # type: ignore[union-attr]


def test_hosted_tools_are_left_as_they_are(carrier: Any) -> None:
    from agents import WebSearchTool

    web = WebSearchTool()
    agent = guard_agent(Agent(name="researcher", tools=[web, carrier.tool]))
    assert agent.tools[0] is web  # out of reach: it runs at OpenAI, no guardrail can refuse it
    assert agent.tools[1] is not carrier.tool
