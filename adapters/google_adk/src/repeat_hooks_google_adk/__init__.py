"""repeat-hooks for Google ADK (``google-adk`` 2.11 to 2.13): ``App(..., plugins=[RepeatGuardPlugin()])``, then
``stop_of(final_event)``. A turn is one invocation; the state lives in the session state, or with ``store=`` in a
``StateStore``: see the README."""

from __future__ import annotations

from repeat_hooks import GuardSetupError, Policy, Stop, StopReason, TokenPrices
from repeat_hooks.kit import ParsedStates, moved

from . import calls, state
from .calls import refusal_of
from .guard import RepeatGuardPlugin, RepeatGuardStopped
from .state import STATE_KEY, STOP_METADATA, read_state, stop_of

__all__ = [
    "STATE_KEY",
    "STOP_METADATA",
    "GuardSetupError",
    "Policy",
    "RepeatGuardPlugin",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "read_state",
    "refusal_of",
    "stop_of",
]

__version__ = "0.3.0"

__getattr__ = moved(
    __name__,
    {
        "model_view": "repeat_hooks_google_adk.calls:model_view",
        "tool_call": "repeat_hooks_google_adk.calls:tool_call",
        "read_only_hint": (
            "repeat_hooks_google_adk.calls.tool_call(tool, {}, None).read_only",
            lambda: lambda tool: calls.tool_call(tool, {}, None).read_only,
        ),
        "Refused": "repeat_hooks_google_adk.calls:Refused",
        "read_events": "repeat_hooks_google_adk.state:read_events",
        "write_state": (
            "repeat_hooks_google_adk.state.SessionSlot(ParsedStates(), context.session, key, context).write",
            lambda: (
                lambda context, guard_state, key=STATE_KEY: state.SessionSlot(
                    ParsedStates(), context.session, key, context
                ).write(guard_state)
            ),
        ),
        "Scope": "repeat_hooks_google_adk.guard:Scope",
        "stop_response": "repeat_hooks_google_adk.guard:stop_response",
        "FailureCheck": "repeat_hooks.kit:FailureCheck",
    },
)
"""The names 0.3 moved out of the front door, and their new spelling: one release more, with a warning."""
