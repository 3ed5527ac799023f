"""repeat-hooks for LangChain v1 agents (``langchain`` 1.x ``create_agent``): ``RepeatGuardMiddleware``, an agent
middleware, and ``stop_of(result)``; ``adapters/langchain/README.md`` says how it maps to LangChain."""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import model_view
from .guard import GuardSetupError, RepeatGuardMiddleware, RepeatGuardStopped
from .state import STATE_KEY, RepeatGuardState, guard_state_of, stop_of

__all__ = [
    "STATE_KEY",
    "GuardSetupError",
    "Policy",
    "RepeatGuardMiddleware",
    "RepeatGuardState",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "guard_state_of",
    "model_view",
    "stop_of",
]

__version__ = "0.3.0"
