"""repeat-hooks for the Gemini CLI (0.61.0): ``repeat-hooks install gemini-cli`` adds the hook command
(``repeat-hooks hook gemini-cli``, ``hook`` here) to Gemini CLI's settings, and every session is guarded: the same
call with nothing changed is refused after 2 runs, and a model that keeps ignoring the refusals has its run ended.
``stop_of(session)`` says how the guard ended a ``gemini -p`` run, if it did. See the README."""

from __future__ import annotations

from repeat_hooks import Policy, Stop, StopReason

from .guard import CLI, ENTRIES, FEEDS, SETTINGS, SKIPPED, GuardSetupError, RepeatGuardStopped, hook, settings_file
from .state import stop_of

__all__ = [
    "CLI",
    "ENTRIES",
    "FEEDS",
    "SETTINGS",
    "SKIPPED",
    "GuardSetupError",
    "Policy",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "hook",
    "settings_file",
    "stop_of",
]

__version__ = "0.3.0"
