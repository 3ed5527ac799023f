"""What Codex's hook events hand the guard, as the core counts it, and what the hook answers: a call as a
``ToolCall`` (``tool_call``: its effect known for Codex's own tools), and the JSON a hook prints (``denied``).

Codex CLI 0.169.0 runs its shell tool (``exec_command``) as tool ``Bash`` with ``{"command": ...}``, and hands
``PostToolUse`` the command's output as a plain string (``tool_response``: no exit code, so the hook cannot tell a
failed command from one that succeeded: each counts as a success with that output). A denied call's reason reaches
the model as ``Command blocked by PreToolUse hook: <reason>. Command: <command>``. No hook can end a turn mid-turn
(a ``continue: false`` on a ``PreToolUse`` answer voids the answer, and the tool runs): the answer never has one.
"""

from __future__ import annotations

from typing import Any

from repeat_hooks import Policy, Refusal, RefusalKind, Stop, ToolCall
from repeat_hooks.kit.command import cli_call

WRITES: frozenset[str] = frozenset({"apply_patch", "Edit", "Write"})
"""Codex's own tools that change files (``apply_patch``, however a Codex version names it to hooks): a success
restarts every other call's count, so the tests rerun after an edit run. ``Bash`` is unknown (a success of it
restarts the others' counts too); an MCP tool is unknown unless the settings name it."""
TURN_OVER = "This turn is over ({reason}): do not call any more tools; answer with what you know."
"""What a refusal adds once the guard would have ended the turn (Codex lets no hook end it)."""


def tool_call(name: str, tool_input: Any, call_id: str | None, policy: Policy) -> ToolCall:
    """The ``ToolCall`` of a call Codex is about to run (or ran): its ``tool_use_id`` (the model's ``call_id``) as
    the call id, and its effect (a write) unless the settings name the tool in ``read_only`` or ``destructive``."""
    return cli_call(name, tool_input, call_id, policy, writes=WRITES)


def denied(refusal: Refusal, stop: Stop | None) -> dict[str, Any]:
    """``PreToolUse``'s answer to a refused call: the tool does not run and the model reads the refusal's text; with
    ``stop`` (the turn would have ended here), the text says the turn is over too."""
    reason = refusal.message
    if stop is not None and refusal.reason is not RefusalKind.TURN_ENDED:
        reason = f"{reason} {TURN_OVER.format(reason=stop.reason.value)}"
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason.rstrip("."),  # Codex adds ". Command: <command>" after it
        }
    }
