"""A screenshot tool whose result is an image, the same small PNG every run (issue 27 item 3): on an in-process MCP
server (``shots()``), or on a real FastMCP server over stdio, run as a child process::

    python cas_shots.py

Every run that reaches the stdio server's ``snapshot`` is appended to the file named by ``$SHOTS_LOG`` as its
``page``."""

from __future__ import annotations

import base64
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import create_sdk_mcp_server, tool
from claude_agent_sdk.types import McpSdkServerConfig
from mcp.server.fastmcp import FastMCP
from mcp.types import ImageContent

SNAPSHOT = "mcp__shots__snapshot"
"""Claude Code's name for the tool (server ``shots``)."""
PAGE = {"page": "home"}


def png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG = base64.b64encode(png()).decode()
"""The picture every run returns, as MCP carries it (base64)."""
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
"""The image block Claude Code makes of it (in ``PostToolUse``'s ``tool_response`` and in the model's request)."""


@dataclass
class Shots:
    """The in-process server, and the pages of the runs that reached it."""

    runs: list[str] = field(default_factory=list)
    server: McpSdkServerConfig | None = None


def shots() -> Shots:
    """The in-process ``shots`` server with ``snapshot``: the same PNG every run."""
    box = Shots()

    async def snapshot(arguments: dict[str, Any]) -> dict[str, Any]:
        box.runs.append(str(arguments["page"]))
        return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}

    box.server = create_sdk_mcp_server("shots", tools=[tool("snapshot", "A screenshot.", {"page": str})(snapshot)])
    return box


def main() -> None:
    """Serve ``snapshot`` over stdio."""
    server = FastMCP("shots", log_level="CRITICAL")

    @server.tool(structured_output=False)  # the image alone: no JSON copy of it (Claude Code would add it as text)
    def snapshot(page: str) -> list[ImageContent]:
        """A screenshot of the page."""
        with open(os.environ["SHOTS_LOG"], "a") as log:
            log.write(page + "\n")
        return [ImageContent(type="image", data=PNG, mimeType="image/png")]

    server.run()


if __name__ == "__main__":
    main()
