"""What the core is told about each call (issue 9): the tool's result, and MCP's explicit annotations.

The policy here is a ``Policy`` that also writes down what the adapter passed to its ``decide_tool_calls`` /
``record_tool_result``: the SDK's loop, guardrails and MCP client are the real ones.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.mcp import MCPServerStdio
from pydantic import PrivateAttr
from repeat_hooks_openai_agents import GuardState, Policy, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

from repeat_hooks import Refusal, ToolCall


class Recording(Policy):
    """A policy that also keeps what the adapter told it about each call."""

    _checked: list[ToolCall] = PrivateAttr(default_factory=list)
    _recorded: list[tuple[ToolCall, bool, Any]] = PrivateAttr(default_factory=list)

    def decide_tool_calls(
        self, state: GuardState, calls: Sequence[ToolCall], *, turn_id: str | None = None
    ) -> list[Refusal | None]:
        self._checked.extend(calls)
        return super().decide_tool_calls(state, calls, turn_id=turn_id)

    def record_tool_result(
        self,
        state: GuardState,
        call: ToolCall,
        *,
        ok: bool = True,
        result: Any = None,
        turn_id: str | None = None,
        delivery_id: str | None = None,
    ) -> None:
        self._recorded.append((call, ok, result))
        super().record_tool_result(state, call, ok=ok, result=result, turn_id=turn_id, delivery_id=delivery_id)


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
    guard = Recording()
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel, cancel_parcel]), guard)
    state = GuardState()

    result = await Runner.run(agent, "Where is FR-7731?", context=state)

    assert result.final_output == "It is out for delivery."
    assert [(c.name, ok, out) for c, ok, out in guard._recorded] == [
        ("track_parcel", True, "FR-7731: in transit, hub Lyon"),
        ("cancel_parcel", False, "An error occurred while running the tool. Please try again."),
        ("track_parcel", True, "FR-7731: out for delivery"),
    ]
    assert [(c.read_only, c.destructive, c.idempotent) for c in guard._checked] == [(None, None, None)] * 3
    # The core keeps digests only: no result text in the saved state.
    assert "out for delivery" not in state.model_dump_json()


@pytest.mark.parametrize("changing", [True, False])
async def test_a_repeat_whose_result_changed_is_progress(changing: bool) -> None:
    reached: list[str] = []

    @function_tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        return f"scan {len(reached)}" if changing else "in transit"

    model = ScriptedModel(*[[tool_call("track_parcel", {"tracking_number": "FR-7731"}, f"c{i}")] for i in range(3)])
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), count="progress", max_calls=2)

    await Runner.run(agent, "Track FR-7731", context=GuardState())

    # A new scan each time: the model is learning something, so the 3rd identical call runs. The same
    # scan each time: the 3rd is refused. Only the tool's result, which the adapter passes on, tells them apart.
    assert len(reached) == (3 if changing else 2)


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

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True))
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
        guard = Recording()
        agent = guard_agent(Agent(name="parcel-tracker", model=model, mcp_servers=[server]), guard)

        result = await Runner.run(agent, "Track and tell", context=GuardState())

    assert result.final_output == "Done."
    # The annotations as the server declared them; None where it said nothing (the policy's settings decide).
    checked = [(c.name, c.read_only, c.destructive, c.idempotent) for c in guard._checked]
    assert checked == [
        ("track_parcel", True, None, None),
        ("notify_customer", False, False, True),
        ("ping", None, None, None),
    ]
    recorded = [(c.name, c.read_only, ok) for c, ok, _ in guard._recorded]
    assert recorded == [("track_parcel", True, True), ("notify_customer", False, True), ("ping", None, True)]
    assert "FR-7731: in transit" in str(guard._recorded[0][2])
    assert "pong" in str(guard._recorded[2][2])


HUBS_SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    server = FastMCP("carrier")
    read_only = ToolAnnotations(readOnlyHint=True) if sys.argv[2] == "read-only" else None

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        with open(sys.argv[1], "a") as log:
            log.write(tracking_number + "\\n")
        return f"{tracking_number}: in transit"

    @server.tool(annotations=read_only)
    def list_hubs() -> str:
        "The carrier's hubs."
        return "Lyon, Paris"

    server.run("stdio")
    """
)


@pytest.mark.parametrize("hubs", ["read-only", "unannotated"])
async def test_a_read_only_mcp_call_in_between_does_not_restart_the_count(tmp_path: Path, hubs: str) -> None:
    script, log = tmp_path / "hubs_server.py", tmp_path / "reached.log"
    script.write_text(HUBS_SERVER)
    log.touch()
    server = MCPServerStdio(
        params={"command": sys.executable, "args": [str(script), str(log), hubs]},
        client_session_timeout_seconds=20,
    )
    track = {"tracking_number": "FR-7731"}
    async with server:
        model = ScriptedModel(
            [tool_call("track_parcel", track, "h1")],
            [tool_call("list_hubs", {}, "h2")],
            [tool_call("track_parcel", track, "h3")],
            [tool_call("track_parcel", track, "h4")],
            [message("Done.")],
        )
        agent = guard_agent(Agent(name="parcel-tracker", model=model, mcp_servers=[server]), max_calls=2)

        await Runner.run(agent, "Track FR-7731", context=GuardState())

    reached = log.read_text().split()
    if hubs == "read-only":
        # Nothing could have changed the parcel's status since the 2nd run: the 3rd identical call is refused.
        assert reached == ["FR-7731", "FR-7731"]
        assert str(model.outputs_received(4)["h4"]).startswith("Refused")
    else:
        # list_hubs may have changed something (the server does not say otherwise): the count restarted.
        assert reached == ["FR-7731"] * 3


ORDERS_SERVER = textwrap.dedent(
    """
    import sys
    from mcp.server.fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    server = FastMCP("shop")
    placed = []

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
    def place_order(item: str) -> str:
        "Place an order: a new order number every time."
        placed.append(item)
        with open(sys.argv[1], "a") as log:
            log.write(item + "\\n")
        return f"order ORD-{len(placed)} placed for {item}"

    server.run("stdio")
    """
)


async def test_an_mcp_write_annotated_destructive_is_not_sent_twice(tmp_path: Path) -> None:
    script, log = tmp_path / "shop_server.py", tmp_path / "placed.log"
    script.write_text(ORDERS_SERVER)
    log.touch()
    server = MCPServerStdio(
        params={"command": sys.executable, "args": [str(script), str(log)]},
        client_session_timeout_seconds=20,
    )
    async with server:
        model = ScriptedModel(*[[tool_call("place_order", {"item": "box"}, f"o{i}")] for i in range(3)])
        agent = guard_agent(Agent(name="shop", model=model, mcp_servers=[server]))  # Policy(): nothing named

        await Runner.run(agent, "Order a box", context=GuardState())

    # The server's own annotations say a repeat does it twice: though each receipt is new, the same order
    # that already succeeded is refused until something else changes.
    assert log.read_text().split() == ["box"]
    assert str(model.outputs_received(2)["o1"]).startswith("Refused")
    assert str(model.outputs_received(3)["o2"]).startswith("Refused")
