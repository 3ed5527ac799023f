"""repeat-hooks: stop LLM agents from calling the same tool over and over."""

import logging

from .call import ToolCall, call_key, canonical_arguments
from .cost import TokenPrices
from .decision import GuardEvent, Refusal, Stop
from .guard import StopRepeatedCalls
from .policy import Policy
from .state import GuardState
from .stop_reason import StopReason
from .store import MemoryStore, StateStore, StoreContention, StoreUnavailable

__all__ = [
    "GuardEvent",
    "GuardState",
    "MemoryStore",
    "Policy",
    "Refusal",
    "StateStore",
    "Stop",
    "StopReason",
    "StopRepeatedCalls",
    "StoreContention",
    "StoreUnavailable",
    "TokenPrices",
    "ToolCall",
    "call_key",
    "canonical_arguments",
]

__version__ = "0.1.0"

logging.getLogger("repeat_hooks").addHandler(logging.NullHandler())
