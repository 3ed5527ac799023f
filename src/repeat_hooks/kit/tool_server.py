"""The conformance kit's tools served to a coding CLI (``ToolServer``): a CLI's own tools are its own, so a driver
gives the CLI a scenario's kit tools as the tools of an MCP server in the test process, which run ``ToolBox.run``
there (the runs counted where ``check`` reads them). For the CLI drivers' tests (the Claude Code and Gemini CLI
adapters' ``testing``); needs the ``mcp`` and ``uvicorn`` packages. Not for production."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any, TypeVar

from pydantic_core import to_jsonable_python

from .conformance import Tool, ToolBox, ToolFailed

S = TypeVar("S", bound="ToolServer")

NAME = "kit"
"""The server's name, as the CLIs prefix its tools' names (Claude Code ``mcp__kit__<tool>``, Gemini CLI
``mcp_kit_<tool>``)."""


def as_text(result: Any) -> str:
    """A kit tool's result as the text its MCP tool hands the model: a string as it is, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable_python(result), sort_keys=True)


class ToolServer:
    """A scenario's kit tools as the tools of a FastMCP server (streamable HTTP, on a free 127.0.0.1 port, served by
    uvicorn in a thread of this process), each taking ``query`` and running ``ToolBox.run``: its result as text
    (``as_text``), a ``ToolFailed`` as an ``isError`` result holding its text; a tool's ``read_only`` is its
    ``readOnlyHint``. A context manager; ``url`` is where a CLI reaches it; ``server`` is the FastMCP server, for a
    driver to add a tool of its CLI's own (Claude Code's permission prompt tool)."""

    def __init__(self, box: ToolBox) -> None:
        from mcp.server.fastmcp import FastMCP

        self.server = FastMCP(NAME, log_level="CRITICAL", stateless_http=True, json_response=True)
        for item in box.scenario.tools:
            self._add(box, item)
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._uvicorn: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's streamable-HTTP endpoint."""
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}/mcp"

    def _add(self, box: ToolBox, item: Tool) -> None:
        from mcp.types import CallToolResult, TextContent, ToolAnnotations

        async def run(query: str) -> CallToolResult:
            await asyncio.sleep(0)  # the server runs calls as tasks: let the neighbours' requests in first
            try:
                result = box.run(item.name, query)
            except ToolFailed as failure:
                return CallToolResult(isError=True, content=[TextContent(type="text", text=str(failure))])
            return CallToolResult(content=[TextContent(type="text", text=as_text(result))])

        run.__annotations__ = {"query": str, "return": CallToolResult}  # evaluated: FastMCP reads them
        hints = ToolAnnotations(readOnlyHint=item.read_only) if item.read_only is not None else None
        self.server.add_tool(run, name=item.name, description=item.description, annotations=hints)

    def __enter__(self: S) -> S:
        import uvicorn

        config = uvicorn.Config(self.server.streamable_http_app(), log_level="critical", lifespan="on")
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [self._socket]}, name="kit-mcp", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._uvicorn.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the kit's MCP server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()
