"""A testing aid: the real Claude Code CLI, headless (``claude -p --output-format stream-json``), in an isolated home
with the hook command installed by ``repeat-hooks install claude-code``, against the scripted model server
(``repeat_hooks.kit.fake_messages``, which the Claude Agent SDK adapter's tests share). Not for production::

    def answer(request: dict) -> Reply:                # the Messages API request the CLI sent
        if steps(request, PROMPT) < 6:
            return [tool_use("Bash", {"command": "make test", "description": "Run the tests"})]
        return "Done."

    with FakeMessagesAPI(answer) as api:
        home = Home(tmp_path)                           # HOME, CLAUDE_CONFIG_DIR, a project folder, the state
        home.install()                                  # repeat-hooks install claude-code --user
        run = home.claude(api, PROMPT)                  # the CLI's exit code, stream-json lines, stderr
    run.result["terminal_reason"], run.system_messages, tool_results(api)

The CLI is the one the Claude Agent SDK's wheel bundles (``claude_agent_sdk/_bundled/claude``), or ``$CLAUDE_CLI``.

``Driver`` is the conformance kit's driver for this adapter (``repeat_hooks.kit.conformance``): the kit's tools served
by an MCP server in this process (``KitServer``, which needs the ``mcp`` package: the Claude Agent SDK's dependency),
each turn one ``claude -p`` of one session; ``UNSUPPORTED`` (none) and ``RETRIED_NOTE`` say what the CLI cannot express.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from repeat_hooks import StopReason
from repeat_hooks.kit import noted, sandbox
from repeat_hooks.kit.conformance import (
    FINAL,
    STOPPED,
    Cursor,
    Scenario,
    ToolBox,
    TurnOutcome,
)
from repeat_hooks.kit.fake_messages import MODEL, FakeMessagesAPI, Reply, messages_text, offline_env, tool_use
from repeat_hooks.kit.tool_server import NAME, CommandDriver, ToolServer, named_settings

from .guard import settings_file
from .state import stop_of


def claude_cli() -> Path:
    """The Claude Code CLI to run: ``$CLAUDE_CLI``, else the one bundled in the Claude Agent SDK's wheel."""
    named = os.environ.get("CLAUDE_CLI")
    if named:
        return Path(named)
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no Claude Code CLI: pip install claude-agent-sdk (it bundles one), or set CLAUDE_CLI")
    return Path(spec.origin).parent / "_bundled" / "claude"


class Run(sandbox.Run):
    """One headless run of the CLI: its exit code, its stream-json lines (parsed) and its stderr."""

    @property
    def result(self) -> dict[str, Any]:
        """The run's ``result`` line (``terminal_reason``, ``result``, ``is_error``...)."""
        found = [line for line in self.lines if line.get("type") == "result"]
        assert found, f"the CLI printed no result line (exit {self.code}): {self.stderr[-2000:]}"
        return found[-1]

    @property
    def system_messages(self) -> list[str]:
        """What hooks said to the user (``systemMessage``): stream-json's ``informational`` system lines."""
        return [
            str(line.get("content"))
            for line in self.lines
            if line.get("type") == "system" and line.get("subtype") == "informational"
        ]


class Home(sandbox.Home):
    """An isolated user (``repeat_hooks.kit.sandbox.Home``) with ``CLAUDE_CONFIG_DIR`` here too (``~/.claude``: the user
    settings the hook is installed in, and the transcripts)."""

    cli = "claude-code"
    prefixes = ("CLAUDE", "ANTHROPIC")

    def __init__(self, root: str | Path, *, resident: Path | None = None) -> None:
        super().__init__(root, resident=resident)
        self.config = self.root / ".claude"
        self.config.mkdir(parents=True, exist_ok=True)

    def own(self) -> dict[str, str]:
        return {"CLAUDE_CONFIG_DIR": str(self.config)}

    @property
    def settings(self) -> Path:
        """Claude Code's user settings file in this home."""
        return settings_file("user", self.env())

    def claude(
        self,
        api: FakeMessagesAPI,
        prompt: str,
        *,
        tools: Sequence[str] = ("Bash", "Read", "Write", "Edit"),
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
    ) -> Run:
        """``claude -p <prompt> --output-format stream-json --verbose`` in the project, against ``api``, with only
        ``tools`` (allowed without asking)."""
        environ = {**self.env(**dict(env or {})), **offline_env(api, self.root), **self.own()}
        command = [str(claude_cli()), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", MODEL]
        command += ["--tools", ",".join(tools), "--allowedTools", *tools]
        return Run(*self.run(command, environ, timeout))


def tool_results(api: FakeMessagesAPI) -> list[tuple[bool, str]]:
    """Every tool result the model was handed, in order, once each: whether it is an error, and its text."""
    seen: dict[str, tuple[bool, str]] = {}
    for request in api.model_requests():
        for message in request.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    seen.setdefault(str(block.get("tool_use_id")), (bool(block.get("is_error")), _text(block)))
    return list(seen.values())


def _text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, Mapping))


# -- the conformance kit's driver -------------------------------------------------------------------------

SERVER = NAME
"""The MCP server the driver's kit tools live on: Claude Code names them ``mcp__kit__<tool>``."""
APPROVE = "approve"
"""The kit server's permission prompt tool (``--permission-prompt-tool mcp__kit__approve``): the kit's human."""
REJECTED = "The user did not approve this call."
"""What the kit's human answers a call it rejects (the model reads it as the call's error)."""
STOP_FRAME = re.compile(r"repeat-hooks stopped the turn \([a-z_]+\): ")
"""What ``guard.ended`` puts before the stop's message in the ``systemMessage`` the caller gets."""
_HOOK_ERROR = re.compile(r"^PreToolUse:\S+ hook error: ")
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*$", re.DOTALL)


def claude_name(tool_name: str) -> str:
    """Claude Code's name for a kit tool: ``mcp__kit__<tool>``."""
    return f"mcp__{SERVER}__{tool_name}"


def claude_settings(scenario: Scenario) -> dict[str, Any]:
    """The scenario's policy as the hook command's settings file holds it: ``Scenario.settings`` with its tool names
    (in ``limits``, ``exempt``, ``read_only``, ``destructive``) spelt as Claude Code names the kit's tools, sets as
    lists (JSON)."""
    return named_settings(scenario, claude_name)


UNSUPPORTED: dict[str, str] = {}
"""Kit scenarios the Claude Code CLI cannot express with the hook command, and why: none. Rounds are Claude Code's own
loop around the agent, a ``Stop`` hook that blocks (``LOOP_HOOK``); branches are sub-agents (``--agents``); approvals
its permission prompt, answered by an MCP tool (``--permission-prompt-tool``). ``RETRIED`` (two processes, one turn)
is apart: ``RETRIED_NOTE``."""

RETRIED_NOTE = (
    "a retried `claude -p` cannot name the turn it retries: Claude Code gives every prompt a new prompt_id "
    "(2.1.332: the hook event's prompt_id, 'UUID correlating a user prompt with all subsequent events until the next "
    "prompt', absent until the first user input of the process lifetime; no option or variable sets it), and the "
    "hook command takes the turn from it: the retry, even resuming the session (--resume), is a new turn"
)
"""Why ``RETRIED`` (the same turn served by two processes) cannot apply to Claude Code as the kit means it."""

LOOP_HOOK = """\
import json, os, sys
json.load(sys.stdin)
path, rounds = os.environ["KIT_ROUNDS_FILE"], int(os.environ["KIT_ROUNDS"])
done = len(open(path).read().splitlines()) if os.path.exists(path) else 0
if done + 1 < rounds:
    with open(path, "a") as again:
        again.write("again\\n")
    print(json.dumps({"decision": "block", "reason": "Go on."}))
"""
"""Claude Code's own loop around the agent, for ``Scenario.rounds``: a ``Stop`` hook (it fires when the agent answers)
that blocks the stop ``KIT_ROUNDS - 1`` times a turn (counted in ``KIT_ROUNDS_FILE``), so that Claude Code runs the
agent again (its ``reason`` the next instruction, a ``Stop hook feedback`` user message), as a user's loop does."""
LOOP_FEEDBACK = "Stop hook feedback:"
"""How the user message starts by which Claude Code starts the agent again after a ``Stop`` hook blocked."""

STOP_LAG: dict[StopReason, int] = {}
"""``check(..., stop_lag=STOP_LAG)``: no lag. Claude Code fires ``PostToolBatch`` once a response's calls have all
resolved, before the next model call, and ends the run there at ``continue: false`` (CLI 2.1.332:
``terminal_reason="hook_stopped"``, no further model call); a refusal that reaches ``max_refusals`` ends it at its
``PreToolUse`` deny; an answer that stops the turn ends it at its ``Stop`` (``terminal_reason="stop_hook_prevented"``:
the loop's next round begins, its model call is not made)."""


def result_text(content: Any) -> str:
    """A ``tool_result`` block's ``content`` as the model reads it, without Claude Code's framing (the
    ``PreToolUse:<tool> hook error: `` before a refusal, a trailing ``<system-reminder>``): text blocks joined, any
    other block as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    else:
        text = "".join(
            block["text"] if block.get("type") == "text" and isinstance(block.get("text"), str) else json.dumps(block)
            for block in content
            if isinstance(block, Mapping)
        )
    return _HOOK_ERROR.sub("", _REMINDER.sub("", text), count=1).strip()


class KitServer(ToolServer):
    """The scenario's kit tools (``repeat_hooks.kit.tool_server.ToolServer``) and, with ``approve``, the permission
    prompt tool ``approve``: Claude Code asks it about a call of a tool not in ``--allowedTools``, and it puts the call
    to ``ToolBox.ask``. ``config`` is the CLI's ``--mcp-config``."""

    def __init__(self, box: ToolBox, *, approve: bool = False) -> None:
        super().__init__(box)
        if approve:
            self._add_approve(box)

    @property
    def config(self) -> str:
        """``--mcp-config``: this server, as ``kit``."""
        return json.dumps({"mcpServers": {SERVER: {"type": "http", "url": self.url}}})

    def _add_approve(self, box: ToolBox) -> None:
        from mcp.types import CallToolResult, TextContent

        def approve(tool_name: str, input: dict[str, Any], tool_use_id: str | None = None) -> CallToolResult:
            """Claude Code's permission prompt: approve (or reject) a call."""
            if box.ask(tool_name.removeprefix(claude_name("")), str(input.get("query"))):
                decision: dict[str, Any] = {"behavior": "allow", "updatedInput": input}
            else:
                decision = {"behavior": "deny", "message": REJECTED}
            # one text block and nothing else (no structuredContent), or Claude Code takes it for no answer
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(decision))])

        approve.__annotations__ = {
            "tool_name": str, "input": dict[str, Any], "tool_use_id": str | None, "return": CallToolResult,
        }  # fmt: skip
        self.server.add_tool(approve, name=APPROVE, description="The human who approves calls.")


class Driver(CommandDriver):
    """Runs a ``repeat_hooks.kit.conformance`` scenario on the real Claude Code CLI with the hook command installed
    (the kit's ``Driver`` for this adapter).

    An isolated user (``Home``): the hook installed by ``repeat-hooks install claude-code``, the scenario's policy as
    the hook command's user settings (``claude_settings``), its hook calls answered by a resident server (``run``) or
    each in its own process (``run_turn``). The scenario's tools are the tools of one MCP server in this process
    (``KitServer``), given with ``--mcp-config`` (``--strict-mcp-config``, no built-in tool: ``--tools ""``) and allowed
    without asking (``--allowedTools``, ``--permission-mode dontAsk``); a tool that needs approval is left out of
    ``--allowedTools`` and Claude Code asks the server's ``approve`` tool (``--permission-prompt-tool``), the kit's
    human. The model is a ``FakeMessagesAPI`` answering the scenario's script (``Cursor``: the driver starts each
    turn). Each turn is one ``claude -p <message> --output-format stream-json`` of one session: the first names it
    (``--session-id``), later ones ``--resume`` it. Branches are sub-agents (``--agents``, one ``Agent`` call each, all
    in the main agent's first response), in the foreground (``CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1``).

    What the model saw is read from the run's stream-json ``user`` lines (their kit calls' ``tool_result`` blocks, as
    ``result_text`` gives them), each with the note a ``PostToolUse`` hook added to it (the guard's warning: Claude
    Code does not stream it; it keeps it in the transcript as a ``hook_additional_context`` attachment naming the
    call, and appends it to that result when it calls the model), then any ``PostToolBatch`` note appended to it. The
    final text is the ``result`` line's ``result``, or at the guard's stop (``result`` empty, ``terminal_reason:
    "hook_stopped"``, at a ``Stop``: ``"stop_hook_prevented"``) the stop message the caller got in the
    ``systemMessage`` (stream-json's informational system line, after Claude Code's ``<event>[:<tool>] says: `` and
    the hook's ``repeat-hooks stopped the turn (<reason>): ``); the stop through ``stop_of``.
    """

    def __init__(self, *, timeout: float = 120) -> None:
        self.timeout = timeout
        """Seconds one ``claude -p`` may take."""
        self.api: FakeMessagesAPI | None = None
        """The last run's fake model (its ``requests``)."""
        self.runs: list[Run] = []
        """The last run's CLI runs, one per turn."""

    home_type = Home
    prefix = "rh-cc-"

    def known(self, home: Home, session: str) -> bool:
        """Whether ``home`` holds session ``session`` already."""
        return any((home.config / "projects").glob(f"*/{session}.jsonl"))

    def run_in(
        self,
        scenario: Scenario,
        box: ToolBox,
        home: Home,
        session: str,
        *,
        resume: bool,
        state: Path | None = None,
        turns: int | None = None,
    ) -> list[TurnOutcome]:
        """``run`` in ``home``, session ``session`` (``resume``: it exists), the states in ``state`` (``None``: the
        hook command's default), the first ``turns`` turns (``None``: all)."""
        home.install()
        if scenario.rounds > 1:
            _add_loop(home)
        settings = claude_settings(scenario)
        if state is not None:
            settings["state"] = str(state)
        home.user_settings.parent.mkdir(parents=True, exist_ok=True)
        home.user_settings.write_text(json.dumps(settings))
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

        asks = any(item.needs_approval for item in scenario.tools)
        options, env = _options(scenario)
        outcomes: list[TurnOutcome] = []
        self.runs = []
        with KitServer(box, approve=asks) as served, FakeMessagesAPI(answer) as api:
            self.api = api
            for number, turn in enumerate(scenario.turns[:turns]):
                for cursor in cursors:
                    cursor.start_turn(number)
                orchestrated[0] = 0
                naming = ["--resume", session] if resume or number else ["--session-id", session]
                command = [*options, "--mcp-config", served.config, *naming]
                if scenario.rounds > 1:
                    rounds_file = home.root / f"rounds-{session}-{number}"
                    env.update(KIT_ROUNDS=str(scenario.rounds), KIT_ROUNDS_FILE=str(rounds_file))
                run = self._claude(home, api, turn.message, command, env)
                self.runs.append(run)
                result = run.result
                final, said = _final(run)
                outcomes.append(
                    TurnOutcome(
                        final=final,
                        stop=stop_of(result, environ=home.env()),
                        seen=_seen(run, home),
                        model_calls=sum(cursor.step for cursor in cursors),
                        stop_messages=said,
                        rounds=_rounds(run),
                    )
                )
        return outcomes

    def _claude(
        self, home: Home, api: FakeMessagesAPI, prompt: str, options: Sequence[str], env: Mapping[str, str]
    ) -> Run:
        """``claude -p <prompt> --output-format stream-json --verbose`` with ``options`` in ``home``'s project,
        against ``api``; it dies with this process."""
        environ = {**home.env(**dict(env)), **offline_env(api, home.root), **home.own()}
        command = [str(claude_cli()), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", MODEL]
        done = subprocess.run(
            [*command, *options],
            cwd=home.project,
            env=environ,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            preexec_fn=sandbox.dies_with_parent() if self.crashes else None,  # the child only calls prctl
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return Run(done.returncode, lines, done.stderr)


def _options(scenario: Scenario) -> tuple[list[str], dict[str, str]]:
    """The CLI's options and environment for ``scenario`` (but the MCP server and the session): no built-in tool, only
    the kit's MCP server, its tools allowed without asking but those that need approval (asked of ``approve``), and for
    branches the ``Agent`` tool, the kit's sub-agent and no background tasks."""
    allowed = [claude_name(item.name) for item in scenario.tools if not item.needs_approval]
    tools, env = "", {}
    options = ["--strict-mcp-config"]
    if any(item.needs_approval for item in scenario.tools):
        options += ["--permission-mode", "default", "--permission-prompt-tool", claude_name(APPROVE)]
    else:
        options += ["--permission-mode", "dontAsk"]
    if scenario.branches > 1:
        kit_tools = [claude_name(item.name) for item in scenario.tools]
        agents = {"kit_branch": {"description": "One branch.", "prompt": BRANCH_PROMPT, "tools": kit_tools}}
        tools = "Agent"
        options += ["--agents", json.dumps(agents)]
        allowed.append("Agent")
        # The kit's branches are sub-agents the main agent waits for: Claude Code may move parallel sub-agents to
        # the background instead (the claude_agent_sdk adapter's driver measured it), ending the turn before them.
        env["CLAUDE_CODE_DISABLE_BACKGROUND_TASKS"] = "1"
    if allowed:  # a variadic option: with no value, it would take the next option for one
        options += ["--allowedTools", *allowed]
    return ["--tools", tools, *options], env


def _add_loop(home: Home) -> None:
    """Claude Code's loop around the agent (``LOOP_HOOK``) as a ``Stop`` hook in ``home``'s Claude Code settings, the
    user's own: first in the event, before the guard's (Claude Code runs an event's hooks at once)."""
    script = home.root / "kit_loop.py"
    script.write_text(LOOP_HOOK)
    settings = json.loads(home.settings.read_text())
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    settings.setdefault("hooks", {}).setdefault("Stop", []).insert(
        0, {"hooks": [{"type": "command", "command": command}]}
    )
    home.settings.write_text(json.dumps(settings))


def _rounds(run: Run) -> int:
    """The rounds Claude Code ran the agent in ``run``: its first, and one for each time it started it again after a
    ``Stop`` hook blocked (a ``user`` line holding ``LOOP_FEEDBACK``)."""
    again = 0
    for line in run.lines:
        content = (line.get("message") or {}).get("content")
        if line.get("type") == "user" and isinstance(content, list):
            again += any(
                isinstance(block, Mapping) and str(block.get("text", "")).startswith(LOOP_FEEDBACK) for block in content
            )
    return 1 + again


def _final(run: Run) -> tuple[str, int]:
    """The final text the caller got from ``run`` and how many times the guard's stop message reached it: the
    ``result``, or at a stop (``result`` empty) the stop message of the last ``systemMessage`` holding one."""
    said = [STOP_FRAME.split(text, maxsplit=1)[1] for text in run.system_messages if STOP_FRAME.search(text)]
    final = str(run.result.get("result") or "")
    count = sum(1 for text in [*said, final] if text.startswith(STOPPED))
    if not final and said:
        final = said[-1]
    return final, count


def _seen(run: Run, home: Home) -> list[str]:
    """What the model was handed for its kit calls in ``run`` (``TurnOutcome.seen``): each ``tool_result`` of a kit
    call in the stream-json ``user`` lines, with the notes Claude Code appends to it (``_notes``)."""
    kit_calls: set[str] = set()
    results: list[tuple[str, list[tuple[str, str]]]] = []
    for line in run.lines:
        content = (line.get("message") or {}).get("content")
        if not isinstance(content, list):
            continue
        if line.get("type") == "assistant":
            kit_calls |= {
                str(block.get("id"))
                for block in content
                if isinstance(block, Mapping)
                and block.get("type") == "tool_use"
                and str(block.get("name")).startswith(claude_name(""))
            }
        elif line.get("type") == "user":
            texts = [
                (str(block.get("tool_use_id")), result_text(block.get("content")))
                for block in content
                if isinstance(block, Mapping)
                and block.get("type") == "tool_result"
                and str(block.get("tool_use_id")) in kit_calls
            ]
            results.append((str(line.get("uuid")), texts))
    calls, batches = _notes(home, str(run.result.get("session_id")))
    seen: list[str] = []
    for uuid_, texts in results:
        for call, text in texts:
            read = text
            for note in calls.get(call, []):
                read = noted(read, note)
            seen.append(read)
        seen += batches.get(uuid_, [])
    return seen


def _notes(home: Home, session_id: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """What hooks added for the model to read in session ``session_id`` (its transcripts, a sub-agent's too): the
    ``PostToolUse`` and ``PostToolUseFailure`` notes by the ``tool_use_id`` of the call whose result they follow, and
    the ``PostToolBatch`` notes by the ``uuid`` of the tool-result message they are appended to. Claude Code 2.1.332
    streams neither: it keeps each as a ``hook_additional_context`` attachment in the transcript, after that message
    and the attachments between (``parentUuid`` names the entry before: the message, or one of those attachments)."""
    projects = home.config / "projects"
    calls: dict[str, list[str]] = {}
    batches: dict[str, list[str]] = {}
    for path in [*projects.glob(f"*/{session_id}.jsonl"), *projects.glob(f"*/{session_id}/subagents/*.jsonl")]:
        attached: dict[str, str] = {}  # an attachment's uuid -> the entry before it
        for line in path.read_text().splitlines():
            entry = json.loads(line) if line.strip() else {}
            attachment = entry.get("attachment") or {}
            parent = str(entry.get("parentUuid"))
            if attachment:
                attached[str(entry.get("uuid"))] = parent
            if attachment.get("type") != "hook_additional_context":
                continue
            texts = [str(text) for text in attachment.get("content") or []]
            if attachment.get("hookEvent") in ("PostToolUse", "PostToolUseFailure"):
                calls.setdefault(str(attachment.get("toolUseID")), []).extend(texts)
            elif attachment.get("hookEvent") == "PostToolBatch":
                while parent in attached:
                    parent = attached[parent]
                batches.setdefault(parent, []).extend(texts)
    return calls, batches


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
