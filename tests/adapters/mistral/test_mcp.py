"""rc11's MCP path (``agents.Harness(mcps={name: agents.RemoteMCP(url=...)})``, streamable HTTP) is guarded.

A real FastMCP server (the shared ``support.mcp_carrier``) runs in a child process on a loopback port. Its
tools here answer the same thing every time, stamped with a fresh request id in the result's ``_meta``: rc11's
MCP client receives the ``_meta``
(seen on the SDK's own ``mcp.ClientSession``), the model never reads it, and neither does the guard, so
under the default ``Policy()`` the third same call is refused.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp
import pytest
from mistralai.agents import agents
from repeat_hooks_mistral import Policy, RepeatGuardHook, events_of
from repeat_hooks_mistral.testing import ScriptedModel, run_turn, tool_messages
from support import MCP_CARRIER

TOOLS = ("parcel_events", "parcel_status")
"""The shared carrier's tools that answer the same every time, with a fresh request id in ``_meta``."""


class Carrier:
    """The FastMCP server: its URL, and which tool calls reached it."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def reached(self) -> list[str]:
        return self.log.read_text().splitlines()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def carrier_server(tmp_path: Path) -> Iterator[Carrier]:
    """The server in a child process, stopped by its PID when the test ends."""
    log = tmp_path / "reached.log"
    log.touch()
    port = _free_port()
    argv = [sys.executable, str(MCP_CARRIER), "--http", str(port), *TOOLS]
    with (tmp_path / "server.err").open("w") as errors:
        env = {**os.environ, "CARRIER_LOG": str(log)}
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    problem = (tmp_path / "server.err").read_text()
                    raise RuntimeError(f"the MCP server did not start: {problem}") from None
                time.sleep(0.1)
        yield Carrier(f"http://127.0.0.1:{port}/mcp", log)
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@pytest.fixture
def mcp_results(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ``CallToolResult`` rc11's MCP client receives (its own ``mcp.ClientSession``, unchanged)."""
    received: list[Any] = []
    call_tool = mcp.ClientSession.call_tool

    async def spy(self: mcp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        result = await call_tool(self, *args, **kwargs)
        received.append(result)
        return result

    monkeypatch.setattr(mcp.ClientSession, "call_tool", spy)
    return received


class DefaultGuard(RepeatGuardHook):
    """The default policy: ``Policy()`` (progress, ``max_calls=2``)."""


@pytest.mark.parametrize("tool", TOOLS)
async def test_the_same_answer_with_a_fresh_meta_request_id_is_refused_the_third_time(
    carrier_server: Carrier, mcp_results: list[Any], tool: str, agent_for: Any
) -> None:
    model = ScriptedModel.keep_calling(tool, {"tracking_number": "FR-7731"})
    mcps = {"carrier": agents.RemoteMCP(url=carrier_server.url)}
    agent = agent_for(model, DefaultGuard(), tools=(), mcps=mcps, max_iterations=10)
    async with await agent.create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")
        events = await events_of(session, guard=DefaultGuard)

    assert carrier_server.reached() == [f"{tool} FR-7731"] * 2, "the tool ran exactly twice"
    request_ids = [result.meta["request_id"] for result in mcp_results]
    assert len(request_ids) == 2 and len(set(request_ids)) == 2, "each result reached rc11 with a fresh _meta id"
    messages = tool_messages(model.requests[-1])
    assert messages[0] == messages[1] and "request_id" not in messages[0], "the model never reads _meta"
    assert messages[2].startswith("Refused: you already called carrier." + tool)
    assert events[0].tool == f"carrier.{tool}", "an MCP server's tools are named group.tool"


class LimitedGuard(RepeatGuardHook):
    """One run of the MCP tool ``carrier.parcel_status`` per turn (a name rc11 discovers at run time)."""

    policy = Policy(limits={"carrier.parcel_status": 1})


async def test_a_limit_on_an_mcp_tool_passes_the_check_and_is_enforced(carrier_server: Carrier, agent_for: Any) -> None:
    # An MCP server's tools (group.tool) are discovered by rc11 when the agent runs, after the check of the
    # agent's own tools: a group.tool name in the policy is taken as one of them, and its limit holds.
    model = ScriptedModel.keep_calling("parcel_status", {"tracking_number": "FR-7731"})
    mcps = {"carrier": agents.RemoteMCP(url=carrier_server.url)}
    agent = agent_for(model, LimitedGuard(), tools=(), mcps=mcps, max_iterations=10)
    async with await agent.create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")

    assert carrier_server.reached() == ["parcel_status FR-7731"]
    messages = tool_messages(model.requests[-1])
    assert messages[1].startswith("Refused: you already called carrier.parcel_status")
