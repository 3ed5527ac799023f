"""A testing aid: the real Gemini CLI (0.61.0, from npm), headless (``gemini -p --output-format stream-json``), in an
isolated home with the hook command installed by ``repeat-hooks install gemini-cli``, against the scripted Gemini
API (``repeat_hooks.kit.fake_models.FakeGeminiAPI``). Not for production::

    def answer(request: dict, step: int) -> Reply:      # the request the CLI sent; responses with calls so far
        test = call("run_shell_command", {"command": "make test", "description": "Run the tests"})
        return [test] if step < 6 else "Done."

    with FakeGeminiAPI(answer) as api:
        home = Home(tmp_path)                           # HOME, GEMINI_CLI_HOME, a project folder, the state
        home.install()                                  # repeat-hooks install gemini-cli --user
        run = home.gemini(api, PROMPT)                  # the CLI's exit code, stream-json lines, stderr
    run.code, run.stderr, function_responses(api)

The CLI is ``.cache/node_cli``'s (``make node-clis``), or ``$GEMINI_CLI`` (its ``bundle/gemini.js``).

``Driver`` is the conformance kit's driver for this adapter (``repeat_hooks.kit.conformance``): the kit's tools served
by an MCP server in this process (``repeat_hooks.kit.tool_server.ToolServer``: it needs the ``mcp`` package), each
turn one ``gemini -p`` of one session; ``UNSUPPORTED`` and
``RETRIED_NOTE`` say what the CLI cannot express.
"""

from __future__ import annotations

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
from repeat_hooks.kit.conformance import FINAL, STOPPED, Cursor, Scenario, ToolBox, TurnOutcome
from repeat_hooks.kit.fake_models import FakeGeminiAPI, Reply, call, gemini_responses, node_cli
from repeat_hooks.kit.tool_server import NAME, CommandDriver, ToolServer, named_settings

from .guard import settings_file
from .state import stop_of

MODEL = "gemini-2.5-flash"
"""The model the CLI asks for (the scripted API answers any)."""
USERS_SETTINGS: Mapping[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}
"""What the isolated user's settings hold before install: an API key's auth, and no traffic but the model's."""


def gemini_cli() -> Path:
    """The Gemini CLI's entry script: ``$GEMINI_CLI``, else ``.cache/node_cli``'s (``make node-clis``)."""
    named = os.environ.get("GEMINI_CLI")
    return Path(named) if named else node_cli("@google", "gemini-cli", "bundle", "gemini.js")


class Run(sandbox.Run):
    """One headless run of the CLI: its exit code, its stream-json lines (parsed) and its stderr."""

    @property
    def result(self) -> dict[str, Any]:
        """The run's ``result`` line (``status``, ``stats``), if it printed one."""
        found = [line for line in self.lines if line.get("type") == "result"]
        return found[-1] if found else {}

    @property
    def session_id(self) -> str:
        """The session's id, from the ``init`` line."""
        return str(next(line["session_id"] for line in self.lines if line.get("type") == "init"))


class Home(sandbox.Home):
    """An isolated user (``repeat_hooks.kit.sandbox.Home``) whose ``HOME`` is Gemini CLI's too (``GEMINI_CLI_HOME``:
    ``~/.gemini``), with empty system settings, the project folder trusted."""

    cli = "gemini-cli"
    prefixes = ("GEMINI", "GOOGLE")

    def __init__(
        self, root: str | Path, settings: Mapping[str, Any] = USERS_SETTINGS, *, resident: Path | None = None
    ) -> None:
        super().__init__(root, resident=resident)
        self.system = self.root / "system-settings.json"
        self.system.write_text("{}\n")
        self.settings.parent.mkdir(parents=True, exist_ok=True)
        if settings:
            self.settings.write_text(json.dumps(settings, indent=2) + "\n")

    def own(self) -> dict[str, str]:
        return {"GEMINI_CLI_HOME": str(self.root), "TMPDIR": str(self.root)}

    @property
    def settings(self) -> Path:
        """Gemini CLI's user settings file in this home."""
        return settings_file("user", {"HOME": str(self.root)})

    def offline(self, api: FakeGeminiAPI) -> dict[str, str]:
        """The variables by which the CLI talks to ``api`` only, with this home's empty system settings, the project
        trusted."""
        return {
            "GEMINI_API_KEY": "offline-dummy-key",
            "GOOGLE_GEMINI_BASE_URL": api.base_url,
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(self.system),
            "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": str(self.system),
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "NO_BROWSER": "1",
            "TERM": "dumb",
        }

    def gemini(
        self, api: FakeGeminiAPI, prompt: str, *, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> Run:
        """``gemini -p <prompt> --output-format stream-json --approval-mode yolo`` in the project, against ``api``."""
        environ = {**self.env(**dict(env or {})), **self.offline(api)}
        command = ["node", str(gemini_cli()), "-p", prompt, "--output-format", "stream-json", "-m", MODEL]
        command += ["--approval-mode", "yolo"]
        return Run(*self.run(command, environ, timeout))


def function_responses(api: FakeGeminiAPI) -> list[dict[str, Any]]:
    """Every call's response the model was handed in the turn, in order (``{"output": ...}`` for a call that ran,
    ``{"error": ...}`` for one refused): those of the model call that was handed the most (a call the CLI makes
    after its loop detection starts a turn of its own)."""
    return max((gemini_responses(request) for request in api.model_requests()), key=len, default=[])


# -- the conformance kit's driver -------------------------------------------------------------------------

SERVER = NAME
"""The MCP server the driver's kit tools live on (``ToolServer``): Gemini CLI 0.61.0 names its
tools ``mcp_kit_<tool>`` (the model's declarations, the hook events' ``tool_name``)."""
STOP_FRAME = re.compile(r"(?:Agent execution stopped: )?(?:Agent execution stopped by hook: )?repeat-hooks stopped the "
                        r"turn \([a-z_]+\): ")  # fmt: skip
"""What comes before the stop's message where the caller reads it: the CLI's ``Agent execution stopped: `` (text mode's
stderr line at a hook's ``continue: false``), then ``guard.ended``'s ``stopReason`` frame."""
BLOCKED = "Tool execution blocked: "
"""What Gemini CLI puts before a deny's ``reason`` in the call's error (the model reads the refusal after it)."""
_UNTRUSTED = re.compile(r"^<untrusted_context>\n(.*)\n</untrusted_context>", re.DOTALL)
_HOOK_CONTEXT = re.compile(r"\n*<hook_context>(.*?)</hook_context>\s*$", re.DOTALL)

UNSUPPORTED: dict[str, str] = {
    "a_tool_the_agent_lacks_fails_like_any_other": (
        'no hook event shows a call of a tool Gemini CLI does not have: it answers it \'Tool "mcp_kit_hex" not '
        "found' before BeforeTool (none fires, nor AfterTool), and BeforeModel's llm_request holds the conversation's "
        "text messages only, never its calls or results (0.61.0, measured: test_conformance.py's "
        "test_a_call_of_a_tool_the_cli_lacks_never_reaches_the_hook)"
    ),
    "approved_calls_run_once_and_keep_counts": (
        "gemini -p has no human to ask: a tool whose call needs confirmation (an MCP server without trust: true, "
        "--approval-mode default) is left out of the tool registry in a non-interactive run, and the model's call is "
        "answered 'Tool \"mcp_kit_refund_order\" not found' (0.61.0, measured: "
        "test_conformance.py's test_a_call_that_needs_confirmation_is_not_offered_headless)"
    ),
    "a_rejected_call_is_not_put_to_a_human_again_and_again": (
        "gemini -p has no human to ask (see approved_calls_run_once_and_keep_counts): no call is ever put to one"
    ),
}
"""Kit scenarios Gemini CLI 0.61.0 cannot express headless, and why."""

RETRIED_NOTE = (
    "a retried `gemini -p` cannot name the turn it retries: Gemini CLI 0.61.0 gives the hook events no turn id (every "
    "event carries session_id only; the prompt_id it keeps is not in them), and the hook command starts a turn at "
    "every BeforeAgent: the retry, even resuming the session (--resume), is a new turn"
)
"""Why ``RETRIED`` (the same turn served by two processes) cannot apply to Gemini CLI as the kit means it."""

STOP_LAG: dict[StopReason, int] = {}
"""``check(..., stop_lag=STOP_LAG)``: no lag. Gemini CLI fires ``BeforeModel`` before every model call, and a hook's
``continue: false`` there ends the run with no model call; a refusal that reaches ``max_refusals`` ends it at its
``BeforeTool``."""

LOOP_REASON = "Go on."
"""The instruction by which the kit's loop starts the agent again (the ``AfterAgent`` hook's ``reason``)."""
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
"""Gemini CLI's own loop around the agent, for ``Scenario.rounds``: an ``AfterAgent`` hook (it fires when the agent
answers) that blocks ``KIT_ROUNDS - 1`` times a turn (counted in ``KIT_ROUNDS_FILE``), so that Gemini CLI runs the agent
again with its ``reason`` as the next user message (0.61.0: ``sendMessageStream`` with ``stopHookActive``), as a user's
loop does."""


def gemini_name(tool_name: str) -> str:
    """Gemini CLI's name for a kit tool: ``mcp_kit_<tool>``."""
    return f"mcp_{SERVER}_{tool_name}"


def gemini_settings(scenario: Scenario) -> dict[str, Any]:
    """The scenario's policy as the hook command's settings file holds it: ``Scenario.settings`` with its tool names
    (in ``limits``, ``exempt``, ``read_only``, ``destructive``) spelt as Gemini CLI names the kit's tools, sets as
    lists (JSON)."""
    return named_settings(scenario, gemini_name)


def response_text(response: Any) -> str:
    """A ``functionResponse.response`` as the model reads it, without Gemini CLI's framing: its ``output`` (or its
    ``error``, without ``Tool execution blocked: ``) out of the ``<untrusted_context>`` an MCP tool's text is put in,
    and a hook's ``<hook_context>`` after it as the guard's note (``noted``)."""
    if not isinstance(response, Mapping):
        return json.dumps(response)
    text = str(response.get("output", response.get("error", "")))
    note = _HOOK_CONTEXT.search(text)
    if note is not None:
        text = text[: note.start()]
    text = _UNTRUSTED.sub(r"\1", text.removeprefix(BLOCKED)).strip()
    return noted(text, note.group(1)) if note is not None else text


def chat_log(home: Home, session_id: str) -> list[dict[str, Any]]:
    """The messages of session ``session_id`` as Gemini CLI records them (``~/.gemini/tmp/<project>/chats/session-*``:
    JSON lines, a message written again as it grows, by its ``id``), in order, each in its last form."""
    return _read_log(sorted((home.root / ".gemini" / "tmp").glob(f"*/chats/session-*-{session_id[:8]}*.jsonl")))


def sub_agent_logs(home: Home, session_id: str) -> list[Path]:
    """The chat logs of the sub-agents session ``session_id`` ran (``chats/<session_id>/<agent id>.jsonl``)."""
    return sorted((home.root / ".gemini" / "tmp").glob(f"*/chats/{session_id}/*.jsonl"))


def _read_log(paths: Sequence[Path]) -> list[dict[str, Any]]:
    messages: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            entry = json.loads(line) if line.strip() else {}
            if "id" in entry and "type" in entry:
                messages[str(entry["id"])] = entry
    return list(messages.values())


def kit_results(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the model was handed for its kit calls (``TurnOutcome.seen``) in ``messages`` (``chat_log``): each kit
    call's ``functionResponse``, in order, as ``response_text`` reads it."""
    seen: list[str] = []
    for message in messages:
        for made in message.get("toolCalls") or []:
            if not str(made.get("name")).startswith(gemini_name("")):
                continue
            for part in made.get("result") or []:
                if isinstance(part, Mapping) and "functionResponse" in part:
                    seen.append(response_text(part["functionResponse"].get("response")))
    return seen


class Driver(CommandDriver):
    """Runs a ``repeat_hooks.kit.conformance`` scenario on the real Gemini CLI with the hook command installed (the
    kit's ``Driver`` for this adapter).

    An isolated user (``Home``): the hook installed by ``repeat-hooks install gemini-cli``, the scenario's policy as the
    hook command's user settings (``gemini_settings``), its hook calls answered by a resident server (``run``) or each
    in its own process (``run_turn``). The scenario's tools are the tools of one MCP server in this process
    (``ToolServer``), in Gemini CLI's user settings (``mcpServers.kit``: ``httpUrl``, ``trust: true``), run
    without asking (``--approval-mode yolo``); Gemini CLI's own loop detection is off (``model.disableLoopDetection``:
    it would end a run at the 5th same call, before its ``BeforeTool``, where the kit expects the guard's decision).
    The model is a ``FakeGeminiAPI`` answering the scenario's script (``Cursor``: the driver starts each turn). Each
    turn is one ``gemini -p <message>`` (text output) of one session: the first names it (``--session-id``), later ones
    ``--resume`` it. Rounds are an ``AfterAgent`` hook that blocks (``LOOP_HOOK``); branches are sub-agents (one
    ``invoke_agent`` call each, all in the main agent's first response; a branch answers with ``complete_task``).

    What the model saw is read from the session's chat log and its sub-agents' (``chat_log``, ``sub_agent_logs``,
    ``kit_results``), the final text is the model's last answer there, or at the guard's stop stderr's ``Agent
    execution stopped: `` line (text mode prints it at every hook's ``continue: false``; stream-json prints nothing for
    one at ``BeforeModel``); the stop through ``stop_of``.
    """

    def __init__(self, *, timeout: float = 120, trust: bool = True, approval_mode: str = "yolo") -> None:
        self.timeout = timeout
        """Seconds one ``gemini -p`` may take."""
        self.trust = trust
        """The kit server's ``trust`` in Gemini CLI's settings (``False``: each call needs confirmation)."""
        self.approval_mode = approval_mode
        """``--approval-mode``."""
        self.api: FakeGeminiAPI | None = None
        """The last run's fake model (its ``requests``)."""
        self.runs: list[sandbox.Run] = []
        """The last run's CLI runs, one per turn (``lines`` empty: text output)."""

    home_type = Home
    prefix = "rh-gm-"

    def known(self, home: Home, session: str) -> bool:
        """Whether ``home`` holds session ``session`` already."""
        return bool(chat_log(home, session))

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
        settings = gemini_settings(scenario)
        if state is not None:
            settings["state"] = str(state)
        home.user_settings.parent.mkdir(parents=True, exist_ok=True)
        home.user_settings.write_text(json.dumps(settings))
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        orchestrated = [0]

        def answer(request: dict[str, Any], step: int) -> Reply:
            if len(cursors) > 1:
                branch = _branch_of(request)
                if branch is None:  # the main agent: starts every branch at once, then answers
                    orchestrated[0] += 1
                    if orchestrated[0] > 1:
                        return FINAL
                    prompts = [{"agent_name": BRANCH_AGENT, "prompt": f"{BRANCH}{n}"} for n in range(len(cursors))]
                    return [call("invoke_agent", prompt) for prompt in prompts]
                reply = cursors[branch].next()
                if isinstance(reply, str):  # a sub-agent answers by calling complete_task
                    return [call("complete_task", {"result": reply})]
            else:
                reply = cursors[0].next()
            if isinstance(reply, str):
                return reply
            return [call(gemini_name(made.tool), {"query": made.query}) for made, _ in reply]

        outcomes: list[TurnOutcome] = []
        self.runs = []
        with ToolServer(box) as served, FakeGeminiAPI(answer) as api:
            self.api = api
            _configure(home, served.url, scenario, trust=self.trust)
            known: set[Path] = set()
            for number, turn in enumerate(scenario.turns[:turns]):
                for cursor in cursors:
                    cursor.start_turn(number)
                orchestrated[0] = 0
                naming = ["--resume", session] if resume or number else ["--session-id", session]
                env: dict[str, str] = {}
                if scenario.rounds > 1:
                    rounds_file = home.root / f"rounds-{session}-{number}"
                    env.update(KIT_ROUNDS=str(scenario.rounds), KIT_ROUNDS_FILE=str(rounds_file))
                run = self._gemini(home, api, turn.message, naming, env)
                self.runs.append(run)
                messages = _this_turn(chat_log(home, session), turn.message)
                branches = [path for path in sub_agent_logs(home, session) if path not in known]
                known.update(branches)
                final, said = _final(run, messages)
                outcomes.append(
                    TurnOutcome(
                        final=final,
                        stop=stop_of(session, environ=home.env()),
                        seen=kit_results(messages)
                        + [seen for path in branches for seen in kit_results(_read_log([path]))],
                        model_calls=sum(cursor.step for cursor in cursors),
                        stop_messages=said,
                        rounds=1 + sum(1 for message in messages if _user_text(message) == LOOP_REASON),
                    )
                )
        return outcomes

    def _gemini(
        self, home: Home, api: FakeGeminiAPI, prompt: str, options: Sequence[str], env: Mapping[str, str]
    ) -> sandbox.Run:
        """``gemini -p <prompt> --approval-mode <approval_mode>`` (text output) with ``options`` in ``home``'s project,
        against ``api``; it dies with this process when ``crashes``."""
        environ = {**home.env(**dict(env)), **home.offline(api)}
        command = [
            "node",
            str(gemini_cli()),
            "-p",
            prompt,
            "-m",
            MODEL,
            "--approval-mode",
            self.approval_mode,
            *options,
        ]
        done = subprocess.run(
            command,
            cwd=home.project,
            env=environ,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            preexec_fn=sandbox.dies_with_parent() if self.crashes else None,  # the child only calls prctl
        )
        return sandbox.Run(done.returncode, [{"type": "stdout", "text": done.stdout}], done.stderr)


BRANCH_AGENT = "kit_branch"
"""The kit's sub-agent (``~/.gemini/agents/kit_branch.md``), which the main agent starts with ``invoke_agent``."""
BRANCH = "Do kit branch "
"""The prompt the main agent gives each branch's sub-agent, its number after it."""
BRANCH_PROMPT = "KIT BRANCH: use the tools."
"""The system prompt of the kit's sub-agent, by which the fake model tells a branch's requests apart."""
_BRANCH_NUMBER = re.compile(re.escape(BRANCH) + r"(\d+)")


def _branch_of(request: Mapping[str, Any]) -> int | None:
    """The branch whose sub-agent sent ``request`` (its prompt names it), or ``None`` for the main agent."""
    if BRANCH_PROMPT not in json.dumps(request.get("systemInstruction")):
        return None
    found = _BRANCH_NUMBER.search(json.dumps(request.get("contents")))
    return int(found.group(1)) if found else 0


def _configure(home: Home, url: str, scenario: Scenario, *, trust: bool = True) -> None:
    """Gemini CLI's user settings in ``home`` for the kit: the MCP server at ``url`` (trusted: its calls need no
    confirmation), no loop detection of its own, for rounds the kit's loop (``LOOP_HOOK``) as an ``AfterAgent`` hook
    beside the guard's, and for branches the kit's sub-agent (``BRANCH_AGENT``: the kit's tools, ``BRANCH_PROMPT``)."""
    if scenario.branches > 1:
        agents = home.root / ".gemini" / "agents"
        agents.mkdir(parents=True, exist_ok=True)
        tools = "".join(f"  - {gemini_name(item.name)}\n" for item in scenario.tools)
        agent = f"---\nname: {BRANCH_AGENT}\ndescription: One branch.\ntools:\n{tools}---\n{BRANCH_PROMPT}\n"
        (agents / f"{BRANCH_AGENT}.md").write_text(agent)
    settings = json.loads(home.settings.read_text())
    settings["mcpServers"] = {SERVER: {"httpUrl": url, "trust": trust}}
    settings.setdefault("model", {})["disableLoopDetection"] = True
    if scenario.rounds > 1:
        script = home.root / "kit_loop.py"
        script.write_text(LOOP_HOOK)
        command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
        hook = {"type": "command", "command": command, "name": "kit-loop"}
        settings.setdefault("hooks", {})["AfterAgent"] = [{"hooks": [hook]}]
    home.settings.write_text(json.dumps(settings, indent=2) + "\n")


def _user_text(message: Mapping[str, Any]) -> str | None:
    """A user message's text (its parts' texts joined), or ``None`` for any other message."""
    if message.get("type") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, Mapping))


def _this_turn(messages: Sequence[Mapping[str, Any]], prompt: str) -> list[Mapping[str, Any]]:
    """The messages of the session's last turn: from the last user message that is ``prompt``."""
    starts = [index for index, message in enumerate(messages) if _user_text(message) == prompt]
    return list(messages[starts[-1] :]) if starts else list(messages)


def _final(run: sandbox.Run, messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The final text the caller got from ``run`` and how many times the guard's stop message reached it: the model's
    last answer of the turn (``messages``: its chat log; stdout holds every round's answer, one after another), or at
    a stop (no answer) the message of stderr's last ``Agent execution stopped: `` line."""
    said = [
        STOP_FRAME.split(line, maxsplit=1)[1]
        for line in run.stderr.splitlines()
        if line.startswith("Agent execution stopped: ") and STOP_FRAME.match(line)
    ]
    answers = [message for message in messages if message.get("type") == "gemini"]
    final = str(answers[-1].get("content") or "").strip() if answers and not answers[-1].get("toolCalls") else ""
    count = sum(1 for text in [*said, final] if text.startswith(STOPPED))
    if not final and said:
        final = said[-1]
    return final, count
