"""MCP tools through Strands' ``MCPClient`` (a real FastMCP stdio server: the shared ``support.mcp_carrier``):
the server's explicit hints reach the policy as ``ToolCall`` hints, results are compared as the model reads
them (not their ``_meta``), and ``isError`` results count as failures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters, stdio_client
from repeat_hooks_strands import STOP_KEY, RepeatGuardHooks
from repeat_hooks_strands.calls import mcp_annotations, tool_call
from repeat_hooks_strands.testing import ScriptedModel, tool_results, tool_use
from strands import Agent
from strands.tools.mcp import MCPClient
from support import MCP_CARRIER

from repeat_hooks.kit import hints

TOOLS = ("track_parcel", "place_order", "parcel_history", "parcel_events", "customs_status")
FR = {"tracking_number": "FR-7731"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Any], Path]]:
    log = tmp_path_factory.mktemp("mcp") / "carrier.log"
    log.touch()
    params = StdioServerParameters(
        command=sys.executable, args=[str(MCP_CARRIER), *TOOLS], env={"CARRIER_LOG": str(log)}
    )
    with MCPClient(lambda: stdio_client(params)) as client:
        yield list(client.list_tools_sync()), log


def reached(log: Path) -> list[str]:
    lines = log.read_text().splitlines()
    log.write_text("")
    return lines


def agent_with(tools: list[Any], *replies: Any, **settings: Any) -> Agent:
    return Agent(
        model=ScriptedModel(*replies, "Done."),
        tools=tools,
        hooks=[RepeatGuardHooks(**settings)],
        callback_handler=None,
    )


def test_only_the_servers_explicit_hints_reach_the_policy(server: tuple[list[Any], Path]) -> None:
    tools, _ = server

    found = {tool.tool_name: hints(mcp_annotations(tool)) for tool in tools}
    call = tool_call(
        tool_use("place_order", {"item": "box"}, "c1"), next(t for t in tools if t.tool_name == "place_order")
    )

    assert found == {
        "track_parcel": {"read_only": True},
        "place_order": {"read_only": False, "destructive": True, "idempotent": False},
        "parcel_history": {},  # MCP's defaults for an unannotated tool say nothing
        "parcel_events": {},
        "customs_status": {},
    }
    assert (call.read_only, call.destructive, call.idempotent, call.call_id) == (False, True, False, "c1")


def test_a_read_only_call_between_two_repeats_restarts_nothing(server: tuple[list[Any], Path]) -> None:
    tools, log = server
    history, track = [tool_use("parcel_history", FR)], [tool_use("track_parcel", FR)]
    agent = agent_with(tools, history, history, track, history)

    agent("Check FR-7731")

    # track_parcel is read-only on the server's word: the 3rd parcel_history is still a repeat.
    assert reached(log) == ["parcel_history FR-7731"] * 2 + ["track_parcel FR-7731"]
    assert tool_results(agent)[-1].startswith("Refused: you already called parcel_history")


def test_a_destructive_write_is_not_sent_twice(server: tuple[list[Any], Path]) -> None:
    tools, log = server
    order = [tool_use("place_order", {"item": "box"})]
    agent = agent_with(tools, order, order)

    agent("Order a box")

    assert reached(log) == ["place_order box"]  # though its receipt (a new order id) differs every time
    assert tool_results(agent)[-1].startswith("Refused: place_order already succeeded")


def test_results_are_compared_without_their_meta_and_is_error_is_a_failure(server: tuple[list[Any], Path]) -> None:
    tools, log = server
    events = [tool_use("parcel_events", FR)]
    agent = agent_with(tools, events, events, events)

    agent("Scan events of FR-7731?")

    assert reached(log) == ["parcel_events FR-7731"] * 2
    customs = [[tool_use("customs_status", {"tracking_number": f"FR-{n}"})] for n in range(5)]
    failing = agent_with(tools, *customs, max_errors_in_a_row=3)

    result = failing("Customs status of my parcels?")

    assert len(reached(log)) == 3
    assert result.state[STOP_KEY] == "too_many_errors"
