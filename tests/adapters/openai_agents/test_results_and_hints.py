"""What the core is told about each call (issue 9): the tool's result, and MCP's ``readOnlyHint``.

The guard here is a ``StopRepeatedCalls`` that also writes down what the adapter passed to its
``pre_tool_call`` / ``post_tool_call``: the SDK's loop, guardrails and MCP client are the real ones.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool
from agents.mcp import MCPServerStdio
from pydantic import PrivateAttr
from repeat_hooks_openai_agents import GuardHooks, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

from repeat_hooks import Refusal, StopRepeatedCalls, ToolCall


class Recording(StopRepeatedCalls):
    """A guard that also keeps what the adapter told it about each call."""

    _checked: list[ToolCall] = PrivateAttr(default_factory=list)
    _recorded: list[tuple[ToolCall, bool, Any]] = PrivateAttr(default_factory=list)

    def pre_tool_call(self, call: ToolCall, turn_id: str | None = None) -> Refusal | None:
        self._checked.append(call)
        return super().pre_tool_call(call, turn_id)

    def post_tool_call(
        self,
        call: ToolCall,
        ok: bool = True,
        turn_id: str | None = None,
        delivery_id: str | None = None,
        *,
        result: Any = None,
    ) -> None:
        self._recorded.append((call, ok, result))
        super().post_tool_call(call, ok, turn_id, delivery_id, result=result)


async def test_each_result_reaches_the_core_and_function_tools_carry_no_read_only_hint() -> None:
    scans = iter(["FR-7731: in transit, hub Lyon", "FR-7731: out for delivery"])

    @function_tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        return next(scans)

    @function_tool
    def cancel_parcel(tracking_number: str) -> str:
        """Cancel a parcel."""
        raise ConnectionError("carrier down")

    model = ScriptedModel(
        [tool_call("track_parcel", {"tracking_number": "FR-7731"}, "c1")],
        [tool_call("cancel_parcel", {"tracking_number": "FR-7731"}, "c2")],
        [tool_call("track_parcel", {"tracking_number": "FR-7731"}, "c3")],
        [message("It is out for delivery.")],
    )
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel, cancel_parcel]))
    guard = Recording()

    result = await Runner.run(agent, "Where is FR-7731?", context=guard, hooks=GuardHooks())

    assert result.final_output == "It is out for delivery."
    assert [(c.name, ok, out) for c, ok, out in guard._recorded] == [
        ("track_parcel", True, "FR-7731: in transit, hub Lyon"),
        ("cancel_parcel", False, "An error occurred while running the tool. Please try again."),
        ("track_parcel", True, "FR-7731: out for delivery"),
    ]
    assert [c.read_only for c in guard._checked] == [None, None, None]
    # The core keeps digests only: no result text in the saved state.
    assert "out for delivery" not in guard.model_dump_json()


SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    server = FastMCP("carrier")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        return f"{tracking_number}: in transit"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def notify_customer(text: str) -> str:
        "Tell the customer."
        return "notified"

    @server.tool()
    def ping() -> str:
        "Is the carrier up?"
        return "pong"

    server.run("stdio")
    """
)


async def test_mcp_tools_carry_their_read_only_hint_and_results(tmp_path: Path) -> None:
    script = tmp_path / "carrier_server.py"
    script.write_text(SERVER)
    params = {"command": sys.executable, "args": [str(script)]}
    # The SDK's default: no tool-list cache (test_mcp.py runs with it), the tools are listed on every run.
    server = MCPServerStdio(params=params, client_session_timeout_seconds=20)  # type: ignore[arg-type]
    async with server:
        model = ScriptedModel(
            [tool_call("track_parcel", {"tracking_number": "FR-7731"}, "m1")],
            [tool_call("notify_customer", {"text": "Still in transit"}, "m2")],
            [tool_call("ping", {}, "m3")],
            [message("Done.")],
        )
        agent = guard_agent(Agent(name="parcel-tracker", model=model, mcp_servers=[server]))
        guard = Recording()

        result = await Runner.run(agent, "Track and tell", context=guard, hooks=GuardHooks())

    assert result.final_output == "Done."
    # readOnlyHint as the server declared it; None when it said nothing (the policy's read_only decides).
    checked = [(c.name, c.read_only) for c in guard._checked]
    assert checked == [("track_parcel", True), ("notify_customer", False), ("ping", None)]
    recorded = [(c.name, c.read_only, ok) for c, ok, _ in guard._recorded]
    assert recorded == [("track_parcel", True, True), ("notify_customer", False, True), ("ping", None, True)]
    assert "FR-7731: in transit" in str(guard._recorded[0][2])
    assert "pong" in str(guard._recorded[2][2])
