"""The conformance kit on a coding CLI: a CLI's own tools are its own, so a driver gives the CLI a scenario's kit
tools as the tools of an MCP server in the test process (``ToolServer``), which run ``ToolBox.run`` there (the runs
counted where ``check`` reads them); the scenario's policy as the hook command's settings (``named_settings``); and
what the CLI drivers do alike (``CommandDriver``). For the Claude Code and Gemini CLI adapters' ``testing``; needs the
``mcp`` and ``uvicorn`` packages. Not for production."""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic_core import to_jsonable_python

from ..stores import StateStore
from .conformance import Scenario, Tool, ToolBox, ToolFailed, TurnOutcome
from .sandbox import Home, resident_folder

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


def named_settings(scenario: Scenario, name: Callable[[str], str]) -> dict[str, Any]:
    """The scenario's policy as a hook command's settings file holds it: ``Scenario.settings`` with its tool names (in
    ``limits``, ``exempt``, ``read_only``, ``destructive``) spelt as the CLI names the kit's tools (``name``), sets as
    lists (JSON)."""
    from ..policy import Policy

    settings = dict(scenario.settings)
    for field in ("exempt", "read_only", "destructive"):
        if field in settings:
            settings[field] = sorted(name(tool) for tool in settings[field])
    if "limits" in settings:
        settings["limits"] = {name(tool): limit for tool, limit in settings["limits"].items()}
    Policy(**{**scenario.settings})  # the scenario's own spelling must be a policy
    return settings


class CommandDriver:
    """What a coding CLI's conformance driver does alike (Claude Code's, Gemini CLI's): ``run`` a scenario in one
    session of a fresh isolated user (``home_type``) whose hook calls a resident server answers, and ``run_turn`` its
    first turn for ``run_retried``, the states in the retry's ``SQLiteStore`` file, the session's id made from the
    conversation's, the CLI's home beside the box's shared file (so that a retry's processes share the session), every
    hook call in its own process (a resident server would outlive a crashed process). A driver writes ``run_in`` (one
    session, ``resume``: it exists already) and ``known`` (whether a session of that id exists in a home)."""

    home_type: type[Home] = Home
    prefix = "rh-cli-"
    """The prefix of a run's temporary folder."""
    crashes = False
    """The CLI dies with this process (``run_turn``: a retry's first process dies mid-turn)."""

    def run_in(
        self,
        scenario: Scenario,
        box: ToolBox,
        home: Any,
        session: str,
        *,
        resume: bool,
        state: Path | None = None,
        turns: int | None = None,
    ) -> list[TurnOutcome]:
        """``run`` in ``home``, session ``session`` (``resume``: it exists), the states in ``state`` (``None``: the
        hook command's default), the first ``turns`` turns (``None``: all)."""
        raise NotImplementedError(f"{type(self).__name__}.run_in")

    def known(self, home: Any, session: str) -> bool:
        """Whether ``home`` holds session ``session`` already (a retry resumes it)."""
        raise NotImplementedError(f"{type(self).__name__}.known")

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one session (a CLI run per turn); one outcome per turn."""
        with tempfile.TemporaryDirectory(prefix=self.prefix) as root, resident_folder() as sockets:
            home = self.home_type(root, resident=sockets)
            return self.run_in(scenario, box, home, str(uuid.uuid4()), resume=False)

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """The first turn of ``scenario``, its states in ``store`` (a ``SQLiteStore``: the hook command's ``state``
        file), the conversation a session of the CLI (its id a UUID made from ``conversation_id``, resumed if it
        exists). ``turn_id`` cannot be given: the CLIs name every prompt anew, or none."""
        where = getattr(store, "path", None)
        if where is None:
            raise TypeError(f"the hook command keeps its states in a SQLite file: a SQLiteStore, not {store!r}")
        shared = getattr(box, "path", None)
        folder = Path(shared).parent if shared is not None else Path(tempfile.mkdtemp(prefix=self.prefix))
        home = self.home_type(folder / "home")
        session = str(uuid.uuid5(uuid.NAMESPACE_URL, f"repeat-hooks:{conversation_id}"))
        self.crashes = True
        resume = self.known(home, session)
        return self.run_in(scenario, box, home, session, resume=resume, state=Path(where), turns=1)[0]
