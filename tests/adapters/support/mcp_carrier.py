"""The parcel carrier as a real FastMCP server, for the adapters' MCP tests: run it as a child process.

    python mcp_carrier.py [--http PORT] [TOOL ...]

serves the named tools (all of them by default) over stdio, or over streamable HTTP at
``http://127.0.0.1:PORT/mcp``. Every call that reaches a tool (all but ``carrier_status``) is appended to the
file named by ``$CARRIER_LOG`` as ``<tool> <first argument>``. The tools, by what they let a test show:

- ``track_parcel``: a lookup the server marks read-only (``readOnlyHint=True``);
- ``reroute_parcel``: a change, explicitly not destructive (``readOnlyHint=False, destructiveHint=False``);
- ``place_order``: a destructive, non-idempotent write whose receipt differs every time;
- ``carrier_status``, ``parcel_history``: no hints at all (MCP's defaults say nothing);
- ``parcel_events``: the same text every time, with a fresh request id in the result's ``_meta``;
- ``parcel_status``: the same text and ``structuredContent`` every time, with a fresh ``_meta`` request id;
- ``customs_status``: always fails (an ``isError`` result).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, TextContent, ToolAnnotations

server = FastMCP("carrier", log_level="CRITICAL")


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


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
def place_order(item: str) -> str:
    """Order an item (each call places one more order)."""
    _log(f"place_order {item}")
    return f"order {uuid.uuid4().hex[:8]} placed for {item}"


@server.tool()
def carrier_status() -> str:
    """Whether the carrier's API is up."""
    return "up"


@server.tool()
def parcel_history(tracking_number: str) -> str:
    """The parcel's past scans (no hints: the server says nothing about its effects)."""
    _log(f"parcel_history {tracking_number}")
    return f"{tracking_number}: 3 scans"


@server.tool()
def parcel_events(tracking_number: str) -> CallToolResult:
    """The parcel's scan events (the same every time; each answer carries a new request id)."""
    _log(f"parcel_events {tracking_number}")
    return CallToolResult(
        content=[TextContent(type="text", text=f"{tracking_number}: scanned at hub Lyon")],
        _meta={"request_id": str(uuid.uuid4())},
    )


@server.tool()
def parcel_status(tracking_number: str) -> CallToolResult:
    """The parcel's status, as structured content (the same every time; each answer carries a new request id)."""
    _log(f"parcel_status {tracking_number}")
    return CallToolResult(
        content=[TextContent(type="text", text="in transit")],
        structuredContent={"tracking_number": tracking_number, "status": "in transit"},
        _meta={"request_id": str(uuid.uuid4())},
    )


@server.tool()
def customs_status(tracking_number: str) -> str:
    """The parcel's customs clearance (the customs API is down: every call fails)."""
    _log(f"customs_status {tracking_number}")
    raise RuntimeError("customs API timed out")


def main() -> None:
    """Serve the tools the command line names, over stdio or (``--http PORT``) streamable HTTP."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("tools", nargs="*", help="the tools to serve (default: all)")
    args = parser.parse_args()
    served = {tool.name for tool in asyncio.run(server.list_tools())}
    unknown = set(args.tools) - served
    if unknown:
        parser.error(f"no such tools: {', '.join(sorted(unknown))}; the carrier has {', '.join(sorted(served))}")
    for name in served - set(args.tools or served):
        server.remove_tool(name)
    if args.http is None:
        server.run("stdio")
    else:
        server.settings.port = args.http
        server.run("streamable-http")


if __name__ == "__main__":
    main()
