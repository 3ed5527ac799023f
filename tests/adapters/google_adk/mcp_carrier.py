"""A stdio MCP server for ``test_mcp.py``: a read-only lookup, a tool that changes things, one with no hint.

Every call that reaches it is appended to the file named by ``$CARRIER_LOG``.
"""

from __future__ import annotations

import os

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

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


if __name__ == "__main__":
    server.run()
