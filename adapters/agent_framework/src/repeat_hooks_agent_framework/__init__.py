"""repeat-hooks for Microsoft Agent Framework (``agent-framework-core`` 1.23): ``Agent(middleware=
[RepeatGuardMiddleware()])`` guards the agent (its state in the run's ``AgentSession.state``, or with ``store=`` in
a shared ``StateStore``), and ``stop_of(await agent.run(...))`` says how the guard ended the run. See the README."""

from __future__ import annotations

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .guard import GuardSetupError, RepeatGuardMiddleware, RepeatGuardStopped
from .state import STATE_KEY, STOP_KEY, read_state, stop_of

__all__ = [
    "STATE_KEY",
    "STOP_KEY",
    "GuardSetupError",
    "Policy",
    "RepeatGuardMiddleware",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "read_state",
    "stop_of",
]

__version__ = "0.3.0"
