"""This module exists because the hooks cannot see which model response a call belongs to: the CLI's stream says.

``GuardedTransport`` notes, per agent (``Flight``), each ``tool_use`` block with its response before its ``PreToolUse``
comes, each response's usage, the MCP tools' annotations and the tool list (the CLI facts: the adapter README)."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import anyio
from claude_agent_sdk import Transport

from repeat_hooks import GuardSetupError, StateStore, Stop, ToolCall
from repeat_hooks.call import batch_call_ids
from repeat_hooks.kit import Batch, Decided, GuardCore, GuardStopped

from .calls import tool_call

logger = logging.getLogger("repeat_hooks_claude_agent_sdk")
V = TypeVar("V")

MAX_SESSIONS = 1024
"""Sessions whose current turn the process follows at once (and results it remembers the turn of)."""
MAX_AGENTS = 256
"""Sub-agents a session's ``Flight`` follows at once (one forgotten mid-run is decided call by call)."""


class Guarded(Protocol):
    """What the transport, ``stop_of`` and ``read_state`` read of a ``RepeatGuardHooks``."""

    core: GuardCore
    store: StateStore
    flights: OrderedDict[str, Flight]
    """Each session's main ``Flight``, by session id."""
    results: OrderedDict[str, tuple[str, str | None]]
    """The store key and the turn each ``ResultMessage`` a transport saw ended, by the message's ``uuid``."""


def kept(table: OrderedDict[str, V], key: str, limit: int, make: Callable[[], V]) -> V:
    """``table[key]`` (made if new), the most recently used; past ``limit`` entries, the least recently used goes."""
    if key not in table:
        table[key] = make()
        if len(table) > limit:
            table.popitem(last=False)
    table.move_to_end(key)
    return table[key]


@dataclass(eq=False)
class Flight:
    """One agent's current turn as its transport streamed it (a session's main agent, or a sub-agent in ``agents``),
    in the process that runs the CLI (where its hooks run); the counts are in the store."""

    annotations: dict[str, Any] = field(default_factory=dict)
    """MCP tools' annotations by Claude Code's tool name (``mcp__<server>__<tool>``): the transport's."""
    turn_id: str | None = None  # a sub-agent's is its id
    key: str | None = None  # the store key of the main agent's conversation
    batch: Batch = field(default_factory=Batch)
    """The ``tool_use`` blocks streamed and not yet answered, and the current response's; ``tag``: its id."""
    current: str | None = None
    """The response whose calls the guard decides now."""
    recorded: str | None = None
    """The last response recorded when its calls had all resolved (its ``PostToolBatch``), the next model call decided
    there; a response it fired none for is recorded when the next one comes."""
    pending: list[tuple[ToolCall, bool, Any]] = field(default_factory=list)
    """The current response's outcomes, recorded at its end (its ``PostToolBatch``): none restarts a sibling's
    count."""
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)  # each response's so far, by its id
    stop: Stop | None = None
    """The guard's stop of this turn: every later call is denied with it, and it is the result's text."""
    broken: GuardSetupError | None = None
    """A setup mistake the transport found: every call is refused with it, and the turn's result raises it."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # the agent's decisions, one at a time, in stream order
    streamed: anyio.Event = field(default_factory=anyio.Event)  # set (then replaced) at each block streamed
    agents: OrderedDict[str, Flight] = field(default_factory=OrderedDict)
    """Sub-agents, by ``agent_id`` and by the ``tool_use_id`` of the ``Agent`` call that started each."""

    def agent(self, agent_id: str) -> Flight:
        """The sub-agent ``agent_id``'s flight (made if new): its turn is its run, its turn id its id."""
        flight = kept(self.agents, agent_id, 2 * MAX_AGENTS, lambda: Flight(turn_id=agent_id))
        flight.annotations = self.annotations
        return flight

    def lane(self, parent_tool_use_id: Any) -> Flight | None:
        """The flight a line belongs to: this one (no ``parent_tool_use_id``), else its sub-agent's (``None``
        if this flight did not see it start)."""
        return self if not parent_tool_use_id else self.agents.get(str(parent_tool_use_id))

    def start(self, turn_id: str | None, key: str) -> None:
        """A new user prompt: forget the previous turn's calls, outcomes, usage and stop."""
        self.turn_id, self.key, self.current, self.recorded, self.stop = turn_id, key, None, None, None
        self.batch.clear()
        self.pending.clear()
        self.usage.clear()

    def add(self, response: str, block: Mapping[str, Any]) -> None:
        """A ``tool_use`` block of ``response`` streamed: its call, under an id unique in the response."""
        tool_use_id = str(block.get("id") or "")
        call = self.call(str(block.get("name") or ""), tool_use_id, block.get("input"))
        siblings = [entry.call for entry in self.batch.calls if entry.tag == response]
        call = replace(call, call_id=batch_call_ids([*siblings, call])[-1])
        self.batch.calls.append(Decided(call, None, tag=response, model_id=tool_use_id or None))
        self.streamed.set()
        self.streamed = anyio.Event()

    def call(self, name: str, tool_use_id: str, arguments: Any) -> ToolCall:
        """The ``ToolCall`` of a call of tool ``name``, with its MCP annotations' hints (``calls.tool_call``)."""
        return tool_call(name, arguments, tool_use_id or None, self.annotations.get(name))

    async def claim(self, name: str, tool_use_id: str, arguments: Any, *, wait: float) -> Decided | None:
        """The streamed call a ``PreToolUse`` is about, taken once; waiting up to ``wait`` seconds for its block to
        stream (a sub-agent's may come just after its hook); ``None`` if it did not."""
        entry = self.batch.claim(name, tool_use_id, arguments)
        with anyio.move_on_after(wait):
            while entry is None and wait:
                await self.streamed.wait()
                entry = self.batch.claim(name, tool_use_id, arguments)
        if entry is None and wait:
            logger.warning("repeat_hooks_claude_agent_sdk: a sub-agent's call %s never streamed", tool_use_id)
        return entry

    async def unhooked(self, name: str, tool_use_id: str, arguments: Any, *, wait: float) -> Decided | None:
        """The streamed call a ``PostToolBatch`` names if no ``PreToolUse`` claimed it (Claude Code answered it
        itself: a tool it does not have), taken once; waiting up to ``wait`` seconds for its block to stream (a
        sub-agent's may come late). ``None`` if a ``PreToolUse`` claimed it, or it never streamed."""
        with anyio.move_on_after(wait):
            while wait and self.batch.find(name, tool_use_id, arguments) is None:
                await self.streamed.wait()
        return self.batch.claim(name, tool_use_id, arguments)

    def next_response(self, response: str) -> None:
        """``response`` is now the current one: drop the answered calls of earlier ones."""
        self.current = response
        self.batch.calls = [entry for entry in self.batch.calls if entry.tag == response or not entry.claimed]


class GuardedTransport(Transport):
    """The SDK's transport to the CLI (``inner``, to which the rest delegates), watched for the guard: every line
    passes as it came, but partial
    messages you did not ask for are hidden (``show_partial``), and a stopped turn's result carries the stop message
    (``on_stop="raise"``: raises ``error``). Build it with ``RepeatGuardHooks.transport(options)``."""

    def __init__(self, inner: Transport, guard: Guarded, error: type[GuardStopped], show_partial: bool) -> None:
        self._inner, self._guard, self._core = inner, guard, guard.core
        self._error, self._show_partial = error, show_partial
        self._annotations: dict[str, Any] = {}
        self._listing: dict[str, str] = {}
        """``tools/list`` requests in flight: request id -> MCP server name."""

    async def connect(self) -> None:
        await self._inner.connect()

    async def write(self, data: str) -> None:
        """Fires for every line the SDK sends the CLI: notes the tools an in-process MCP server lists."""
        if self._listing and '"control_response"' in data:
            self._note_tools(data)
        await self._inner.write(data)

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        """The CLI's lines, each noted before the SDK dispatches it (so before the hooks it triggers run)."""
        async for message in self._inner.read_messages():
            shown = self._note(message)
            if shown is not None:
                yield shown

    async def close(self) -> None:
        await self._inner.close()

    def is_ready(self) -> bool:
        return self._inner.is_ready()

    async def end_input(self) -> None:
        await self._inner.end_input()

    def _flight(self, session_id: Any) -> Flight | None:
        if not isinstance(session_id, str) or not session_id:
            return None
        flight = kept(self._guard.flights, session_id, MAX_SESSIONS, Flight)
        flight.annotations = self._annotations
        return flight

    def _note(self, message: dict[str, Any]) -> dict[str, Any] | None:
        kind = message.get("type")
        if kind == "control_request":
            request = message.get("request") or {}
            if request.get("subtype") == "hook_callback":
                self._flight((request.get("input") or {}).get("session_id"))
            elif (
                request.get("subtype") == "mcp_message" and (request.get("message") or {}).get("method") == "tools/list"
            ):
                self._listing[str(message.get("request_id"))] = str(request.get("server_name"))
            return message
        session = self._flight(message.get("session_id"))
        if session is None:
            return message
        if kind == "system" and message.get("subtype") == "task_started":
            if message.get("tool_use_id") and message.get("task_id"):
                session.agents[str(message["tool_use_id"])] = session.agent(str(message["task_id"]))
            return message
        flight = session.lane(message.get("parent_tool_use_id"))
        if flight is None:
            logger.debug("repeat_hooks_claude_agent_sdk: a line of a sub-agent whose start was not seen")
        elif kind == "assistant":
            body = message.get("message") or {}
            response = str(body.get("id") or message.get("uuid") or "")
            if isinstance(body.get("usage"), Mapping):
                flight.usage.setdefault(response, dict(body["usage"]))
            for block in body.get("content") or []:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    flight.add(response, block)
        elif kind == "stream_event":
            self._note_usage(flight, message)
            return message if self._show_partial else None
        elif kind == "system" and message.get("subtype") == "init":
            flight.broken = self._check_tools(message)
        elif kind == "result":
            return self._result(flight, message)
        return message

    def _result(self, flight: Flight, message: dict[str, Any]) -> dict[str, Any]:
        """The turn's result: a setup mistake raised; the turn it ended noted; the guard's stop as its text (or
        raised, with ``on_stop="raise"``)."""
        if flight.broken is not None:
            raise flight.broken
        if isinstance(message.get("uuid"), str) and flight.key is not None:
            ended = (flight.key, flight.turn_id)
            kept(self._guard.results, message["uuid"], MAX_SESSIONS, lambda: ended)
        if flight.stop is None or message.get("terminal_reason") != "hook_stopped":
            return message
        stopped = self._core.stopped(flight.stop, self._error)
        if stopped is not None:
            raise stopped
        return message if message.get("result") else {**message, "result": flight.stop.message}

    def _note_usage(self, flight: Flight, message: Mapping[str, Any]) -> None:
        event, response = message.get("event") or {}, message.get("api_message_id")
        if not isinstance(response, str):
            return
        if event.get("type") == "message_start":
            usage = (event.get("message") or {}).get("usage")
            if isinstance(usage, Mapping):
                flight.usage[response] = dict(usage)
        elif event.get("type") == "message_delta" and isinstance(event.get("usage"), Mapping):
            known = flight.usage.setdefault(response, {})
            known.update({key: value for key, value in event["usage"].items() if value is not None})

    def _check_tools(self, message: Mapping[str, Any]) -> GuardSetupError | None:
        """At the ``init`` line, once every MCP server has connected (else no check: a server still connecting lists
        its tools later): the policy's tool names against Claude Code's. A mistake is raised at the turn's result,
        after the hooks refused every call (raised here, the CLI would wait for hook answers that never come)."""
        servers = message.get("mcp_servers") or []
        if all(isinstance(server, Mapping) and server.get("status") == "connected" for server in servers):
            try:
                self._core.check_tool_names(str(name) for name in message.get("tools") or [])
            except GuardSetupError as error:
                return error
        return None

    def _note_tools(self, data: str) -> None:
        try:
            line = json.loads(data)
        except ValueError:
            return
        response = line.get("response") or {}
        server = self._listing.pop(str(response.get("request_id")), None)
        if server is None:
            return
        result = ((response.get("response") or {}).get("mcp_response") or {}).get("result") or {}
        for tool in result.get("tools") or []:
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                self._annotations[f"mcp__{server}__{tool['name']}"] = tool.get("annotations")
