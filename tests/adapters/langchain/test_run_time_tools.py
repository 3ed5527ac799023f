"""Tool names in the policy next to MCP tools (issue 18 item 4), on the real ``create_agent`` loop with a real
stdio MCP server (the shared ``support.mcp_carrier``) through ``langchain-mcp-adapters``.

The check reads the tools each model call is offered (``request.tools``), at the first model call: MCP tools
given to ``create_agent`` are among them, and so are tools a middleware listed before the guard adds at run
time (LangChain's way for tools created at run time: ``request.tools`` in ``wrap_model_call``, run in
``wrap_tool_call``), so a limit on one passes and is enforced. Added by a middleware listed after the guard,
they are not: the check fails, naming the agent's tools; ``RepeatGuardMiddleware(check_tools=False)`` is the
way through, and the limit still holds.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, ToolCallRequest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from mcp import ClientSession
from repeat_hooks_langchain import RepeatGuardMiddleware
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message, steps
from support import MCP_CARRIER

from repeat_hooks import GuardSetupError

FR1 = {"tracking_number": "FR-1"}
USER = {"messages": [("user", "Where is FR-1?")]}
CONFIG: Any = {"configurable": {"thread_id": "t1"}, "recursion_limit": 40}
TWICE = steps(
    call_message(("track_parcel", FR1)),
    call_message(("track_parcel", FR1)),
    then=lambda messages: AIMessage(content="In transit."),
)


def carrier(tmp_path: Path) -> tuple[MultiServerMCPClient, Path]:
    """A client of the carrier's ``track_parcel`` over stdio, and the log of the calls that reached it."""
    log = tmp_path / "reached.log"
    log.touch()
    connection: Any = {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(MCP_CARRIER), "track_parcel"],
        "env": {**os.environ, "CARRIER_LOG": str(log)},
    }
    return MultiServerMCPClient({"carrier": connection}), log


@tool
def list_hubs() -> str:
    """The carrier's hubs."""
    return "Lyon, Paris"


class CarrierAtRunTime(AgentMiddleware[Any, Any, Any]):
    """Loads the carrier's MCP tools at the first model call and offers them from then on."""

    def __init__(self, session: ClientSession) -> None:
        super().__init__()
        self.session = session
        self.loaded: dict[str, BaseTool] = {}

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any]:
        if not self.loaded:
            self.loaded = {loaded.name: loaded for loaded in await load_mcp_tools(self.session)}
        return await handler(request.override(tools=[*request.tools, *self.loaded.values()]))

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        loaded = self.loaded.get(request.tool_call["name"])
        return await handler(request if loaded is None else request.override(tool=loaded))


def tool_texts(result: dict[str, Any]) -> list[str]:
    return [m.text for m in result["messages"] if isinstance(m, ToolMessage)]


async def test_a_limit_on_an_mcp_tool_passes_the_check_and_is_enforced(tmp_path: Path) -> None:
    client, log = carrier(tmp_path)
    model = ScriptedChatModel(then=TWICE)
    guard = RepeatGuardMiddleware(limits={"track_parcel": 1})
    async with client.session("carrier") as session:
        tools = await load_mcp_tools(session)
        agent = create_agent(model, tools=tools, middleware=[guard], checkpointer=InMemorySaver())
        result = await agent.ainvoke(USER, CONFIG)

    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    assert model.tool_results(1) == ["FR-1: in transit, hub Lyon"]
    (refusal,) = model.tool_results(2)
    assert refusal.startswith("Refused: you already called track_parcel with these exact arguments once")
    assert result["messages"][-1].content == "In transit."


async def test_a_tool_a_middleware_adds_before_the_guard_passes_the_check_and_is_enforced(tmp_path: Path) -> None:
    client, log = carrier(tmp_path)
    model = ScriptedChatModel(then=TWICE)
    guard = RepeatGuardMiddleware(limits={"track_parcel": 1})
    async with client.session("carrier") as session:
        middleware = [CarrierAtRunTime(session), guard]
        agent = create_agent(model, tools=[list_hubs], middleware=middleware, checkpointer=InMemorySaver())
        result = await agent.ainvoke(USER, CONFIG)

    assert model.tools_offered == ["list_hubs", "track_parcel"]
    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    (refusal,) = model.tool_results(2)
    assert refusal.startswith("Refused: you already called track_parcel with these exact arguments once")
    assert result["messages"][-1].content == "In transit."


async def test_a_tool_a_middleware_adds_after_the_guard_fails_the_check_by_default(tmp_path: Path) -> None:
    client, log = carrier(tmp_path)
    model = ScriptedChatModel(then=TWICE)
    guard = RepeatGuardMiddleware(limits={"track_parcel": 1})
    async with client.session("carrier") as session:
        middleware = [guard, CarrierAtRunTime(session)]
        agent = create_agent(model, tools=[list_hubs], middleware=middleware, checkpointer=InMemorySaver())
        with pytest.raises(GuardSetupError, match=r"names 'track_parcel'.*list_hubs"):
            await agent.ainvoke(USER, CONFIG)
    assert log.read_text() == "" and model.calls == 0  # caught before the first model call


async def test_check_tools_false_lets_a_run_time_tool_through_and_its_limit_holds(tmp_path: Path) -> None:
    client, log = carrier(tmp_path)
    model = ScriptedChatModel(then=TWICE)
    guard = RepeatGuardMiddleware(limits={"track_parcel": 1}, check_tools=False)
    async with client.session("carrier") as session:
        middleware = [guard, CarrierAtRunTime(session)]
        agent = create_agent(model, tools=[list_hubs], middleware=middleware, checkpointer=InMemorySaver())
        result = await agent.ainvoke(USER, CONFIG)

    assert model.tools_offered == ["list_hubs", "track_parcel"]
    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    assert model.tool_results(1) == ["FR-1: in transit, hub Lyon"]
    (refusal,) = model.tool_results(2)
    assert refusal.startswith("Refused: you already called track_parcel with these exact arguments once")
    assert result["messages"][-1].content == "In transit."
    assert tool_texts(result)[1] == refusal
