"""repeat-hooks for the OpenAI Agents SDK (``openai-agents`` 0.24): ``agent = guard_agent(Agent(...))`` once, then
``Runner.run(agent, input, context=GuardState())`` per conversation (or ``guard_agent(..., store=...)`` and
``repeat_hooks.kit.request(conversation_id=...)``); ``stop_of(result)`` says how the guard ended a run, if it did."""

from __future__ import annotations

from repeat_hooks import GuardState, Policy, Stop, StopReason, TokenPrices
from repeat_hooks.kit import moved

from .guard import GuardSetupError, RepeatGuardHooks, RepeatGuardStopped, guard_agent
from .state import context_deserializer, context_serializer, save_stop, stop_items, stop_of

__all__ = [
    "GuardSetupError",
    "GuardState",
    "Policy",
    "RepeatGuardHooks",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "context_deserializer",
    "context_serializer",
    "guard_agent",
    "save_stop",
    "stop_items",
    "stop_of",
]

__version__ = "0.3.0"

__getattr__ = moved(
    __name__,
    {
        **{
            name: f"{__name__}.guard:{name}"
            for name in ("AskUnlessRefused", "EndTurn", "MissingGuard", "RecordOutcome")
        },
        **{name: f"{__name__}.guard:{name}" for name in ("RefuseRepeats", "require_state")},
        **{name: f"{__name__}.state:{name}" for name in ("GUARD_ATTRIBUTE", "find_state")},
        **{name: f"{__name__}.calls:{name}" for name in ("is_sdk_error", "model_view")},
    },
    gone={"McpHints": "hints travel on ToolCall (kit.hints)"},
)
"""The names 0.3 took out of the front door: one release more, with a warning naming the new spelling."""
