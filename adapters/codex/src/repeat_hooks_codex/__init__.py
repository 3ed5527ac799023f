"""repeat-hooks for the Codex CLI (0.169.0): ``repeat-hooks install codex`` adds the hook command (``repeat-hooks
hook codex``, ``hook`` here) to Codex's ``hooks.json``, and every session is guarded: the same call with nothing
changed is refused after 2 runs, and once the model has ignored the refusals, every later call of the turn is refused
with the turn-over text (Codex lets no hook end a turn). ``stop_of(session)`` says when the guard would have ended a
``codex exec`` run. See the README."""

from __future__ import annotations

from repeat_hooks import Policy, Stop, StopReason

from .guard import CLI, ENTRIES, FEEDS, GuardSetupError, RepeatGuardStopped, hook, settings_file
from .state import stop_of

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
]

__version__ = "0.3.0"
