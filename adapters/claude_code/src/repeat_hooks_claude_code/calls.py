"""What Claude Code's hook events hand the guard, as the core counts it, and what the hook answers: a call of a
built-in tool as a ``ToolCall`` (``tool_call``: its volatile fields left out, its effect known), a result as the
model reads it (``result_view``), and the JSON a hook prints (``allowed``, ``denied``, ``ended``).

Claude Code 2.1.332 takes a hook's answer as JSON on stdout with exit code 0. A denied call's reason reaches the
model as the call's error result (``PreToolUse:<tool> hook error: <reason>``); exit code 2 would deny too, but
shows the model the hook's command line, so the hook never uses it. ``continue: false`` ends the run with no further
model call (``terminal_reason: "hook_stopped"``, exit code 0); its ``stopReason`` is not shown in ``-p`` mode, so the
stop is also a ``systemMessage``, which stream-json shows (``{"type": "system", "subtype": "informational"}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from repeat_hooks import Policy, Refusal, Stop, ToolCall
from repeat_hooks.kit.command import Ran, cli_call

READ_ONLY: frozenset[str] = frozenset(
    "Read Glob Grep LS NotebookRead WebFetch WebSearch ToolSearch TaskOutput BashOutput ListMcpResourcesTool "  # noqa: SIM905
    "ReadMcpResourceTool".split()
)
"""Claude Code's own tools that read and change nothing (a fetch or a search changes nothing here either): a call to
one restarts no other call's count, so ``Read``, ``Grep``, ``Read`` still counts the ``Read`` twice."""
WRITES: frozenset[str] = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
"""Claude Code's own tools that change files: a success restarts every other call's count (the test rerun after an
edit runs). Not "destructive": the same edit twice fails (its old text is gone) or writes the same bytes."""
VOLATILE_ARGUMENTS: Mapping[str, frozenset[str]] = MappingProxyType({"Bash": frozenset({"description"})})
"""Argument fields of a built-in tool that the model writes afresh each time without changing the call: ``Bash``'s
``description`` is free text beside its ``command``, so the same command with a new description is the same call."""


def tool_call(name: str, tool_input: Any, call_id: str | None, policy: Policy) -> ToolCall:
    """The ``ToolCall`` of a call Claude Code is about to run (or ran): its ``tool_use_id`` as the call id, a built-in
    tool's volatile fields left out, and its effect (read-only, or a write) unless the settings name the tool in
    ``read_only`` or ``destructive`` (they decide then). Any other tool (``Bash``, an MCP tool) is unknown: a success
    of it may change what the others return."""
    return cli_call(name, tool_input, call_id, policy, read_only=READ_ONLY, writes=WRITES, volatile=VOLATILE_ARGUMENTS)


CLI_ERROR = "<tool_use_error>"
"""How Claude Code frames the error of a call it answers itself, with no hook before it (2.1.332: ``No such tool
available: <name>``, an ``InputValidationError``), as the model reads it and ``PostToolBatch``'s ``tool_response``
holds it (a command's or a tool's own failure is not framed so)."""


def unasked(tool_calls: list[Any], policy: Policy) -> tuple[Ran, ...]:
    """The calls of a ``PostToolBatch``'s ``tool_calls`` that Claude Code answered itself (``CLI_ERROR``), each as a
    failed call with that error as its result (``command.Responded.unasked``)."""
    return tuple(
        Ran(tool_call(name, called.get("tool_input"), str(called.get("tool_use_id") or ""), policy), False, text)
        for called in tool_calls
        if isinstance(called, Mapping)
        and isinstance(name := called.get("tool_name"), str)
        and name
        and isinstance(text := called.get("tool_response"), str)
        and text.startswith(CLI_ERROR)
    )


_WRAPPER = frozenset({"interrupted", "isImage", "noOutputExpected", "_meta", "meta", "annotations"})


def result_view(tool_response: Any) -> Any:
    """What the model reads of a tool's result (``PostToolUse``'s ``tool_response``): ``Bash``'s output without the
    CLI's flags about it (``isImage``, ``noOutputExpected``; ``interrupted`` kept when true), an MCP tool's content
    blocks without their protocol metadata, anything else as it is."""
    if isinstance(tool_response, Mapping):
        view = {key: value for key, value in tool_response.items() if key not in _WRAPPER}
        if tool_response.get("interrupted") is True:
            view["interrupted"] = True
        if isinstance(view.get("content"), list):
            view["content"] = result_view(view["content"])
        return view
    if isinstance(tool_response, list):
        return [
            {key: value for key, value in block.items() if key not in _WRAPPER} if isinstance(block, Mapping) else block
            for block in tool_response
        ]
    return tool_response


def allowed(event_name: str, warning: str | None) -> dict[str, Any] | None:
    """The answer that lets the event go on: nothing (Claude Code's own permissions still decide a call), or after a
    call's result, the guard's warning (``Policy(warn=True)``) as ``additionalContext``, which the model reads right
    after that result; after a batch, the refusal (or warning) of a call Claude Code answered itself, read after the
    batch's last result."""
    if warning is None or event_name not in ("PostToolUse", "PostToolUseFailure", "PostToolBatch"):
        return None
    return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": warning}}


def denied(refusal: Refusal, stop: Stop | None) -> dict[str, Any]:
    """``PreToolUse``'s answer to a refused call: the tool does not run and the model reads the refusal's text as its
    error result; with ``stop``, the run ends there too (``ended``)."""
    answer: dict[str, Any] = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": refusal.message,
        }
    }
    return {**answer, **ended(stop)} if stop is not None else answer


def ended(stop: Stop) -> dict[str, Any]:
    """The answer that ends the run with no further model call: ``continue: false`` with the stop's message as
    ``stopReason`` (kept in the transcript) and as ``systemMessage`` (shown to the user, in stream-json too)."""
    said = f"repeat-hooks stopped the turn ({stop.reason.value}): {stop.message}"
    return {"continue": False, "stopReason": stop.message, "systemMessage": said}
