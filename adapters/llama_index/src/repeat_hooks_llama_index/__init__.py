"""repeat-hooks for LlamaIndex (``llama-index-core`` 0.14): ``RepeatGuard().agent(FunctionAgent(...))`` (or
``.workflow(AgentWorkflow(...))``), its state in the run's ``Context`` store or ``store=``; ``stop_of(output)``."""

from __future__ import annotations

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .guard import GuardedTool, GuardSetupError, RepeatGuard, RepeatGuardStopped
from .state import STATE_KEY, STOP_KEY, read_state, stop_of

__all__ = [
    "STATE_KEY",
    "STOP_KEY",
    "GuardSetupError",
    "GuardedTool",
    "Policy",
    "RepeatGuard",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "read_state",
    "stop_of",
]

__version__ = "0.3.0"
