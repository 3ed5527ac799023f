"""MCP tools through LlamaIndex's own MCP client (``llama-index-tools-mcp``: ``BasicMCPClient`` + ``McpToolSpec``)
against the shared FastMCP carrier (a real stdio server). ``McpToolSpec`` drops the server's annotations
(tools/mcp/base.py:163-167 builds a ``ToolMetadata`` of name, description and schema), so the effect hints come
from the policy's ``read_only`` / ``destructive``; it hands the ``CallToolResult`` back as the tool's value, so an
``isError`` result is a success to LlamaIndex and a failure to the guard (``calls.succeeded``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec
from repeat_hooks_llama_index import RepeatGuard, StopReason, stop_of
from repeat_hooks_llama_index.testing import Script, call, tool_results
from support import MCP_CARRIER

TOOLS = ("track_parcel", "place_order", "parcel_history", "customs_status")
FR = {"tracking_number": "FR-7731"}


@pytest.fixture
async def server(tmp_path: Path) -> tuple[list[Any], Path]:
    log = tmp_path / "carrier.log"
    log.touch()
    client = BasicMCPClient(sys.executable, args=[str(MCP_CARRIER), *TOOLS], env={"CARRIER_LOG": str(log)})
    return await McpToolSpec(client=client).to_tool_list_async(), log


def reached(log: Path) -> list[str]:
    return log.read_text().splitlines()


def agent_with(tools: list[Any], *replies: Any, **settings: Any) -> tuple[FunctionAgent, Script]:
    script = Script(*replies, "Done.")
    agent = FunctionAgent(name="carrier_agent", llm=script.llm(), tools=tools, streaming=False)
    return RepeatGuard(**settings).agent(agent), script


async def test_the_servers_hints_do_not_reach_llamaindex_tools(server: tuple[list[Any], Path]) -> None:
    tools, _ = server

    metadata = {tool.metadata.name: tool.metadata for tool in tools}

    assert set(metadata) == set(TOOLS)
    assert not any("annotations" in vars(item) or "readOnlyHint" in str(item) for item in metadata.values())


async def test_a_read_only_call_between_two_repeats_restarts_nothing(server: tuple[list[Any], Path]) -> None:
    tools, log = server
    history, track = [call("parcel_history", FR)], [call("track_parcel", FR)]
    agent, _ = agent_with(tools, history, history, track, history, read_only={"track_parcel"})

    handler = agent.run(user_msg="Check FR-7731")
    await handler

    assert reached(log) == ["parcel_history FR-7731"] * 2 + ["track_parcel FR-7731"]
    assert (await tool_results(handler.ctx))[-1].startswith("Refused: you already called parcel_history")


async def test_a_destructive_write_is_not_sent_twice(server: tuple[list[Any], Path]) -> None:
    tools, log = server
    order = [call("place_order", {"item": "box"})]
    agent, _ = agent_with(tools, order, order, destructive={"place_order"})

    handler = agent.run(user_msg="Order a box")
    await handler

    assert reached(log) == ["place_order box"]  # though its receipt (a new order id) differs every time
    assert (await tool_results(handler.ctx))[-1].startswith("Refused: place_order already succeeded")


async def test_an_is_error_result_is_a_failure(server: tuple[list[Any], Path]) -> None:
    tools, log = server
    customs = [[call("customs_status", {"tracking_number": f"FR-{n}"})] for n in range(5)]
    agent, script = agent_with(tools, *customs, max_errors_in_a_row=3)

    output = await agent.run(user_msg="Customs status of my parcels?")

    assert len(reached(log)) == 3 and script.calls == 3
    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
