"""Tool names in the policy next to MCP tools (issue 18 item 4), on pydantic-ai's real loop with a real stdio
MCP server (the shared ``support.mcp_carrier``).

The check reads the first request's tools, which hold an ``MCPToolset``'s: a limit on an MCP tool passes it
and is enforced. A tool that joins the run later (a dynamic toolset connecting the server mid-run) is not
there yet: the check fails, naming the tools the agent has; ``RepeatGuard(check_tools=False)`` is the way
through, and the limit still holds once the tool is there.

A tool a ``prepare`` hides at the first request (a tool's, a ``PrepareTools`` capability's, a toolset's
``prepared`` / ``filtered``) is one the agent registered: a limit on it passes the check, under the name the
model calls it by (prefixed, renamed), and holds; a typo of its name still fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.capabilities import PrepareTools
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset
from repeat_hooks_pydantic_ai import RepeatGuard, refusals_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, steps
from support import MCP_CARRIER

from repeat_hooks import GuardSetupError

INIT = 60.0
"""Seconds a stdio server may take to start (pydantic-ai's default, 5, is too short on a loaded machine)."""
FR1 = ("track_parcel", {"tracking_number": "FR-1"})


def carrier(tmp_path: Path) -> tuple[MCPToolset[Any], Path]:
    """The carrier's ``track_parcel`` over stdio, and the log of the calls that reached it."""
    log = tmp_path / "reached.log"
    log.touch()
    transport = StdioTransport(
        command=sys.executable, args=[str(MCP_CARRIER), "track_parcel"], env={**os.environ, "CARRIER_LOG": str(log)}
    )
    return MCPToolset(transport, init_timeout=INIT), log


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
    assert RepeatGuard.from_spec(check_tools=False, max_calls=2).core.check_tools is False
    assert RepeatGuard().core.check_tools is True


# -- tools a prepare function hides at the first request -------------------------------------------------


def verify(customer: str) -> str:
    """Verify the customer."""
    return f"{customer} verified"


def refund_order(order_id: str) -> str:
    """Refund the order (offered once the customer is verified)."""
    REFUNDED.append(order_id)
    return f"{order_id} refunded"


REFUNDED: list[str] = []


async def after_the_first_step(ctx: RunContext[None], tool_def: ToolDefinition) -> ToolDefinition | None:
    """A tool's ``prepare``: offered from the run's second request on."""
    return tool_def if ctx.run_step > 1 else None


async def without_refunds_at_first(ctx: RunContext[None], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
    """A ``PrepareTools`` capability's or a toolset's ``prepared`` function: ``refund_order`` is offered from
    the second request on."""
    return [tool for tool in tool_defs if ctx.run_step > 1 or tool.name != "refund_order"]


def hidden_refunds(way: str, guard: RepeatGuard, model: ScriptedModel) -> Agent[None, str]:
    """An agent whose ``refund_order`` (``shop_refund_order`` when prefixed) is hidden at the first request."""
    if way == "tool prepare":
        return Agent(model, tools=[verify, Tool(refund_order, prepare=after_the_first_step)], capabilities=[guard])
    if way == "PrepareTools capability":
        return Agent(model, tools=[verify, refund_order], capabilities=[PrepareTools(without_refunds_at_first), guard])
    if way == "filtered toolset":
        shop = FunctionToolset([verify, refund_order]).filtered(
            lambda ctx, tool: ctx.run_step > 1 or tool.name == "verify"
        )
        return Agent(model, toolsets=[shop], capabilities=[guard])
    if way == "renamed toolset":
        shop = FunctionToolset([verify, refund_order]).prepared(without_refunds_at_first)
        return Agent(model, toolsets=[shop.renamed({"refund": "refund_order"})], capabilities=[guard])
    assert way == "prefixed toolset"
    shop = FunctionToolset([verify, Tool(refund_order, prepare=after_the_first_step)]).prefixed("shop")
    return Agent(model, toolsets=[shop], capabilities=[guard])


HIDDEN = {
    "tool prepare": "refund_order",
    "PrepareTools capability": "refund_order",
    "filtered toolset": "refund_order",
    "renamed toolset": "refund",
    "prefixed toolset": "shop_refund_order",
}


@pytest.mark.parametrize("way", HIDDEN)
async def test_a_limit_on_a_tool_hidden_at_the_first_request_passes_the_check_and_is_enforced(way: str) -> None:
    refund = HIDDEN[way]
    verify_name = "shop_verify" if way == "prefixed toolset" else "verify"
    REFUNDED.clear()
    A1 = (refund, {"order_id": "A1"})
    model = ScriptedModel(steps([(verify_name, {"customer": "c"})], [A1], [A1], "Refunded."))
    agent = hidden_refunds(way, RepeatGuard(limits={refund: 1}), model)

    result = await agent.run("Refund A1")

    assert REFUNDED == ["A1"]  # ran once; the repeat was refused
    assert model.tool_returns(2) == ["A1 refunded"]
    (refusal,) = model.tool_returns(3)
    assert refusal.startswith(f"Refused: you already called {refund} with these exact arguments once")
    assert result.output == "Refunded."


@pytest.mark.parametrize("way", HIDDEN)
async def test_a_typo_of_a_tool_hidden_at_the_first_request_still_fails_the_check(way: str) -> None:
    refund = HIDDEN[way]
    REFUNDED.clear()
    model = ScriptedModel(steps([(refund, {"order_id": "A1"})], "Refunded."))
    agent = hidden_refunds(way, RepeatGuard(destructive={refund + "s"}), model)

    with pytest.raises(GuardSetupError, match=rf"destructive=\.\.\.\) names '{refund}s'.*did you mean '{refund}'"):
        await agent.run("Refund A1")
    assert model.calls == 0 and REFUNDED == []
