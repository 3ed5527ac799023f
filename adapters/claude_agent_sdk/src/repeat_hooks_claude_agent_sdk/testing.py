"""A testing aid: the real Claude Code CLI (bundled with the SDK) against a scripted fake model, offline, and the
conformance kit's ``Driver`` for the Claude Agent SDK.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    def answer(request: dict) -> Reply:           # the Messages API request the CLI sent
        if steps(request, "Where is FR-7731?") < 2:
            return [tool_use("mcp__parcels__track_parcel", {"tracking_number": "FR-7731"})]
        return "It is in transit."

    with FakeMessagesAPI(answer) as api, tempfile.TemporaryDirectory() as home:
        options = offline_options(api, home, mcp_servers={...}, allowed_tools=[...])
        async for message in guard.query(prompt="Where is FR-7731?", options=options):
            ...
    api.requests                                   # every request the CLI made, bodies included

``FakeMessagesAPI`` is the model seam (``repeat_hooks.kit.fake_messages``, shared with the Claude Code adapter,
whose tests run the same CLI with the hook command; its names are here too): Claude Code calls the Anthropic
Messages API at ``ANTHROPIC_BASE_URL``; this server answers ``POST /v1/messages`` (streamed as server-sent events,
as the API does, or as one JSON body), ``count_tokens``, and ``200 {}`` for anything else (logged, so stray traffic
shows). It keeps no conversation state: ``answer`` decides from the request, so a resumed session (whose
first request carries the whole history) gets the answer its history calls for. ``offline_options`` points
the CLI at it with an isolated ``CLAUDE_CONFIG_DIR``, no settings files, and
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (without it the CLI also resolves api.anthropic.com).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import (
    AgentDefinition,
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SdkMcpTool,
    ToolAnnotations,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    tool,
)
from pydantic_core import to_jsonable_python

from repeat_hooks import Policy, StateStore, StopReason, kit
from repeat_hooks.kit.conformance import FINAL, SCENARIOS, STOPPED, Cursor, Scenario, Tool, ToolBox, TurnOutcome
from repeat_hooks.kit.fake_messages import (  # the server this module's tests and the Claude Code adapter's share
    MODEL,
    FakeMessagesAPI,
    Reply,
    messages_text,
    offline_env,
    steps,  # noqa: F401 - the tests take it from here
    tool_use,
)

from .calls import result_text
from .guard import RepeatGuardHooks
from .state import stop_of


def tool_results(request: Mapping[str, Any]) -> list[str]:
    """The tool results the request's last message hands the model, as text (what it read of its calls)."""
    messages = request.get("messages") or []
    if not messages:
        return []
    content = messages[-1].get("content")
    return [
        result_text(block.get("content"))
        for block in content or []
        if isinstance(content, list) and isinstance(block, Mapping) and block.get("type") == "tool_result"
    ]


def offline_options(api: FakeMessagesAPI, home: str | Path, **options: Any) -> ClaudeAgentOptions:
    """``ClaudeAgentOptions`` that run the bundled CLI against ``api`` and nothing else: ``offline_env``, no
    settings files (``setting_sources=[]``), ``cwd`` a folder under ``home``, no built-in tools (``tools=[]``),
    ``permission_mode="dontAsk"`` (a tool not in ``allowed_tools`` is denied, never asked about). ``options``
    override these (``env`` entries are added to the offline ones)."""
    work = Path(home) / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = {**offline_env(api, home), **dict(options.pop("env", {}))}
    settings: dict[str, Any] = {
        "setting_sources": [],
        "cwd": str(work),
        "model": MODEL,
        "tools": [],
        "permission_mode": "dontAsk",
        **options,
        "env": env,
    }
    return ClaudeAgentOptions(**settings)


# -- the conformance kit's driver -------------------------------------------------------------------------

SERVER = "kit"
"""The in-process MCP server the driver's kit tools live on: Claude Code names them ``mcp__kit__<tool>``."""


def claude_name(tool_name: str) -> str:
    """Claude Code's name for a kit tool: ``mcp__kit__<tool>``."""
    return f"mcp__{SERVER}__{tool_name}"


def claude_policy(scenario: Scenario) -> Policy:
    """The scenario's policy with its tool names (in ``limits``, ``exempt``, ``read_only``, ``destructive``)
    spelt as Claude Code names the kit's tools."""
    settings = dict(scenario.settings)
    for name in ("exempt", "read_only", "destructive"):
        if name in settings:
            settings[name] = {claude_name(tool) for tool in settings[name]}
    if "limits" in settings:
        settings["limits"] = {claude_name(tool): limit for tool, limit in settings["limits"].items()}
    return Policy(**settings)


UNSUPPORTED: dict[str, str] = dict.fromkeys(
    [item.name for item in SCENARIOS if item.rounds > 1],
    "the Claude Agent SDK has no construct that runs an agent again after its answer: a query or a client's "
    "turn ends at the CLI's ResultMessage (claude_agent_sdk/client.py receive_response), and a loop around "
    "query() is the caller's own code, each prompt a turn",
)
"""Kit scenarios this SDK cannot express, and why."""

STOP_LAG: dict[StopReason, int] = {}
"""``check(..., stop_lag=STOP_LAG)``: no lag. Claude Code fires ``PostToolBatch`` once a response's calls have all
resolved, before the next model call, and ends the turn there at ``continue: false`` (CLI 2.1.332, measured:
``terminal_reason="hook_stopped"``, no further model call): the guard records the response there and checks the
rules that trip between responses (the budgets, ``max_errors_in_a_row``), so their stop lands before the model call
they forbid. ``max_refusals`` is moved by a refusal, and the turn ends at the refusal that reaches it
(``continue_: False`` with its ``PreToolUse`` deny, or with the ``PostToolBatch`` note of a refused call of a tool the
agent lacks)."""


class Driver:
    """Runs a ``repeat_hooks.kit.conformance`` scenario on the real Claude Code CLI (the kit's ``Driver`` for this SDK).

    The scenario's tools are tools of one in-process MCP server (``create_sdk_mcp_server``), each taking
    ``query``; a tool's ``read_only`` is its MCP ``readOnlyHint``; a tool that raises ``ToolFailed`` is
    answered by the SDK as an ``isError`` result with the error's text. The model is a ``FakeMessagesAPI``
    answering the scenario's script in order (``repeat_hooks.kit.conformance.Cursor``: the driver starts each turn).
    The guard is ``RepeatGuardHooks(claude_policy(scenario), **options)``; one ``ClaudeSDKClient`` (one
    session, one CLI) runs every turn. What the model saw is read from the tool results in the messages the
    SDK yields (their text as ``calls.result_text`` gives it), each with the note a ``PostToolUse`` (or
    ``PostToolUseFailure``) hook added to it after its text if any (``call_notes``: the guard's warning), then the
    ``PostToolBatch`` note Claude Code appended to it if any (``batch_notes``: the guard's refusal of a call of a
    tool the agent lacks, which the model reads after Claude Code's error), both from the session's transcript,
    where Claude Code keeps what it adds for the model to read; the final text is the ``ResultMessage``'s
    ``result``; the stop through ``stop_of``. A tool that needs approval is left out of ``allowed_tools``
    (``permission_mode="default"``), so Claude Code asks the SDK's ``can_use_tool``, which puts the call to
    ``ToolBox.ask``. Branches are sub-agents (``Agent``, one per branch, all in the main agent's first
    response), run in the foreground (``CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1``).
    """

    def __init__(self, *, delay: float = 0.0, **options: Any) -> None:
        self.delay = delay
        """Seconds the fake model waits before each content block it streams."""
        self.options = options
        """More ``RepeatGuardHooks`` options (``store=``, ``cost=``, ...)."""
        self.guard: RepeatGuardHooks | None = None
        """The last run's guard."""
        self.api: FakeMessagesAPI | None = None
        """The last run's fake model (its ``requests``)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one session of a fresh CLI; one outcome per turn."""
        return anyio.run(self.run_async, scenario, box)

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """The first turn of ``scenario``, its states in ``store``, named as a Claude Agent SDK user names a retried
        request's: the conversation is a Claude Code session (its id a UUID made from ``conversation_id``: a new
        session is started with ``session_id=``, one whose transcript exists is resumed with ``resume=``), the turn
        ``repeat_hooks.kit.request(turn_id=...)`` around the query (Claude Code gives every prompt a new
        ``prompt_id``). The CLI's home is beside the ``box``'s shared file (``SharedToolBox.path``), so that the
        processes of a retry share the session's transcript."""
        shared = getattr(box, "path", None)
        folder = Path(shared).parent if shared is not None else Path(tempfile.mkdtemp())
        session = str(uuid.uuid5(uuid.NAMESPACE_URL, f"repeat-hooks:{conversation_id}"))
        home = folder / "claude_home"
        known = any((home / "claude" / "projects").glob(f"*/{session}.jsonl"))

        async def one() -> list[TurnOutcome]:
            with kit.request(turn_id=turn_id):
                naming = {"resume": session} if known else {"session_id": session}
                return await self.run_async(scenario, box, store=store, home=home, turns=1, naming=naming)

        return anyio.run(one)[0]

    async def run_async(
        self,
        scenario: Scenario,
        box: ToolBox,
        *,
        store: StateStore | None = None,
        home: Path | None = None,
        turns: int | None = None,
        naming: Mapping[str, str] | None = None,
    ) -> list[TurnOutcome]:
        """``run``, from a running event loop; ``run_turn``'s ``store``, CLI ``home``, number of ``turns`` and session
        ``naming`` (``session_id=`` or ``resume=``)."""
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        orchestrated = [0]

        def answer(request: dict[str, Any]) -> Reply:
            if len(cursors) > 1:
                branch = _branch_of(request)
                if branch is None:  # the main agent: starts every branch at once, then answers
                    orchestrated[0] += 1
                    if orchestrated[0] > 1:
                        return FINAL
                    return [
                        tool_use(
                            "Agent",
                            {"description": f"branch {n}", "prompt": f"{BRANCH}{n}", "subagent_type": "kit_branch"},
                        )
                        for n in range(len(cursors))
                    ]
                reply = cursors[branch].next()
            else:
                reply = cursors[0].next()
            if isinstance(reply, str):
                return reply
            return [tool_use(claude_name(call.tool), {"query": call.query}, identifier) for call, identifier in reply]

        keywords = {**self.options, **({"store": store} if store is not None else {})}
        guard = self.guard = RepeatGuardHooks(claude_policy(scenario), **keywords)
        tools = [kit_tool(box, item) for item in scenario.tools]
        outcomes: list[TurnOutcome] = []
        with contextlib.ExitStack() as stack:
            api = self.api = stack.enter_context(FakeMessagesAPI(answer, delay=self.delay))
            folder = home if home is not None else stack.enter_context(tempfile.TemporaryDirectory())

            async def can_use_tool(name: str, arguments: dict[str, Any], context: Any) -> Any:
                """Claude Code's permission prompt for a tool not in ``allowed_tools``: the kit's human."""
                if box.ask(name.removeprefix(claude_name("")), str(arguments["query"])):
                    return PermissionResultAllow()
                return PermissionResultDeny(message="not approved")

            asks = any(item.needs_approval for item in scenario.tools)
            allowed = [claude_name(item.name) for item in scenario.tools if not item.needs_approval]
            extra: dict[str, Any] = {"permission_mode": "default", "can_use_tool": can_use_tool} if asks else {}
            extra.update(naming or {})
            if len(cursors) > 1:
                extra["tools"] = ["Agent"]
                extra["agents"] = {
                    "kit_branch": AgentDefinition(
                        description="One branch.",
                        prompt=BRANCH_PROMPT,
                        tools=[claude_name(t.name) for t in scenario.tools],
                    )
                }
                allowed.append("Agent")
                # The kit's branches are sub-agents the main agent waits for. Claude Code 2.1.332 may move
                # parallel sub-agents to the background instead ("Async agent launched successfully", a race):
                # the main agent's turn then ends before its branches do, and their model calls land after
                # the turn's ResultMessage. Background sub-agents still count apart (each its own agent_id).
                extra["env"] = {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}
            options = offline_options(
                api,
                folder,
                mcp_servers={SERVER: create_sdk_mcp_server(SERVER, tools=tools)},
                allowed_tools=allowed,
                **extra,
            )
            async with guard.client(options) as client:
                for number, turn in enumerate(scenario.turns[:turns]):
                    for cursor in cursors:
                        cursor.start_turn(number)
                    orchestrated[0] = 0
                    await client.query(turn.message)
                    result, seen = await _received(client, folder)
                    final = result.result or ""
                    outcomes.append(
                        TurnOutcome(
                            final=final,
                            stop=await stop_of(result, guard=guard),
                            seen=seen,
                            model_calls=sum(cursor.step for cursor in cursors),
                            stop_messages=int(final.startswith(STOPPED)),
                        )
                    )
        return outcomes


async def _received(client: ClaudeSDKClient, home: str | Path) -> tuple[ResultMessage, list[str]]:
    """One turn's ``ResultMessage`` and what the model was handed for its kit calls (``TurnOutcome.seen``): each
    tool result the SDK yields, as ``calls.result_text`` gives it, with the note of the ``PostToolUse`` hook after
    its text (``call_notes``: the model reads it in that very result), then any ``PostToolBatch`` note Claude Code
    appended to it (``batch_notes``)."""
    results: list[tuple[str | None, list[tuple[str, str]]]] = []  # each tool-result message: its uuid, its kit calls
    kit_calls: set[str] = set()
    result: ResultMessage | None = None
    async for message in client.receive_response():
        if isinstance(message, AssistantMessage):
            kit_calls |= {
                block.id
                for block in message.content
                if isinstance(block, ToolUseBlock) and block.name.startswith(claude_name(""))
            }
        elif isinstance(message, UserMessage) and isinstance(message.content, list):
            texts = [
                (block.tool_use_id, result_text(block.content))
                for block in message.content
                if isinstance(block, ToolResultBlock) and block.tool_use_id in kit_calls
            ]
            results.append((message.uuid, texts))
        elif isinstance(message, ResultMessage):
            result = message
    assert result is not None, "the CLI ended the turn without a result"
    notes, warnings = batch_notes(home, result.session_id), call_notes(home, result.session_id)
    seen = [
        text
        for uuid, texts in results
        for text in [*(_noted(text, warnings.get(call, [])) for call, text in texts), *notes.get(uuid or "", [])]
    ]
    return result, seen


def _noted(text: str, notes: Sequence[str]) -> str:
    """A result's ``text`` with each of ``notes`` after it (``kit.noted``), as the model reads them: Claude Code's
    ``<system-reminder>`` framing left out, as ``calls.result_text`` leaves out the framing of a refusal."""
    for note in notes:
        text = kit.noted(text, note)
    return text


def call_notes(home: str | Path, session_id: str) -> dict[str, list[str]]:
    """What ``PostToolUse`` and ``PostToolUseFailure`` hooks added for the model to read in session ``session_id``
    (its transcript under ``offline_options``' ``home``, a sub-agent's too), by the ``tool_use_id`` of the call whose
    result it was added to.

    Claude Code 2.1.332 does not stream it either: it keeps it in the transcript as a ``hook_additional_context``
    attachment naming the call (``toolUseID``), and appends it to that call's own tool result when it calls the model,
    after the result's text (``<system-reminder>PostToolUse:<tool> hook additional context: ...``)."""
    notes: dict[str, list[str]] = {}
    for attachment in _attachments(home, session_id):
        if attachment.get("hookEvent") in ("PostToolUse", "PostToolUseFailure"):
            notes.setdefault(str(attachment.get("toolUseID")), []).extend(str(text) for text in attachment["content"])
    return notes


def _attachments(home: str | Path, session_id: str) -> list[dict[str, Any]]:
    """The ``hook_additional_context`` attachments of session ``session_id``'s transcripts (a sub-agent's too), each
    with its entry's ``parentUuid``."""
    projects = Path(home) / "claude" / "projects"
    found: list[dict[str, Any]] = []
    for path in [*projects.glob(f"*/{session_id}.jsonl"), *projects.glob(f"*/{session_id}/subagents/*.jsonl")]:
        for line in path.read_text().splitlines():
            entry = json.loads(line) if line.strip() else {}
            attachment = entry.get("attachment") or {}
            if attachment.get("type") == "hook_additional_context":
                found.append({**attachment, "parentUuid": entry.get("parentUuid")})
    return found


def batch_notes(home: str | Path, session_id: str) -> dict[str, list[str]]:
    """What ``PostToolBatch`` hooks added for the model to read in session ``session_id`` (its transcript under
    ``offline_options``' ``home``, a sub-agent's too), by the ``uuid`` of the tool-result message it was appended to.

    Claude Code 2.1.332 does not stream it: it keeps it in the transcript as a ``hook_additional_context``
    attachment (its parent the batch's last tool-result message, the ``UserMessage.uuid`` the SDK yields), and
    appends it to that message's last tool result when it calls the model."""
    notes: dict[str, list[str]] = {}
    for attachment in _attachments(home, session_id):
        if attachment.get("hookEvent") == "PostToolBatch":
            notes.setdefault(str(attachment["parentUuid"]), []).extend(str(text) for text in attachment["content"])
    return notes


BRANCH = "Do kit branch "
"""The prompt the main agent gives each branch's sub-agent, its number after it."""
BRANCH_PROMPT = "KIT BRANCH: use the tools."
"""The system prompt of the kit's sub-agent, by which the fake model tells a branch's requests apart."""


def _branch_of(request: Mapping[str, Any]) -> int | None:
    """The branch whose sub-agent sent ``request`` (its first message names it), or ``None`` for the main agent."""
    if BRANCH_PROMPT not in json.dumps(request.get("system")):
        return None
    first = messages_text((request.get("messages") or [{}])[0])
    return int(first.split(BRANCH, 1)[1].split()[0].rstrip("."))


def kit_tool(box: ToolBox, item: Tool) -> SdkMcpTool[Any]:
    """A kit tool as an SDK MCP tool: it runs ``box.run`` and hands the model its result as text (a string as
    it is, anything else as JSON); its ``read_only`` is its ``readOnlyHint``."""
    annotations = ToolAnnotations(readOnlyHint=item.read_only) if item.read_only is not None else None

    async def run(arguments: dict[str, Any]) -> dict[str, Any]:
        result = box.run(item.name, str(arguments["query"]))
        return {"content": [{"type": "text", "text": as_text(result)}]}

    return tool(item.name, item.description, {"query": str}, annotations=annotations)(run)


def as_text(result: Any) -> str:
    """A tool's result as the text a kit tool hands the model: a string as it is, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable_python(result), sort_keys=True)
