"""``GuardSetupError``: a guard set up so that it could not work as written."""

from __future__ import annotations


class GuardSetupError(ValueError):
    """A guard is set up so that it could not work as written (a budget nothing feeds, a tool name that
    matches no tool, a policy given twice); the message says how to fix it. Adapters may subclass it
    together with their SDK's own setup error."""
