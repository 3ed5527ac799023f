"""repeat-hooks for the Claude Code CLI (2.1.332): ``repeat-hooks install claude-code`` adds the hook command
(``repeat-hooks hook claude-code``, ``hook`` here) to Claude Code's settings, and every session is guarded: the same
call with nothing changed is refused after 2 runs, and a model that keeps ignoring the refusals has its run ended.
``stop_of(result)`` says how the guard ended a ``claude -p`` run, if it did; ``trajectory`` reads a session's transcript
for ``repeat-hooks replay``. See the README."""

from __future__ import annotations

from repeat_hooks import Policy, Stop, StopReason

from .guard import CLI, ENTRIES, FEEDS, GuardSetupError, RepeatGuardStopped, hook, settings_file
from .state import stop_of
from .transcript import trajectory

__all__ = [
    "CLI",
    "ENTRIES",
    "FEEDS",
    "GuardSetupError",
    "Policy",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "hook",
    "settings_file",
    "stop_of",
    "trajectory",
]

__version__ = "0.3.0"
