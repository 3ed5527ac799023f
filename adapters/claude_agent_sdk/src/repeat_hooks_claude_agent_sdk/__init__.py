"""repeat-hooks for the Claude Agent SDK (``claude-agent-sdk`` 0.2.189, its bundled Claude Code CLI 2.1.332):
``RepeatGuardHooks().query(prompt=..., options=...)``, then ``await stop_of(result_message, guard=guard)``. A turn
is one user prompt; the counts live in the guard's ``StateStore``, one state per session id and per sub-agent."""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices
from repeat_hooks.kit import moved

from .calls import result_text
from .guard import GuardSetupError, RepeatGuardHooks, RepeatGuardStopped
from .state import read_state, stop_of

__all__ = [
    "GuardSetupError",
    "Policy",
    "RepeatGuardHooks",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "read_state",
    "result_text",
    "stop_of",
]

__version__ = "0.3.0"

__getattr__ = moved(
    __name__,
    {
        **{name: f"{__name__}.calls:{name}" for name in ("BUILTIN_READ_ONLY", "result_view", "tool_call")},
        "NO_TRANSPORT": f"{__name__}.guard:NO_TRANSPORT",
        "GuardedTransport": f"{__name__}.stream:GuardedTransport",
        "session_key": f"{__name__}.state:session_key",
    },
    gone={
        "Hints": "hints travel on ToolCall (read_only, destructive, idempotent): give tool_call the tool's MCP "
        "annotations (tool_call(name, tool_input, call_id, {'readOnlyHint': True})), read by repeat_hooks.kit.hints"
    },
)
"""0.2's names that left ``__all__``: one release more, with a warning naming their home."""
