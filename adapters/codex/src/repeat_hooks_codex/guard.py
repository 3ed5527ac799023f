"""``hook``: the guard as Codex's hook command (``repeat-hooks hook codex``), one process per event; the hook entries
``repeat-hooks install codex`` merges into Codex's ``hooks.json`` (``ENTRIES``, ``settings_file``); and the adapter's
errors. The process itself (stdin, settings, store, outage policy) is the core's ``repeat_hooks.kit.command``; this
module says what each of Codex's events means.

The events (Codex CLI 0.169.0; every one carries ``session_id``, and from ``UserPromptSubmit`` on ``turn_id``):

- ``UserPromptSubmit`` fires when the user sends a prompt: a turn starts (its ``turn_id``). Answers nothing.
- ``PreModelRequest`` fires before each model request: the previous response's calls have all resolved, so the
  model call is counted and the next one decided (the turn's first only decides). Codex lets no hook end a turn, so
  at a stop it answers nothing: the turn is over for the guard, and every later call of it is refused.
- ``PreToolUse`` fires before each call (the hooks of a response's parallel calls run at once): the call is decided,
  its ``tool_use_id`` its call id (an event delivered twice counts once). Answers nothing, or a deny with the
  refusal's text; once the turn is over (the model ignored ``max_refusals`` refusals), the text says so.
- ``PostToolUse`` fires after a call ran (a denied call has none): its result, the command's output, is recorded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

import repeat_hooks
from repeat_hooks import Policy, Stop
from repeat_hooks.kit import GuardStopped
from repeat_hooks.kit.command import Asked, CommandHook, Event, Ran, Responded, Turn, run
from repeat_hooks.kit.install import Entry
from repeat_hooks.stop_rules import Feed

from .calls import denied, tool_call

CLI = "codex"
"""The CLI's name in ``repeat-hooks hook|install|uninstall <cli>``."""
TIMEOUT = 30
"""Seconds Codex gives each hook process before it kills it and lets the call go on (its default is 600)."""
_HOOK: Mapping[str, Any] = MappingProxyType({"timeout": TIMEOUT})
ENTRIES = (
    Entry("UserPromptSubmit", None, _HOOK),
    Entry("PreModelRequest", None, _HOOK),
    Entry("PreToolUse", "*", _HOOK),
    Entry("PostToolUse", "*", _HOOK),
)
"""The hook entries ``repeat-hooks install codex`` adds to ``hooks.json``, a matcher group each (``*``: every tool)."""
FEEDS: tuple[Feed, ...] = (Feed.OUTCOMES, Feed.MODEL_CALLS)
"""What Codex's events feed: each call's result, and each model call (``PreModelRequest``); no model call's time or
usage, no answer's text, and no warning (``PostToolUse`` cannot add one to a result the model reads)."""

GuardSetupError = repeat_hooks.GuardSetupError
"""A setup mistake (a misspelt setting, a settings file that is no JSON object): the message says the right spelling."""


class RepeatGuardStopped(GuardStopped):
    """A turn the guard ended, as a Python error (``raise RepeatGuardStopped(stop)`` in a script that runs ``codex
    exec`` and reads the stop with ``stop_of``): the hook process itself raises none, it answers Codex."""


def settings_file(scope: str, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> Path:
    """Codex's hooks file for ``scope``: ``"user"``, ``$CODEX_HOME/hooks.json`` (else ``~/.codex/hooks.json``);
    ``"project"``, ``.codex/hooks.json`` in ``cwd`` (the project's root)."""
    environ = os.environ if environ is None else environ
    if scope == "project":
        return Path(cwd or os.getcwd()) / ".codex" / "hooks.json"
    home = environ.get("CODEX_HOME")
    return (Path(home) if home else Path(environ.get("HOME") or Path.home()) / ".codex") / "hooks.json"


class CodexHook(CommandHook):
    """Codex's hook protocol for ``repeat_hooks.kit.command.run`` (see the module's docstring); a hook that exits 1
    blocks nothing in Codex: the call goes on (2 would deny it)."""

    cli = CLI
    asks = "PreToolUse"
    feeds = FEEDS
    denied = staticmethod(denied)

    def read(self, event: Mapping[str, Any], policy: Policy) -> Event:
        name, session = event.get("hook_event_name"), self.field(event, "session_id")
        turn = event.get("turn_id")
        turn_id = turn if isinstance(turn, str) and turn else None
        if name == "UserPromptSubmit":
            return Event(session, turn_id, Turn())
        if name == "PreModelRequest":
            return Event(session, turn_id, Responded(before=True))
        if name not in ("PreToolUse", "PostToolUse"):
            return Event(session, turn_id, None)
        tool = self.field(event, "tool_name")
        call_id = event.get("tool_use_id")
        call = tool_call(tool, event.get("tool_input"), call_id if isinstance(call_id, str) else None, policy)
        if name == "PreToolUse":
            return Event(session, turn_id, Asked(call))
        return Event(session, turn_id, Ran(call, True, event.get("tool_response")))

    def ended(self, stop: Stop) -> None:
        return None  # Codex ends no turn from a hook: the guard refuses every later call of this one instead


def hook(
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the hook for one Codex event (stdin, by default) and return the exit code: what ``repeat-hooks hook
    codex`` does. 0 with the answer on stdout; 1 (blocks nothing: the CLI goes on) with one line on stderr when the
    event, the settings or the store cannot be used and ``fail`` is ``"open"``; never 2 (a deny with stderr's
    text)."""
    return run(CodexHook(), stdin=stdin, stdout=stdout, stderr=stderr, environ=environ)
