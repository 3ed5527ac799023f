"""repeat-hooks for CrewAI (``crewai`` 1.15): ``RepeatGuard(...).attach(crew)`` guards a crew's agents (a standalone
agent's, or every agent a flow runs) through CrewAI's tool-call and model-call hooks, its state on the guarded object
(in a flow's state too, saved by ``@persist``) or with ``store=`` in a shared ``StateStore``; ``stop_of(crew)`` says
how the guard ended the latest turn, if it did. See the README."""

from __future__ import annotations

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .guard import GuardSetupError, RepeatGuard, RepeatGuardStopped
from .state import STATE_KEY, stop_of

__all__ = [
    "STATE_KEY",
    "GuardSetupError",
    "Policy",
    "RepeatGuard",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "stop_of",
]

__version__ = "0.3.0"
