"""MCP tools through ``langchain-mcp-adapters``, against a real FastMCP stdio server in a child process.

The server answers the same text on every call, with a fresh request id in the result's ``_meta`` (and,
in one test, a fresh id in ``structuredContent``). ``langchain-mcp-adapters`` turns each text item into a
content block with a fresh ``lc_<uuid>`` id. None of that is what the model reads, so none of it is
progress: under the default ``Policy()`` the 3rd identical call is refused.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.interceptors import MCPToolCallRequest
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.checkpoint.memory import InMemorySaver
from mcp.types import CallToolResult
from repeat_hooks_langchain import Policy, RepeatGuardMiddleware, StopReason, guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, keep_calling

SERVER = textwrap.dedent(
    """
    import sys
    import uuid

    from mcp.server.fastmcp import FastMCP
    from mcp.types import CallToolResult, TextContent, ToolAnnotations

    server = FastMCP("carrier")
    MODE = sys.argv[2]
    scans = 0

    @server.tool()
    def track_parcel(tracking_number: str) -> CallToolResult:
        "Where the parcel is now."
        global scans
        scans += 1
        with open(sys.argv[1], "a") as log:
            log.write(tracking_number + "\\n")
        fresh = str(uuid.uuid4())
        text = f"{tracking_number}: in transit, hub Lyon"
        if MODE == "moving":  # the parcel really moves: a new scan each time
            text = f"{tracking_number}: in transit, scan {scans} of 9"
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structuredContent={"status": "in transit", "request_id": fresh} if MODE == "structured" else None,
            _meta={"request_id": fresh},
        )

    orders = 0

    @server.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
    def place_order(item: str) -> str:
        "Order an item (a write: each call places a new order)."
        global orders
        orders += 1
        with open(sys.argv[1], "a") as log:
            log.write("order:" + item + "\\n")
        return f"order ORD-{orders} placed: {item}"

    server.run("stdio")
    """
)

ARGS = {"tracking_number": "FR-7731"}
IN_TRANSIT = "FR-7731: in transit, hub Lyon"
REFUSED = "Refused: you already called track_parcel with these exact arguments 2 times"
USER = {"messages": [("user", "Keep checking FR-7731")]}
# A recursion limit well above the 11 steps a guarded turn takes: a guard that never refuses fails fast.
CONFIG: Any = {"configurable": {"thread_id": "t1"}, "recursion_limit": 40}


class MetaSeen:
    """An interceptor on the MCP client's tool calls: records each result's ``_meta`` (changes nothing)."""

    def __init__(self) -> None:
        self.request_ids: list[str] = []

    async def __call__(
        self, request: MCPToolCallRequest, handler: Callable[[MCPToolCallRequest], Awaitable[Any]]
    ) -> Any:
        result = await handler(request)
        assert isinstance(result, CallToolResult)
        self.request_ids.append(str((result.meta or {})["request_id"]))
        return result


def client_for(tmp_path: Path, mode: str) -> tuple[MultiServerMCPClient, Path, MetaSeen]:
    script, log = tmp_path / "carrier_server.py", tmp_path / "reached.log"
    script.write_text(SERVER)
    log.touch()
    seen = MetaSeen()
    connection: Any = {"transport": "stdio", "command": sys.executable, "args": [str(script), str(log), mode]}
    return MultiServerMCPClient({"carrier": connection}, tool_interceptors=[seen]), log, seen


@pytest.mark.parametrize("mode", ["meta", "structured"])
async def test_the_same_answer_with_a_fresh_request_id_is_no_progress(tmp_path: Path, mode: str) -> None:
    client, log, seen = client_for(tmp_path, mode)
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    async with client.session("carrier") as session:
        tools = await load_mcp_tools(session, tool_interceptors=client.tool_interceptors, server_name="carrier")
        agent = create_agent(
            model, tools=tools, middleware=[RepeatGuardMiddleware(Policy())], checkpointer=InMemorySaver()
        )

        result = await agent.ainvoke(USER, CONFIG)

    # The server ran the tool exactly twice, and each answer carried a new request id to LangChain's side.
    assert log.read_text().split() == ["FR-7731", "FR-7731"]
    assert len(seen.request_ids) == 2 and len(set(seen.request_ids)) == 2
    # The model read the same text twice (as blocks whose ids differ), then the refusal as the 3rd result.
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status != "error"]
    assert [m.text for m in answers] == [IN_TRANSIT, IN_TRANSIT]
    assert answers[0].content != answers[1].content  # LangChain's fresh block ids: not what the model reads
    if mode == "structured":
        assert answers[0].artifact != answers[1].artifact  # the artifact is not sent to the model
    assert model.tool_results(1) == model.tool_results(2) == [IN_TRANSIT]
    assert model.tool_results(3)[0].startswith(
        "Refused: you already called track_parcel with these exact arguments 2 times"
    )
    # The default's 3 refusals end the turn with the stop message, before a 6th model call.
    assert model.calls == 5
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result["messages"][-1].content == stop.message
    assert guard_state_of(result).turn.refusals == 3


async def test_a_new_answer_is_progress_and_runs_again(tmp_path: Path) -> None:
    # Control: the same server, but the parcel moves: the text the model reads changes on every call.
    client, log, _ = client_for(tmp_path, "moving")
    model = ScriptedChatModel(replies=[keep_calling("track_parcel", ARGS)] * 4 + [answer("Delivered soon.")])
    async with client.session("carrier") as session:
        tools = await load_mcp_tools(session, tool_interceptors=client.tool_interceptors, server_name="carrier")
        agent = create_agent(
            model, tools=tools, middleware=[RepeatGuardMiddleware(Policy())], checkpointer=InMemorySaver()
        )

        result = await agent.ainvoke(USER, CONFIG)

    assert log.read_text().split() == ["FR-7731"] * 4
    assert model.tool_results(4) == ["FR-7731: in transit, scan 4 of 9"]
    assert result["messages"][-1].content == "Delivered soon."
    assert stop_of(result) is None and guard_state_of(result).turn.refusals == 0


async def test_a_write_the_server_annotates_destructive_is_not_sent_twice(tmp_path: Path) -> None:
    # The server's own annotations (destructiveHint: true, idempotentHint: false) reach the guard through
    # langchain-mcp-adapters' tool metadata: the order went through once, and the same order is refused
    # though each receipt is new. track_parcel, which the server does not annotate, is not treated so.
    client, log, _ = client_for(tmp_path, "meta")
    order = keep_calling("place_order", {"item": "box"})
    model = ScriptedChatModel(replies=[order, order, order, answer("Ordered once.")])
    async with client.session("carrier") as session:
        tools = await load_mcp_tools(session, server_name="carrier")
        agent = create_agent(
            model, tools=tools, middleware=[RepeatGuardMiddleware(Policy())], checkpointer=InMemorySaver()
        )

        result = await agent.ainvoke(USER, CONFIG)

    assert {tool.name: (tool.metadata or {}).get("destructiveHint") for tool in tools} == {
        "track_parcel": None,
        "place_order": True,
    }
    assert log.read_text().split() == ["order:box"]
    assert model.tool_results(1) == ["order ORD-1 placed: box"]
    assert [model.tool_results(n)[0][:8] for n in (2, 3)] == ["Refused:"] * 2
    assert result["messages"][-1].content == "Ordered once."
