"""repeat-hooks for the Claude Agent SDK (``claude-agent-sdk`` 0.2.189, its bundled Claude Code CLI 2.1.332).

::

    from claude_agent_sdk import ClaudeAgentOptions
    from repeat_hooks_claude_agent_sdk import RepeatGuardHooks

    guard = RepeatGuardHooks()  # the default Policy()
    async for message in guard.query(prompt="Where is FR-7731?", options=ClaudeAgentOptions(...)):
        ...

The guard is a set of hooks (``UserPromptSubmit``, ``PreToolUse``, ``PostToolUse``,
``PostToolUseFailure``) and a transport that shows them which model response each call belongs to. A
turn is one user prompt; the counts live in a ``StateStore`` keyed by session id, so a resumed session
goes on with its state; a sub-agent (the ``Agent`` tool) counts apart, in a state of its own.
``await stop_of(guard, result_message)`` says how the guard ended a turn.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import BUILTIN_READ_ONLY, Hints, result_text, result_view, tool_call
from .guard import NO_TRANSPORT, RepeatGuardHooks
from .state import read_state, session_key, stop_of
from .stream import GuardedTransport

__all__ = [
    "BUILTIN_READ_ONLY",
    "NO_TRANSPORT",
    "GuardedTransport",
    "Hints",
    "Policy",
    "RepeatGuardHooks",
    "Stop",
    "StopReason",
    "TokenPrices",
    "read_state",
    "result_text",
    "result_view",
    "session_key",
    "stop_of",
    "tool_call",
]

__version__ = "0.3.0"
