"""``hook``: the guard as Claude Code's hook command (``repeat-hooks hook claude-code``), one process per event; the
hook entries ``repeat-hooks install claude-code`` merges into Claude Code's settings (``ENTRIES``, ``settings_file``);
and the adapter's errors. The process itself (stdin, settings, store, outage policy) is the core's
``repeat_hooks.kit.command``; this module says what each of Claude Code's events means.

The events (Claude Code 2.1.332; every one carries ``session_id`` and ``prompt_id``, the turn's key):

- ``UserPromptSubmit`` fires when the user sends a prompt: a turn starts (its ``prompt_id``). Answers nothing.
- ``PreToolUse`` fires before each call, once its arguments are known (the hooks of a response's parallel calls run
  at once, each in its own process): the call is decided, its ``tool_use_id`` its call id (an event delivered twice
  counts once). Answers nothing (the call goes on; Claude Code's permissions still apply), or a deny with the
  refusal's text, which the model reads as the call's error result; when the model has ignored ``max_refusals``
  refusals, the deny also ends the run (``continue: false``, ``systemMessage``).
- ``PostToolUse`` fires after a call succeeded, ``PostToolUseFailure`` after one failed (a command's non-zero exit;
  a denied call fires neither): its outcome and its result as the model reads it are recorded. Answers nothing, or
  with ``Policy(warn=True)`` the warning as ``additionalContext``.
- ``PostToolBatch`` fires when every call of a model response has resolved, before the next model call: the model
  call is counted and the next one decided (``max_errors_in_a_row``, ``max_model_calls``). Its ``tool_calls`` also
  hold the calls Claude Code answered itself, with no ``PreToolUse`` and no ``PostToolUseFailure`` (``unasked``: a
  tool the agent lacks, ``<tool_use_error>Error: No such tool available: <name>...``; arguments it rejects): each is
  decided and recorded as failed first, so that its repeats count. Answers nothing, or such a call's refusal as
  ``additionalContext`` (the model reads it after the batch's last result), or at a stop ``continue: false`` with
  the stop's text (``stopReason``, ``systemMessage``): no further model call.
- ``Stop`` fires when the model answered with text (``last_assistant_message``): the model call is counted with its
  answer (``max_same_answers``) and, since a ``Stop`` hook of the user's that blocks (a loop) runs the agent again
  with no event before that model call, the next one decided. Answers nothing (the user's hooks decide whether the
  agent goes on; ours never blocks a stop), or at a stop ``continue: false``, which ends the loop too
  (``terminal_reason: "stop_hook_prevented"``, an empty ``result``).

A sub-agent's events carry its ``agent_id``: its calls count in a state of its own (``state.session_key``), its run
its one turn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import repeat_hooks
from repeat_hooks import Policy
from repeat_hooks.kit import GuardStopped
from repeat_hooks.kit.command import Answered, Asked, CommandHook, Event, Ran, Responded, Turn, run
from repeat_hooks.kit.install import Entry
from repeat_hooks.stop_rules import Feed

from .calls import allowed, denied, ended, result_view, tool_call, unasked
from .state import session_key

CLI = "claude-code"
"""The CLI's name in ``repeat-hooks hook|install|uninstall <cli>``."""
TIMEOUT = 30
"""Seconds Claude Code gives each hook process before it kills it and lets the call go on (its default is 600)."""
ENTRIES = (
    Entry("UserPromptSubmit", None, {"timeout": TIMEOUT}),
    Entry("PreToolUse", "*", {"timeout": TIMEOUT}),
    Entry("PostToolUse", "*", {"timeout": TIMEOUT}),
    Entry("PostToolUseFailure", "*", {"timeout": TIMEOUT}),
    Entry("PostToolBatch", None, {"timeout": TIMEOUT}),
    Entry("Stop", None, {"timeout": TIMEOUT}),
)
"""The hook entries ``repeat-hooks install claude-code`` adds, one matcher group each (``*``: every tool)."""
FEEDS: tuple[Feed, ...] = (Feed.OUTCOMES, Feed.MODEL_CALLS, Feed.ANSWERS, Feed.WARNINGS)
"""What Claude Code's events feed: each call's outcome, each model response (``PostToolBatch``), each text answer
(``Stop``), and a warning after a result (``PostToolUse``'s ``additionalContext``); no model call's time or usage."""

GuardSetupError = repeat_hooks.GuardSetupError
"""A setup mistake (a misspelt setting, a settings file that is no JSON object): the message says the right spelling."""


class RepeatGuardStopped(GuardStopped):
    """A turn the guard ended, as a Python error (``raise RepeatGuardStopped(stop)`` in a script that runs ``claude
    -p`` and reads the stop with ``stop_of``): the hook process itself raises none, it answers Claude Code."""


def settings_file(scope: str, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> Path:
    """Claude Code's settings file for ``scope``: ``"user"``, ``$CLAUDE_CONFIG_DIR/settings.json`` (else
    ``~/.claude/settings.json``); ``"project"``, ``.claude/settings.local.json`` in ``cwd`` (the project's root): the
    project's personal file, since the command names this machine's interpreter (install says when git would commit
    it; a team wanting the guard for everyone adds ``repeat-hooks hook claude-code`` to ``.claude/settings.json``)."""
    environ = os.environ if environ is None else environ
    if scope == "project":
        return Path(cwd or os.getcwd()) / ".claude" / "settings.local.json"
    config = environ.get("CLAUDE_CONFIG_DIR")
    return (Path(config) if config else Path(environ.get("HOME") or Path.home()) / ".claude") / "settings.json"


class ClaudeCodeHook(CommandHook):
    """Claude Code's hook protocol for ``repeat_hooks.kit.command.run`` (see the module's docstring); a hook that
    fails open exits 1, Claude Code's non-blocking error: the call goes on, the stderr line shown in the transcript."""

    cli = CLI
    asks = "PreToolUse"
    feeds = FEEDS
    project_variable = "CLAUDE_PROJECT_DIR"
    allowed = staticmethod(allowed)
    denied = staticmethod(denied)
    ended = staticmethod(ended)

    def read(self, event: Mapping[str, Any], policy: Policy) -> Event:
        name, session = event.get("hook_event_name"), self.field(event, "session_id")
        agent = event.get("agent_id")
        sub = isinstance(agent, str) and bool(agent)
        key = session_key(session, agent if sub else None)
        prompt = event.get("prompt_id")
        turn_id = agent if sub else prompt if isinstance(prompt, str) and prompt else None
        if name == "UserPromptSubmit":
            return Event(key, turn_id, Turn(responds=True))  # no event before a model call: its first starts now
        if name == "PostToolBatch":
            calls = event.get("tool_calls")
            listed = calls if isinstance(calls, list) else []
            ids = [str(c.get("tool_use_id")) for c in listed if isinstance(c, Mapping) and c.get("tool_use_id")]
            return Event(key, turn_id, Responded(f"batch:{ids[0]}" if ids else None, unasked=unasked(listed, policy)))
        if name == "Stop":
            said = event.get("last_assistant_message")
            again = event.get("stop_hook_active") is True
            return Event(key, turn_id, Answered(said if isinstance(said, str) else None, again))
        if name not in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
            return Event(key, turn_id, None)
        tool = self.field(event, "tool_name")
        call_id = event.get("tool_use_id")
        call = tool_call(tool, event.get("tool_input"), call_id if isinstance(call_id, str) else None, policy)
        if name == "PreToolUse":
            return Event(key, turn_id, Asked(call))
        if name == "PostToolUse":
            return Event(key, turn_id, Ran(call, True, result_view(event.get("tool_response"))))
        return Event(key, turn_id, Ran(call, False, event.get("error")))


def hook(
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the hook for one Claude Code event (stdin, by default) and return the exit code: what
    ``repeat-hooks hook claude-code`` does. 0 with the answer on stdout; 1 (Claude Code's non-blocking error: the
    CLI goes on) with one line on stderr when the event, the settings or the store cannot be used and ``fail`` is
    ``"open"``; never 2 (its deny shows the model the hook's command line)."""
    return run(ClaudeCodeHook(), stdin=stdin, stdout=stdout, stderr=stderr, environ=environ)
