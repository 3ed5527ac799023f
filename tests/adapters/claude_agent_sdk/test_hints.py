"""What the guard knows of a tool's effects: an MCP tool's own annotations, and Claude Code's read-only tools."""

from __future__ import annotations

from pathlib import Path

from cas_parcels import TRACKED, allowed, call, carrier, converse, scripted
from claude_agent_sdk import StreamEvent, ToolAnnotations
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, tool_use

from repeat_hooks import TokenPrices

TRACK, HISTORY, SCANS = call("track_parcel"), call("parcel_history"), call("parcel_scans")
ORDER = call("place_order", {"tracking_number": "box"})


async def test_mcp_annotations_and_the_built_in_read_only_tools(tmp_path: Path) -> None:
    notes = tmp_path / "work" / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("FR-7731 was rerouted via Lyon.\n")
    read = [tool_use("Read", {"file_path": str(notes)})]
    parcels = carrier(
        annotations={
            "parcel_history": ToolAnnotations(readOnlyHint=True),
            "place_order": ToolAnnotations(destructiveHint=True, idempotentHint=False),
        }
    )
    model = scripted(
        {
            "With a read-only MCP tool": [TRACK, TRACK, HISTORY, TRACK],
            "With an unannotated MCP tool": [TRACK, TRACK, SCANS, TRACK],
            "Order a box": [ORDER, ORDER],
            "With Claude Code's Read": [TRACK, TRACK, read, TRACK],
        }
    )
    # The default Policy(): nothing named read-only or destructive. (A cost, and partial messages asked for:
    # they still reach the caller although the guard reads them too.)
    guard = RepeatGuardHooks(max_cost_usd=1.0, cost=TokenPrices(3, 15))
    with FakeMessagesAPI(model) as api:
        hinted, unannotated, order, builtin = await converse(
            guard,
            api,
            tmp_path,
            ["With a read-only MCP tool", "With an unannotated MCP tool", "Order a box", "With Claude Code's Read"],
            mcp_servers={"parcels": parcels.server},
            tools=["Read"],
            allowed_tools=[*allowed(), "Read"],
            include_partial_messages=True,
        )

    # readOnlyHint: the history between two repeats changed nothing, so the 3rd same call is refused.
    assert hinted.seen[:3] == [TRACKED, TRACKED, "FR-7731: 3 scans"] and hinted.seen[3].startswith("Refused")
    # No annotation: the tool may have changed something, so the repeat after it runs.
    assert unannotated.seen == [TRACKED, TRACKED, "3 scans", TRACKED]
    # destructiveHint without idempotentHint: a write that succeeded is not sent twice, whatever it returned.
    assert order.seen[0] == "order ORD-1 placed" and order.seen[1].startswith("Refused")
    assert parcels.count("place_order") == 1
    # Claude Code's own Read is read-only.
    assert "FR-7731 was rerouted via Lyon." in builtin.seen[2]
    assert builtin.seen[3].startswith("Refused")
    assert parcels.count("track_parcel") == 2 + 3 + 2
    assert all(any(isinstance(message, StreamEvent) for message in turn.messages) for turn in (hinted, builtin))
