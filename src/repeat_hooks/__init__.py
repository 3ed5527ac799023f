"""repeat-hooks: stop LLM agents from calling the same tool over and over."""

import logging

from .call import ToolCall, batch_call_ids, call_key, canonical_arguments
from .clock import Clock, Stopwatch
from .cost import CostOf, TokenPrices, usage_tokens
from .decision import GuardEvent, Refusal, RefusalKind, Stop
from .guard import StopRepeatedCalls
from .misuse import check_budgets, check_feeds, check_tool_names, policy_from
from .policy import Policy
from .result import VOLATILE, error_text, model_view, outcome_digest
from .setup_error import GuardSetupError
from .state import GuardState, load_state
from .stop_reason import StopReason
from .stop_rule import STOP_RULES, Feed, HookPoint, StopRule
from .store import MemoryStore, StateStore
from .store_errors import StateCorrupt, StoreContention, StoreUnavailable
from .turn import Turn

__all__ = [
    "STOP_RULES",
    "VOLATILE",
    "Clock",
    "CostOf",
    "Feed",
    "GuardEvent",
    "GuardSetupError",
    "GuardState",
    "HookPoint",
    "MemoryStore",
    "Policy",
    "Refusal",
    "RefusalKind",
    "StateCorrupt",
    "StateStore",
    "Stop",
    "StopReason",
    "StopRepeatedCalls",
    "StopRule",
    "Stopwatch",
    "StoreContention",
    "StoreUnavailable",
    "TokenPrices",
    "ToolCall",
    "Turn",
    "batch_call_ids",
    "call_key",
    "canonical_arguments",
    "check_budgets",
    "check_feeds",
    "check_tool_names",
    "error_text",
    "load_state",
    "model_view",
    "outcome_digest",
    "policy_from",
    "usage_tokens",
]

__version__ = "0.2.0"

logging.getLogger("repeat_hooks").addHandler(logging.NullHandler())
