"""MCP tools: each tool's ``readOnlyHint`` reaches the core, and repeats of MCP tools are refused.

A real stdio MCP server (FastMCP) runs in a child process; the agent reaches it through pydantic-ai's
own ``MCPToolset``.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from repeat_hooks_pydantic_ai import RepeatGuard, refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling, steps

from repeat_hooks import GuardState, Policy, Refusal, StopReason, ToolCall

SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    server = FastMCP("carrier")

    def log(text):
        with open(sys.argv[1], "a") as out:
            out.write(text + "\\n")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def track_parcel(parcel_id: str) -> str:
        "Where the parcel is now."
        log("track " + parcel_id)
        return f"{parcel_id}: in transit"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False))
    def reroute_parcel(parcel_id: str, hub: str) -> str:
        "Send the parcel to another hub."
        log("reroute " + parcel_id)
        return f"{parcel_id}: rerouted to {hub}"

    @server.tool()
    def contact_support(text: str) -> str:
        "Write to the carrier's support."
        log("support")
        return "ticket opened"

    server.run("stdio")
    """
)


class SeenPolicy(Policy):
    """The policy, also keeping the ``ToolCall`` objects the adapter hands it (to see ``read_only``)."""

    def check_tool_call(self, state: GuardState, call: ToolCall, turn_id: str | None = None) -> Refusal | None:
        SEEN.append(call)
        return super().check_tool_call(state, call, turn_id)


SEEN: list[ToolCall] = []


def carrier_server(tmp_path: Path) -> tuple[MCPToolset[Any], Path]:
    script, log = tmp_path / "carrier_server.py", tmp_path / "reached.log"
    script.write_text(SERVER)
    log.touch()
    return MCPToolset(StdioTransport(command=sys.executable, args=[str(script), str(log)])), log


async def test_read_only_hints_reach_the_core(tmp_path: Path) -> None:
    SEEN.clear()
    server, log = carrier_server(tmp_path)
    script = steps(
        [
            ("track_parcel", {"parcel_id": "FR-1"}),
            ("reroute_parcel", {"parcel_id": "FR-1", "hub": "Paris"}),
            ("contact_support", {"text": "where is FR-1?"}),
        ],
        "Rerouted.",
    )
    agent = Agent(ScriptedModel(script), toolsets=[server], capabilities=[RepeatGuard(SeenPolicy())])
    result = await agent.run("Reroute FR-1 to Paris")
    assert result.output == "Rerouted."
    assert sorted((c.name, c.read_only) for c in SEEN) == [
        ("contact_support", None),  # no annotation: unknown
        ("reroute_parcel", False),
        ("track_parcel", True),
    ]
    assert sorted(log.read_text().split("\n")[:-1]) == ["reroute FR-1", "support", "track FR-1"]


async def test_mcp_tool_repeats_are_refused_and_never_reach_the_server(tmp_path: Path) -> None:
    server, log = carrier_server(tmp_path)
    model = ScriptedModel(keep_calling("track_parcel", {"parcel_id": "FR-7731"}))
    agent = Agent(model, toolsets=[server], capabilities=[RepeatGuard(Policy(match="tool", max_calls=2))])
    result = await agent.run("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert log.read_text().split("\n")[:-1] == ["track FR-7731"] * 2
    assert model.calls == 5


async def test_a_read_only_call_in_between_does_not_excuse_a_repeat(tmp_path: Path) -> None:
    """Default ``count="progress"``: a call that may change state restarts the others' counts, a read-only one not."""
    server, log = carrier_server(tmp_path)
    fr1 = ("track_parcel", {"parcel_id": "FR-1"})
    policy = Policy(max_calls=2, max_refusals=None)
    after_a_read = steps([fr1], [fr1], [("track_parcel", {"parcel_id": "FR-2"})], [fr1], "Still in transit.")
    model = ScriptedModel(after_a_read)
    agent = Agent(model, toolsets=[server], capabilities=[RepeatGuard(policy)])
    result = await agent.run("Track FR-1")
    assert result.output == "Still in transit."
    assert refusals_of(result)[0][0] == "track_parcel"  # FR-2 is read-only: FR-1's 3rd run is refused
    assert len(refusals_of(result)) == 1

    after_a_change = steps([fr1], [fr1], [("reroute_parcel", {"parcel_id": "FR-1", "hub": "Paris"})], [fr1], "Done.")
    agent = Agent(ScriptedModel(after_a_change), toolsets=[server], capabilities=[RepeatGuard(policy)])
    result = await agent.run("Track FR-1, reroute it, track it again")
    assert result.output == "Done."
    assert refusals_of(result) == []  # the reroute may have changed FR-1's status: it runs again
    assert log.read_text().split("\n")[:-1] == [
        *["track FR-1", "track FR-1", "track FR-2"],
        *["track FR-1", "track FR-1", "reroute FR-1", "track FR-1"],
    ]
