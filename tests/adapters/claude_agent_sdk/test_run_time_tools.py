"""Tool names in the policy next to MCP tools (issue 18 item 4), on the real Claude Code CLI (bundled with the
SDK) against the fake Messages API.

Every tool here is an MCP tool (``mcp__<server>__<tool>``). The check reads the tools Claude Code lists when
the session starts (its ``init`` line), once every MCP server has connected; a server still connecting then
lists its tools later, and the check is left out. Either way a limit on an MCP tool is enforced: an
in-process server's, and a stdio server's in a child process (the shared ``support.mcp_carrier``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from cas_parcels import allowed, call, carrier, converse, scripted
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, tool_use
from support import MCP_CARRIER

from repeat_hooks import GuardSetupError

FR1 = {"tracking_number": "FR-1"}
STDIO_TRACK = "mcp__carrier__track_parcel"


async def test_a_limit_on_an_in_process_mcp_tool_passes_the_check_and_is_enforced(tmp_path: Path) -> None:
    parcels = carrier()
    model = scripted({"Where is FR-1?": [call("track_parcel", FR1)] * 2})
    guard = RepeatGuardHooks(limits={"mcp__parcels__track_parcel": 1})
    with FakeMessagesAPI(model) as api:
        (turn,) = await converse(
            guard, api, tmp_path, ["Where is FR-1?"], mcp_servers={"parcels": parcels.server}, allowed_tools=allowed()
        )

    assert parcels.count("track_parcel") == 1
    assert turn.seen[1].startswith("Refused: you already called mcp__parcels__track_parcel")
    assert turn.result.result == "done"


async def test_a_limit_on_a_stdio_mcp_servers_tool_is_enforced(tmp_path: Path) -> None:
    log = tmp_path / "reached.log"
    log.touch()
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(MCP_CARRIER), "track_parcel"],
        "env": {"CARRIER_LOG": str(log), "PATH": os.environ.get("PATH", "")},
    }
    model = scripted({"Where is FR-1?": [[tool_use(STDIO_TRACK, FR1)]] * 2})
    guard = RepeatGuardHooks(limits={STDIO_TRACK: 1})
    with FakeMessagesAPI(model) as api:
        (turn,) = await converse(
            guard, api, tmp_path, ["Where is FR-1?"], mcp_servers={"carrier": server}, allowed_tools=[STDIO_TRACK]
        )

    assert log.read_text().splitlines() == ["track_parcel FR-1"]
    assert "FR-1: in transit, hub Lyon" in turn.seen[0]
    assert turn.seen[1].startswith(f"Refused: you already called {STDIO_TRACK}")


async def test_check_tools_false_lets_a_tool_added_later_be_named(tmp_path: Path) -> None:
    """A name Claude Code does not list at the session's start (a tool an MCP server adds later) fails the
    query by default; with ``check_tools=False`` the session runs and the other limits still hold."""
    later = {"mcp__parcels__track_parcel": 1, "mcp__parcels__cancel_parcel": 0}
    parcels = carrier()
    model = scripted({"Where is FR-1?": [call("track_parcel", FR1)] * 2})
    guard = RepeatGuardHooks(limits=later, check_tools=False)
    with FakeMessagesAPI(model) as api:
        (turn,) = await converse(
            guard, api, tmp_path, ["Where is FR-1?"], mcp_servers={"parcels": parcels.server}, allowed_tools=allowed()
        )

    assert parcels.count("track_parcel") == 1
    assert turn.seen[1].startswith("Refused: you already called mcp__parcels__track_parcel")

    checked = RepeatGuardHooks(limits=later)
    parcels = carrier()
    with (
        FakeMessagesAPI(scripted({"Where is FR-1?": [call("track_parcel", FR1)]})) as api,
        pytest.raises(GuardSetupError, match="mcp__parcels__cancel_parcel"),
    ):
        await converse(
            checked,
            api,
            tmp_path,
            ["Where is FR-1?"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
        )
    assert parcels.count("track_parcel") == 0
