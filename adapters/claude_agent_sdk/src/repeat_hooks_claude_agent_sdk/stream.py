"""What the hooks cannot see: which model response each tool call belongs to. Read from the CLI's own stream.

Why this module exists beyond ``guard``/``calls``/``state``/``testing``: Claude Code's hooks carry no model
response. ``PreToolUse`` fires once per call, and the CLI's streaming tool executor starts each call as soon
as its ``tool_use`` block has streamed (``createStreamingToolExecutor``/``addTool`` in the bundled CLI
2.1.332), so the first call of a response runs before the later ones exist; the session transcript is
written only later. Without knowing the response, the guard could neither decide one response's calls as one
batch (a sibling's result would restart a count), nor tell model calls apart (``max_model_calls``,
``max_refusals`` counts responses, ``max_cost_usd``).

The CLI's stdout has what is missing, in order: each ``tool_use`` block arrives there (an ``assistant``
line with the response's ``message.id``) before the CLI sends the ``PreToolUse`` request for it. So
``GuardedTransport`` wraps the SDK's own subprocess transport, passes every line through unchanged, and
notes, per session (``Flight``): the blocks of the current turn and their response, each response's usage
(with ``cost``: input tokens from its first line, output tokens from its ``message_delta``, for which it
turns on the CLI's partial messages and hides them unless you asked for them), the MCP tools' annotations
(from the ``tools/list`` answers the SDK sends the CLI for its in-process servers), and the tool list (from
the ``init`` line, to check the policy's tool names). One change to what the caller reads: when the guard
ended a turn, the CLI's ``result`` has empty text (``terminal_reason="hook_stopped"``); the transport puts
the stop message there.

Sub-agents (the ``Agent`` tool, formerly ``Task``) run in the same CLI and stream in the same stdout. Each
has a ``Flight`` of its own (``Flight.agents``), named by its ``agent_id``: a ``task_started`` line says
which ``Agent`` call started which agent (``task_id`` is the agent's id, ``tool_use_id`` the call's), and
each line of a sub-agent carries that call's id as its ``parent_tool_use_id``; the hooks carry the
``agent_id``. A sub-agent's ``assistant`` line may come just after the ``PreToolUse`` it triggers (a
foreground sub-agent's lines are passed on as it runs them, measured with CLI 2.1.332), so its hooks wait
for it (``Flight.streamed``, at most ``guard.STREAM_WAIT`` seconds).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
from claude_agent_sdk import Transport

from repeat_hooks import GuardSetupError, Refusal, Stop, ToolCall
from repeat_hooks.call import batch_call_ids
from repeat_hooks.kit import check_tool_names

from .calls import Hints, hints_of, tool_call

if TYPE_CHECKING:
    from .guard import RepeatGuardHooks

logger = logging.getLogger("repeat_hooks_claude_agent_sdk")


class Outcome(NamedTuple):
    """A call's outcome, kept until its response's batch is over (see ``Flight.pending``)."""

    call: ToolCall
    ok: bool
    result: Any


@dataclass(eq=False)
class Block:
    """One ``tool_use`` block of a model response, as the CLI streamed it."""

    call: ToolCall
    """The call, its id unique within its response (``repeat_hooks.batch_call_ids``)."""
    tool_use_id: str
    """The id the model gave it (the hooks' ``tool_use_id``)."""
    response: str
    """The response's ``message.id``."""
    decision: Refusal | Stop | None = None
    decided: bool = False
    answered: bool = False
    """Its ``PreToolUse`` was answered."""
    settled: bool = False
    """Its outcome was taken (``PostToolUse`` or ``PostToolUseFailure``)."""
    ends: Stop | None = None
    """A refused call at which the turn ends (``max_refusals`` reached at its refusal): the stop."""


MAX_AGENTS = 256
"""Sub-agents a session's ``Flight`` follows at once (and ``Agent`` calls it remembers); the least recently
used goes first (a sub-agent forgotten while it runs is then decided call by call, as a deferred call is)."""


@dataclass(eq=False)
class Flight:
    """One agent's current turn as its transport saw it: a session's main agent, or one of its sub-agents
    (in the main one's ``agents``). The hooks of that agent read and change it.

    Kept in the process that runs the CLI (the hooks always run there), never in the store: it only lives
    for one turn (a sub-agent's: its run), and the counts themselves are in the store.
    """

    hints: dict[str, Hints] = field(default_factory=dict)
    """MCP tools' annotations by Claude Code's tool name (``mcp__<server>__<tool>``), shared with the transport."""
    turn_id: str | None = None
    """The turn's ``prompt_id``."""
    blocks: list[Block] = field(default_factory=list)
    """This turn's ``tool_use`` blocks not yet answered, and the current response's, in stream order."""
    current: str | None = None
    """The response whose calls the guard decides now (``None`` before the turn's first call)."""
    pending: list[Outcome] = field(default_factory=list)
    """The current response's outcomes: recorded when the next response comes, so that no result of a
    response restarts the count of a sibling call (the batch is decided as if before any of it ran)."""
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each response's usage so far, by ``message.id``."""
    stop: Stop | None = None
    """The guard's stop of this turn, to put in the ``result``'s text."""
    broken: GuardSetupError | None = None
    """A setup mistake the transport found: every call is refused with it, and the turn's result raises it."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    """Serializes the agent's decisions: a response's calls are decided in stream order."""
    streamed: anyio.Event = field(default_factory=anyio.Event)
    """Set (then replaced) each time a ``tool_use`` block of this agent streams: what a hook waits on."""
    agents: OrderedDict[str, Flight] = field(default_factory=OrderedDict)
    """The main agent's sub-agents, by ``agent_id`` (at most ``MAX_AGENTS``)."""
    tasks: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """The ``agent_id`` each ``Agent`` call started, by the call's ``tool_use_id`` (the ``parent_tool_use_id``
    of the sub-agent's lines)."""

    def agent(self, agent_id: str) -> Flight:
        """The sub-agent ``agent_id``'s flight (made if new): its turn is its run, so its turn id is its id."""
        flight = self.agents.get(agent_id)
        if flight is None:
            flight = self.agents[agent_id] = Flight(hints=self.hints, turn_id=agent_id)
            if len(self.agents) > MAX_AGENTS:
                self.agents.popitem(last=False)
        else:
            self.agents.move_to_end(agent_id)
            flight.hints = self.hints
        return flight

    def started(self, tool_use_id: str, agent_id: str) -> None:
        """A ``task_started`` line: the ``Agent`` call ``tool_use_id`` started the sub-agent ``agent_id``."""
        self.tasks[tool_use_id] = agent_id
        if len(self.tasks) > MAX_AGENTS:
            self.tasks.popitem(last=False)

    def lane(self, parent_tool_use_id: Any) -> Flight | None:
        """The flight a line belongs to: this one for the main agent's lines (no ``parent_tool_use_id``), the
        sub-agent's for its lines, ``None`` for a sub-agent whose ``task_started`` this flight did not see."""
        if not parent_tool_use_id:
            return self
        agent_id = self.tasks.get(str(parent_tool_use_id))
        return self.agent(agent_id) if agent_id is not None else None

    def start(self, turn_id: str | None) -> None:
        """A new user prompt: forget the previous turn's calls, outcomes and usage."""
        self.turn_id = turn_id
        self.blocks.clear()
        self.current = None
        self.pending.clear()
        self.usage.clear()
        self.stop = None

    def add(self, response: str, block: Mapping[str, Any]) -> None:
        """A ``tool_use`` block of ``response`` streamed (before its ``PreToolUse``)."""
        tool_use_id = str(block.get("id") or "")
        name = str(block.get("name") or "")
        siblings = [known.call for known in self.blocks if known.response == response]
        call = tool_call(name, block.get("input"), tool_use_id or None, self.hints.get(name))
        call_id = batch_call_ids([*siblings, call])[-1]
        if call_id != call.call_id:
            call = tool_call(name, block.get("input"), call_id, self.hints.get(name))
        self.blocks.append(Block(call=call, tool_use_id=tool_use_id, response=response))
        self.streamed.set()
        self.streamed = anyio.Event()

    def find(self, tool_use_id: str, tool_input: Any, *, answered: bool) -> Block | None:
        """The streamed block a hook is about: the first one with this id (and, if the model used the id for
        several calls, these arguments) not yet answered (``answered=False``) or not yet settled."""
        candidates = [
            block
            for block in self.blocks
            if block.tool_use_id == tool_use_id
            and (block.answered and not block.settled if answered else not block.answered)
        ]
        for block in candidates:
            if block.call.arguments == tool_input:
                return block
        return candidates[0] if candidates else None

    def batch(self, block: Block) -> list[Block]:
        """The calls of ``block``'s response streamed so far and not yet decided, up to ``block``: decided
        together, in the order the model wrote them."""
        out: list[Block] = []
        for known in self.blocks:
            if known.response == block.response and not known.decided:
                out.append(known)
            if known is block:
                break
        return out

    def next_response(self, response: str) -> None:
        """``response`` is now the current one: drop the answered blocks of earlier ones."""
        self.current = response
        self.blocks[:] = [block for block in self.blocks if block.response == response or not block.answered]


class GuardedTransport(Transport):
    """The SDK's transport to the CLI, watched for the guard (see the module's docstring). Build it with
    ``RepeatGuardHooks.transport(options)``; it passes every line through as it came, but for the two
    changes said there (partial messages you did not ask for are hidden; a stopped turn's result text)."""

    def __init__(self, guard: RepeatGuardHooks, inner: Transport, *, show_partial: bool = True) -> None:
        self._guard = guard
        self._inner = inner
        self._show_partial = show_partial
        self._hints: dict[str, Hints] = {}
        self._listing: dict[str, str] = {}
        """``tools/list`` requests in flight: request id -> MCP server name."""
        self._checked = False

    async def connect(self) -> None:
        """Start the CLI (the inner transport)."""
        await self._inner.connect()

    async def write(self, data: str) -> None:
        """Fires for every line the SDK sends the CLI: notes the tools an in-process MCP server lists."""
        if self._listing and '"control_response"' in data:
            self._note_tools(data)
        await self._inner.write(data)

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        """The CLI's lines, each noted before the SDK dispatches it (so before the hooks it triggers run)."""
        return self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        async for message in self._inner.read_messages():
            shown = self._note(message)
            if shown is not None:
                yield shown

    async def close(self) -> None:
        """Stop the CLI (the inner transport)."""
        await self._inner.close()

    def is_ready(self) -> bool:
        """Whether the inner transport is ready."""
        return self._inner.is_ready()

    async def end_input(self) -> None:
        """Close the CLI's input (the inner transport)."""
        await self._inner.end_input()

    # -- what the lines say ------------------------------------------------------------------------------

    def _flight(self, session_id: Any) -> Flight | None:
        if not isinstance(session_id, str) or not session_id:
            return None
        return self._guard.flight(session_id, self._hints)

    def _note(self, message: dict[str, Any]) -> dict[str, Any] | None:
        kind = message.get("type")
        if kind == "control_request":
            request = message.get("request") or {}
            subtype = request.get("subtype")
            if subtype == "hook_callback":
                self._flight((request.get("input") or {}).get("session_id"))
            elif subtype == "mcp_message" and (request.get("message") or {}).get("method") == "tools/list":
                self._listing[str(message.get("request_id"))] = str(request.get("server_name"))
            return message
        session = self._flight(message.get("session_id"))
        if session is None:
            return message
        if kind == "system" and message.get("subtype") == "task_started":
            if message.get("tool_use_id") and message.get("task_id"):
                session.started(str(message["tool_use_id"]), str(message["task_id"]))
            return message
        flight = session.lane(message.get("parent_tool_use_id"))
        if flight is None:
            logger.debug("repeat_hooks_claude_agent_sdk: a line of a sub-agent whose start was not seen")
            return message
        if kind == "assistant":
            body = message.get("message") or {}
            response = str(body.get("id") or message.get("uuid") or "")
            usage = body.get("usage")
            if isinstance(usage, Mapping):
                flight.usage.setdefault(response, dict(usage))
            for block in body.get("content") or []:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    flight.add(response, block)
        elif kind == "stream_event":
            self._note_usage(flight, message)
            return message if self._show_partial else None
        elif kind == "system" and message.get("subtype") == "init":
            flight.broken = self._check_tools(message)
        elif kind == "result":
            if flight.broken is not None:
                raise flight.broken
            self._guard.note_result(message.get("uuid"), flight.turn_id)
            if (
                flight.stop is not None
                and message.get("terminal_reason") == "hook_stopped"
                and not message.get("result")
            ):
                return {**message, "result": flight.stop.message}
        return message

    def _note_usage(self, flight: Flight, message: Mapping[str, Any]) -> None:
        event = message.get("event") or {}
        response = message.get("api_message_id")
        if not isinstance(response, str):
            return
        if event.get("type") == "message_start":
            usage = (event.get("message") or {}).get("usage")
            if isinstance(usage, Mapping):
                flight.usage[response] = dict(usage)
        elif event.get("type") == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, Mapping):
                known = flight.usage.setdefault(response, {})
                known.update({key: value for key, value in usage.items() if value is not None})

    def _check_tools(self, message: Mapping[str, Any]) -> GuardSetupError | None:
        """At the ``init`` line, check the policy's tool names against the tools Claude Code offers, once every
        MCP server has connected (a server still connecting lists its tools later: then no check). A mistake
        is raised at the turn's result, once the hooks have refused every call and ended the turn (raised
        here, the CLI would wait for hook answers that never come before the SDK could stop it)."""
        if self._checked or not self._guard.check_tools:
            return None
        self._checked = True
        servers = message.get("mcp_servers") or []
        if all(isinstance(server, Mapping) and server.get("status") == "connected" for server in servers):
            tools = [str(name) for name in message.get("tools") or []]
            try:
                check_tool_names(self._guard.policy, tools, owner="RepeatGuardHooks")
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
                self._hints[f"mcp__{server}__{tool['name']}"] = hints_of(tool.get("annotations"))
