"""A stdio MCP server for ``test_mcp.py``: a read-only lookup, a tool that changes things, one with no hint,
one that answers the same text with a fresh request id in ``_meta`` each time, and one that always fails.

Every call that reaches it is appended to the file named by ``$CARRIER_LOG``.
"""

from __future__ import annotations

import os
import uuid

from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, TextContent, ToolAnnotations

server = FastMCP("carrier")


def _log(line: str) -> None:
    with open(os.environ["CARRIER_LOG"], "a") as log:
        log.write(line + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def track_parcel(tracking_number: str) -> str:
    """Where the parcel is now."""
    _log(f"track_parcel {tracking_number}")
    return f"{tracking_number}: in transit, hub Lyon"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def reroute_parcel(tracking_number: str, hub: str) -> str:
    """Send the parcel to another hub."""
    _log(f"reroute_parcel {tracking_number} {hub}")
    return f"{tracking_number}: rerouted to {hub}"


@server.tool()
def carrier_status() -> str:
    """Whether the carrier's API is up."""
    return "up"


@server.tool()
def parcel_events(tracking_number: str) -> CallToolResult:
    """The parcel's scan events (the same every time; each answer carries a new request id)."""
    _log(f"parcel_events {tracking_number}")
    return CallToolResult(
        content=[TextContent(type="text", text=f"{tracking_number}: scanned at hub Lyon")],
        _meta={"request_id": str(uuid.uuid4())},
    )


@server.tool()
def customs_status(tracking_number: str) -> str:
    """The parcel's customs clearance (the customs API is down: every call fails)."""
    _log(f"customs_status {tracking_number}")
    raise RuntimeError("customs API timed out")


if __name__ == "__main__":
    server.run()
