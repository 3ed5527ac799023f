"""MCP tools through Agent Framework's own ``MCPStdioTool`` (a real FastMCP stdio server: the shared
``support.mcp_carrier``): results are compared as the model reads them (not their ``_meta``), an ``isError`` result
is a failed call (the tool raises out of ``call_next()``), and a write the policy names destructive is not sent
twice. Agent Framework 1.23 keeps no MCP annotations on the tools it makes (``_mcp.py:3118`` hands them to a private
callback only), so the server's ``readOnlyHint`` does not reach the guard: the policy names such tools.

Agent Framework 1.23's MCP client needs ``mcp>=2.2`` (``from mcp import Client``, ``_mcp.py:2374``), while this
suite's other adapters pin ``mcp<2``: where the installed ``mcp`` is 1.x the module is skipped, saying so, and runs in
its own environment (``pip install "mcp>=2.2,<3"``). The carrier server is FastMCP, which ``mcp`` 2 renamed: it runs
under ``$REPEAT_HOOKS_CARRIER_PYTHON`` (an interpreter with ``mcp<2``), else this one."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, FunctionTool, MCPStdioTool
from repeat_hooks_agent_framework import RepeatGuardMiddleware, stop_of
from repeat_hooks_agent_framework.calls import tool_call
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, tool_results
from support import MCP_CARRIER

from repeat_hooks import StopReason

try:
    from mcp import Client  # noqa: F401
except ImportError:
    pytest.skip(
        f"Agent Framework's MCPStdioTool needs mcp>=2.2 (agent_framework/_mcp.py:2374); mcp {version('mcp')} is "
        "installed (the other adapters' tests pin mcp<2)",
        allow_module_level=True,
    )

CARRIER_PYTHON = os.environ.get("REPEAT_HOOKS_CARRIER_PYTHON", sys.executable)
TOOLS = ("track_parcel", "place_order", "parcel_history", "parcel_events", "customs_status")
FR = {"tracking_number": "FR-7731"}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "carrier.log"
    path.touch()
    return path


def carrier(log: Path) -> MCPStdioTool:
    return MCPStdioTool(
        name="carrier", command=CARRIER_PYTHON, args=[str(MCP_CARRIER), *TOOLS], env={"CARRIER_LOG": str(log)}
    )


def reached(log: Path) -> list[str]:
    return log.read_text().splitlines()


async def run(log: Path, *replies: Any, **settings: Any) -> tuple[Any, list[str]]:
    async with carrier(log) as mcp:
        agent = Agent(
            client=ScriptedClient(*replies, "Done."), tools=[mcp], middleware=[RepeatGuardMiddleware(**settings)]
        )
        response = await agent.run("Check FR-7731")
    return response, reached(log)


async def test_the_servers_tools_carry_no_hints_in_agent_framework(log: Path) -> None:
    async with carrier(log) as mcp:
        tools: list[FunctionTool] = list(mcp.functions)

    calls = [tool_call(tool.name, FR, "c1", tool) for tool in tools]
    assert sorted(tool.name for tool in tools) == sorted(TOOLS)
    assert all((call.read_only, call.destructive, call.idempotent) == (None, None, None) for call in calls)


async def test_a_read_only_call_named_by_the_policy_restarts_nothing(log: Path) -> None:
    history, track = [function_call("parcel_history", FR)], [function_call("track_parcel", FR)]

    response, lines = await run(log, history, history, track, history, read_only={"track_parcel"})

    assert lines == ["parcel_history FR-7731"] * 2 + ["track_parcel FR-7731"]
    assert tool_results(response)[-1].startswith("Refused: you already called parcel_history")


async def test_a_destructive_write_is_not_sent_twice(log: Path) -> None:
    order = [function_call("place_order", {"item": "box"})]

    response, lines = await run(log, order, order, destructive={"place_order"})

    assert lines == ["place_order box"]  # though its receipt (a new order id) differs every time
    assert tool_results(response)[-1].startswith("Refused: place_order already succeeded")


async def test_results_are_compared_without_their_meta_and_is_error_is_a_failure(log: Path) -> None:
    events = [function_call("parcel_events", FR)]

    response, lines = await run(log, events, events, events)

    assert lines == ["parcel_events FR-7731"] * 2  # a fresh _meta request id each time: the same result
    assert tool_results(response)[-1].startswith("Refused")

    log.write_text("")
    customs = [[function_call("customs_status", {"tracking_number": f"FR-{n}"})] for n in range(5)]
    failing, lines = await run(log, *customs, max_errors_in_a_row=2)

    assert len(lines) == 2
    assert (stop := stop_of(failing)) is not None and stop.reason is StopReason.TOO_MANY_ERRORS
