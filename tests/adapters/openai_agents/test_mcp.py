"""Local MCP servers' tools are guarded: a real stdio server (FastMCP) in a child process.

The guard compares what the model reads of a result (issue 16, item 2): a fresh request id in the
result's ``_meta``, which the model never reads, is not progress.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio, MCPToolCustomDataContext
from agents.run_config import RunConfig, ToolExecutionConfig
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

SERVER = textwrap.dedent(
    """
    import sys
    import uuid

    from mcp.server.fastmcp import FastMCP
    from mcp.types import CallToolResult, TextContent

    server = FastMCP("carrier")

    @server.tool()
    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        with open(sys.argv[1], "a") as log:
            log.write(tracking_number + "\\n")
        return f"{tracking_number}: in transit"

    @server.tool()
    def scan_parcel(tracking_number: str) -> CallToolResult:
        "The parcel's last scan: the same answer every time, with a fresh request id in the result's _meta."
        with open(sys.argv[1], "a") as log:
            log.write(tracking_number + "\\n")
        return CallToolResult(
            content=[TextContent(type="text", text=f"{tracking_number}: in transit, hub Lyon")],
            structuredContent={"tracking_number": tracking_number, "status": "in transit"},
            _meta={"request_id": str(uuid.uuid4())},
        )

    server.run("stdio")
    """
)


def carrier_server(tmp_path: Path, **options: Any) -> tuple[MCPServerStdio, Path]:
    """The carrier's stdio server in a child process, and the log of the calls that reached it."""
    script, log = tmp_path / "carrier_server.py", tmp_path / "reached.log"
    script.write_text(SERVER)
    log.touch()
    params = {"command": sys.executable, "args": [str(script), str(log)]}
    return MCPServerStdio(params=params, client_session_timeout_seconds=20, **options), log  # type: ignore[arg-type]


async def test_mcp_tools_are_refused_past_the_limit(tmp_path: Path) -> None:
    server, log = carrier_server(tmp_path, cache_tools_list=True)
    async with server:
        model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
        agent = guard_agent(
            Agent(name="parcel-tracker", model=model, mcp_servers=[server]),
            count="per_turn",
            match="tool",
            max_calls=2,
            max_refusals=3,
        )
        state = GuardState()

        result = await Runner.run(agent, "Keep checking FR-7731", context=state)

        # An unguarded agent sharing the server is not affected (its context holds no guard).
        plain_model = ScriptedModel(*[keep_calling("track_parcel", {"tracking_number": "X"})] * 3)
        plain = Agent(name="plain", model=plain_model, mcp_servers=[server])
        await Runner.run(plain, "Check X", context=None)

    reached = log.read_text().split()
    assert reached == ["FR-7731", "FR-7731", "X", "X", "X"]
    assert model.calls == 5
    assert str(model.outputs_received(3)["call_3"]).startswith("Refused: you already called track_parcel 2 times")
    assert result.final_output == state.turn.stop.message  # type: ignore[union-attr]


def test_hosted_tools_are_left_as_they_are(carrier: Any) -> None:
    from agents import WebSearchTool

    web = WebSearchTool()
    agent = guard_agent(Agent(name="researcher", tools=[web, carrier.tool]))
    assert agent.tools[0] is web  # out of reach: it runs at OpenAI, no guardrail can refuse it
    assert agent.tools[1] is not carrier.tool


@pytest.mark.parametrize("structured", [False, True], ids=["content", "structured-content"])
async def test_a_fresh_request_id_in_mcp_meta_is_not_progress(tmp_path: Path, structured: bool) -> None:
    metas: list[Any] = []

    def keep_meta(context: MCPToolCustomDataContext) -> None:
        metas.append(None if context.result_meta is None else dict(context.result_meta))

    server, log = carrier_server(tmp_path, use_structured_content=structured, custom_data_extractor=keep_meta)
    async with server:
        model = ScriptedModel(then=keep_calling("scan_parcel", {"tracking_number": "FR-7731"}))
        agent = guard_agent(Agent(name="parcel-tracker", model=model, mcp_servers=[server]))
        state = GuardState()

        result = await Runner.run(agent, "Keep checking FR-7731", context=state)

    assert log.read_text().split() == ["FR-7731", "FR-7731"]
    # The _meta really reached the SDK, a new request id each time: the model just never reads it.
    request_ids = [meta["request_id"] for meta in metas]
    assert len(request_ids) == 2 and request_ids[0] != request_ids[1]
    read = model.outputs_received(-1)  # what the model read for each call, by call id
    assert read["call_1"] == read["call_2"]
    assert "request_id" not in str(read["call_1"])
    assert "in transit" in str(read["call_1"])
    assert str(read["call_3"]).startswith("Refused")
    assert result.final_output == state.turn.stop.message  # type: ignore[union-attr]


@pytest.mark.parametrize("pre_approval", [False, True], ids=["default", "pre_approval_guardrails"])
async def test_mcp_require_approval_and_the_guards_refusals(tmp_path: Path, pre_approval: bool) -> None:
    # A local MCP server's require_approval is the server's own setting, applied to the tools the SDK builds for
    # each run: the guard's needs_approval wrapper cannot reach it. Two identical calls in one response, one
    # allowed: by default the SDK asks about both (the refused one too); with the SDK's pre-approval guardrails
    # the server's guardrails (the guard's included) run first, and the refused call is never asked about.
    server, log = carrier_server(tmp_path, cache_tools_list=True, require_approval="always")
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=pre_approval))
    twice = [tool_call("track_parcel", {"tracking_number": "FR-7731"}, call_id) for call_id in ("c1", "c2")]
    async with server:
        model = ScriptedModel(twice, [message("In transit.")])
        agent = guard_agent(
            Agent(name="parcel-tracker", model=model, mcp_servers=[server]), count="per_turn", max_calls=1
        )
        state = GuardState()

        paused = await Runner.run(agent, "Where is FR-7731?", context=state, run_config=config)
        asked = [item.call_id for item in paused.interruptions]
        resumed = paused.to_state()
        for item in resumed.get_interruptions():
            resumed.approve(item)
        result = await Runner.run(agent, resumed, run_config=config)

    assert asked == (["c1"] if pre_approval else ["c1", "c2"])
    assert log.read_text().split() == ["FR-7731"]  # either way the refused call never ran
    assert str(model.outputs_received(1)["c2"]).startswith("Refused: you already called track_parcel")
    assert result.final_output == "In transit." and state.turn.refusals == 1
