"""``hook``: the guard as Gemini CLI's hook command (``repeat-hooks hook gemini-cli``), one process per event; the
hook entries ``repeat-hooks install gemini-cli`` merges into Gemini CLI's settings (``ENTRIES``, ``SETTINGS``,
``settings_file``); and the adapter's errors. The process itself (stdin, settings, store, outage policy) is the
core's ``repeat_hooks.kit.command``; this module says what each of Gemini CLI's events means.

The events (Gemini CLI 0.61.0; every one carries ``session_id``; none a turn id or a call id):

- ``BeforeAgent`` fires when the user sends a prompt: a turn starts. Answers nothing.
- ``BeforeModel`` fires before each model call: the previous response's calls have all resolved, so the model call
  is counted and the next one decided (``max_refusals``, ``max_errors_in_a_row``, ``max_model_calls``); the turn's
  first only decides. Answers nothing, or at a stop ``continue: false``: no further model call.
- ``BeforeTool`` fires before each call (the hooks of a response's parallel calls run at once): the call is decided.
  Answers nothing, or a deny with the refusal's text, which the model reads as the call's error; when the model has
  ignored ``max_refusals`` refusals, ``continue: false`` instead: the run ends there.
- ``AfterTool`` fires after a call ran (a denied call has none): its outcome and its result as the model reads it
  are recorded. Answers nothing, or with ``Policy(warn=True)`` the warning as ``additionalContext``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

import repeat_hooks
from repeat_hooks import Policy
from repeat_hooks.kit import GuardStopped
from repeat_hooks.kit.command import Asked, CommandHook, Event, Ran, Responded, Turn, run
from repeat_hooks.kit.install import Entry
from repeat_hooks.stop_rules import Feed

from .calls import allowed, denied, ended, outcome, tool_call

CLI = "gemini-cli"
"""The CLI's name in ``repeat-hooks hook|install|uninstall <cli>``."""
TIMEOUT_MS = 30_000
"""Milliseconds Gemini CLI gives each hook process before it kills it and lets the call go on (its default is 60 s;
Gemini's ``timeout`` is in milliseconds, where Claude Code's and Codex's are in seconds)."""
_HOOK: Mapping[str, Any] = MappingProxyType({"name": "repeat-hooks", "timeout": TIMEOUT_MS})
ENTRIES = (
    Entry("BeforeAgent", None, _HOOK),
    Entry("BeforeModel", None, _HOOK),
    Entry("BeforeTool", "*", _HOOK),
    Entry("AfterTool", "*", _HOOK),
)
"""The hook entries ``repeat-hooks install gemini-cli`` adds, one matcher group each (``*``: every tool); ``name`` is
how Gemini CLI's messages and ``hooksConfig.disabled`` name it."""
SKIPPED = "hooksConfig.disabled"
"""Where Gemini CLI's settings list hooks by ``name`` that it does not run: install says so when ours is there."""
SETTINGS: Mapping[str, Any] = MappingProxyType({"hooksConfig.enabled": True})
"""What install also sets: Gemini CLI runs no hook at all with ``hooksConfig.enabled: false`` (uninstall puts back
what was there)."""
FEEDS: tuple[Feed, ...] = (Feed.OUTCOMES, Feed.MODEL_CALLS, Feed.WARNINGS)
"""What Gemini CLI's events feed: each call's outcome, each model call (``BeforeModel``), and a warning after a result
(``AfterTool``'s ``additionalContext``); no model call's time or usage, no answer's text."""

GuardSetupError = repeat_hooks.GuardSetupError
"""A setup mistake (a misspelt setting, a settings file that is no JSON object): the message says the right spelling."""


class RepeatGuardStopped(GuardStopped):
    """A turn the guard ended, as a Python error (``raise RepeatGuardStopped(stop)`` in a script that runs ``gemini
    -p`` and reads the stop with ``stop_of``): the hook process itself raises none, it answers Gemini CLI."""


def settings_file(scope: str, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> Path:
    """Gemini CLI's settings file for ``scope``: ``"user"``, ``~/.gemini/settings.json`` (the home is
    ``$GEMINI_CLI_HOME`` where set); ``"project"``, ``.gemini/settings.json`` in ``cwd`` (the project's root), which
    Gemini CLI reads only in a trusted folder."""
    environ = os.environ if environ is None else environ
    if scope == "project":
        return Path(cwd or os.getcwd()) / ".gemini" / "settings.json"
    home = environ.get("GEMINI_CLI_HOME") or environ.get("HOME") or str(Path.home())
    return Path(home) / ".gemini" / "settings.json"


class GeminiCLIHook(CommandHook):
    """Gemini CLI's hook protocol for ``repeat_hooks.kit.command.run`` (see the module's docstring); a hook that
    fails open exits 1, Gemini CLI's non-blocking error: the call goes on, and the CLI warns with the stderr line."""

    cli = CLI
    asks = "BeforeTool"
    feeds = FEEDS
    project_variable = "GEMINI_PROJECT_DIR"
    allowed = staticmethod(allowed)
    denied = staticmethod(denied)
    ended = staticmethod(ended)

    def read(self, event: Mapping[str, Any], policy: Policy) -> Event:
        name, session = event.get("hook_event_name"), self.field(event, "session_id")
        if name == "BeforeAgent":
            return Event(session, None, Turn())
        if name == "BeforeModel":
            return Event(session, None, Responded(before=True))
        if name not in ("BeforeTool", "AfterTool"):
            return Event(session, None, None)
        tool = self.field(event, "tool_name")
        call = tool_call(tool, event.get("tool_input"), policy)
        if name == "BeforeTool":
            return Event(session, None, Asked(call))
        ok, result = outcome(tool, event.get("tool_response"))
        return Event(session, None, Ran(call, ok, result))


def hook(
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the hook for one Gemini CLI event (stdin, by default) and return the exit code: what ``repeat-hooks hook
    gemini-cli`` does. 0 with the answer on stdout; 1 (Gemini CLI's non-blocking error: the CLI goes on) with one
    line on stderr when the event, the settings or the store cannot be used and ``fail`` is ``"open"``; never 2
    (Gemini CLI would read stderr as a deny, and warn that the hook failed)."""
    return run(GeminiCLIHook(), stdin=stdin, stdout=stdout, stderr=stderr, environ=environ)
