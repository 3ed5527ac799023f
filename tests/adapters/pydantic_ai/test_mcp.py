"""MCP tools: each tool's ``readOnlyHint`` reaches the core, and repeats of MCP tools are refused.

A real stdio MCP server (FastMCP) runs in a child process; the agent reaches it through pydantic-ai's
own ``MCPToolset``.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from repeat_hooks_pydantic_ai import RepeatGuard, refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling, steps

from repeat_hooks import GuardState, Policy, Refusal, RefusalKind, StopReason, ToolCall

INIT = 60.0
"""Seconds a stdio server may take to start (pydantic-ai's default, 5, is too short on a loaded machine)."""
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

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
    def order_label(parcel_id: str) -> str:
        "Buy a new shipping label for a parcel."
        log("label " + parcel_id)
        return parcel_id + ": label L-" + str(len(open(sys.argv[1]).read().splitlines()))

    @server.tool()
    def contact_support(text: str) -> str:
        "Write to the carrier's support."
        log("support")
        return "ticket opened"

    server.run("stdio")
    """
)


class SeenPolicy(Policy):
    """The policy, also keeping the ``ToolCall`` objects the adapter hands it (to see their hints)."""

    def decide_tool_calls(
        self, state: GuardState, calls: Sequence[ToolCall], *, turn_id: str | None = None
    ) -> list[Refusal | None]:
        SEEN.extend(calls)
        return super().decide_tool_calls(state, calls, turn_id=turn_id)


SEEN: list[ToolCall] = []


def carrier_server(tmp_path: Path) -> tuple[MCPToolset[Any], Path]:
    script, log = tmp_path / "carrier_server.py", tmp_path / "reached.log"
    script.write_text(SERVER)
    log.touch()
    return MCPToolset(StdioTransport(command=sys.executable, args=[str(script), str(log)]), init_timeout=INIT), log


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
    hints = sorted((c.name, c.read_only, c.destructive, c.idempotent) for c in SEEN)
    assert hints == [
        ("contact_support", None, None, None),  # no annotation: unknown (MCP's defaults say nothing)
        ("reroute_parcel", False, None, None),  # only what the server set explicitly
        ("track_parcel", True, None, None),
    ]
    assert sorted(log.read_text().split("\n")[:-1]) == ["reroute FR-1", "support", "track FR-1"]


async def test_a_write_annotated_destructive_and_not_idempotent_is_not_sent_twice(tmp_path: Path) -> None:
    """``destructiveHint: true`` + ``idempotentHint: false``: once it succeeded, the same call is refused,
    though each receipt differs (a new label number)."""
    server, log = carrier_server(tmp_path)
    label = ("order_label", {"parcel_id": "FR-1"})
    model = ScriptedModel(steps([label], [label], [label], "Label bought."))
    agent = Agent(model, toolsets=[server], capabilities=[RepeatGuard()])
    result = await agent.run("Buy a label for FR-1")
    assert result.output == "Label bought."
    assert log.read_text().split("\n")[:-1] == ["label FR-1"]
    kinds = [refusal.reason for _, refusal in refusals_of(result)]
    assert kinds == [RefusalKind.DUPLICATE_WRITE] * 2  # the write rule first, though the 3rd is past max_calls too


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


# -- a result whose ``_meta`` changes every call ---------------------------------------------------------

FRESH_META_SERVER = textwrap.dedent(
    """
    import sys
    import uuid
    from mcp.server.fastmcp import FastMCP
    from mcp.types import CallToolResult, TextContent

    server = FastMCP("carrier")

    def answer(tool, parcel_id):
        with open(sys.argv[1], "a") as out:
            out.write(tool + " " + parcel_id + "\\n")
        # The same text every time; a fresh request id in the result's ``_meta``.
        text = TextContent(type="text", text=parcel_id + ": in transit, hub Lyon")
        return CallToolResult(content=[text], _meta={"request_id": str(uuid.uuid4())})

    @server.tool()
    def track_parcel(parcel_id: str) -> CallToolResult:
        "Where the parcel is now."
        return answer("track", parcel_id)

    @server.tool(meta={"ui": {"resourceUri": "ui://carrier/parcel.html"}})
    def show_parcel(parcel_id: str) -> CallToolResult:
        "Where the parcel is now, with a map for the user (an MCP App tool)."
        return answer("show", parcel_id)

    server.run("stdio")
    """
)


def fresh_meta_server(tmp_path: Path) -> tuple[StdioTransport, Path]:
    script, log = tmp_path / "fresh_meta_server.py", tmp_path / "reached.log"
    script.write_text(FRESH_META_SERVER)
    log.touch()
    return StdioTransport(command=sys.executable, args=[str(script), str(log)]), log


async def test_the_server_sends_a_fresh_request_id_in_meta_with_the_same_text(tmp_path: Path) -> None:
    """The premise of the next test: the client pydantic-ai uses receives a new ``_meta`` on every call."""
    transport, _ = fresh_meta_server(tmp_path)
    async with Client(transport) as client:
        first = await client.call_tool("track_parcel", {"parcel_id": "FR-7731"})
        second = await client.call_tool("track_parcel", {"parcel_id": "FR-7731"})
    assert [first.content[0].text, second.content[0].text] == ["FR-7731: in transit, hub Lyon"] * 2
    assert first.meta is not None and second.meta is not None
    assert first.meta["request_id"] != second.meta["request_id"]


@pytest.mark.parametrize("tool", ["track_parcel", "show_parcel"])
async def test_a_fresh_request_id_in_meta_is_not_progress(tool: str, tmp_path: Path) -> None:
    """Default policy, a model stuck on one MCP call: the tool runs twice, the 3rd call reads a refusal.

    ``show_parcel`` is an MCP App tool: pydantic-ai hands the guard a ``ToolReturn`` whose ``metadata``
    holds the raw result, ``_meta`` included (the app needs it); the model reads the text only.
    """
    transport, log = fresh_meta_server(tmp_path)
    model = ScriptedModel(keep_calling(tool, {"parcel_id": "FR-7731"}))
    agent = Agent(model, toolsets=[MCPToolset(transport, init_timeout=INIT)], capabilities=[RepeatGuard(Policy())])
    result = await agent.run("Keep checking FR-7731")

    reached = "track FR-7731" if tool == "track_parcel" else "show FR-7731"
    assert log.read_text().split("\n")[:-1] == [reached] * 2
    assert model.tool_returns(1) == model.tool_returns(2) == ["FR-7731: in transit, hub Lyon"]
    third = model.tool_returns(3)
    assert len(third) == 1 and third[0].startswith("Refused")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    if tool == "show_parcel":  # the fresh ids did reach pydantic-ai's side, in the metadata the model never reads
        ids = [
            part.metadata["mcp_app"]["result"]["_meta"]["request_id"]
            for message in result.all_messages()
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart) and part.metadata and "mcp_app" in part.metadata
        ]
        assert len(ids) == 2 and ids[0] != ids[1]
