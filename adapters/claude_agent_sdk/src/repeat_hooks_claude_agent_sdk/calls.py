"""What Claude Code hands the hooks, turned into what the core counts, and what the hooks hand back.

- A tool call: ``ToolCall`` with the tool's effect hints (``tool_call``): an MCP tool's explicit
  ``readOnlyHint``, ``destructiveHint`` and ``idempotentHint`` (``Hints``), or, for Claude Code's own
  tools, the ones it documents as read-only (``BUILTIN_READ_ONLY``).
- A result: what the model reads of it (``result_view``), the value the guard digests.
- A decision: the ``PreToolUse`` output that lets the call run, refuses it, or refuses it and ends the
  turn (``allow``, ``deny``).
- The text of a tool result as the caller's stream and the model hold it (``result_text``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from claude_agent_sdk.types import SyncHookJSONOutput

from repeat_hooks import Refusal, RefusalKind, Stop, ToolCall

BUILTIN_READ_ONLY: frozenset[str] = frozenset(
    {
        "Read",
        "Glob",
        "Grep",
        "LS",
        "NotebookRead",
        "WebFetch",
        "WebSearch",
        "ToolSearch",
        "TaskOutput",
        "BashOutput",
        "ListMcpResourcesTool",
        "ReadMcpResourceTool",
    }
)
"""Claude Code's own tools that read and change nothing (the ones its documentation marks read-only, plus
the readers of background output and MCP resources): a call to one restarts no other call's count.
Everything else (Bash, Edit, Write, Task, ...) may change what the next call returns."""


class Hints(NamedTuple):
    """A tool's explicit MCP annotations; ``None`` where the server did not set one (MCP's defaults say nothing)."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None


def hints_of(annotations: Any) -> Hints:
    """The ``Hints`` of an MCP tool from its ``annotations`` as they travel on the wire (``readOnlyHint``,
    ``destructiveHint``, ``idempotentHint``); anything that is not an explicit ``true``/``false`` is ``None``."""
    if not isinstance(annotations, Mapping):
        return Hints()

    def flag(name: str) -> bool | None:
        value = annotations.get(name)
        return value if isinstance(value, bool) else None

    return Hints(flag("readOnlyHint"), flag("destructiveHint"), flag("idempotentHint"))


def tool_call(name: str, tool_input: Any, call_id: str | None, hints: Hints | None = None) -> ToolCall:
    """The core's ``ToolCall`` for one call Claude Code is about to run (``PreToolUse``'s ``tool_name``,
    ``tool_input`` and ``tool_use_id``), with its hints: the MCP tool's ``hints`` when it has any, else
    ``read_only=True`` for the built-in tools of ``BUILTIN_READ_ONLY``, else unknown (``Policy.read_only``
    decides). ``name`` is Claude Code's name for the tool: ``mcp__<server>__<tool>`` for an MCP tool."""
    hints = hints or Hints()
    read_only = hints.read_only
    if read_only is None and name in BUILTIN_READ_ONLY:
        read_only = True
    return ToolCall(
        name,
        tool_input if tool_input is not None else {},
        call_id=call_id,
        read_only=read_only,
        destructive=hints.destructive,
        idempotent=hints.idempotent,
    )


_MCP_META = frozenset({"_meta", "meta", "annotations"})


def result_view(tool_response: Any) -> Any:
    """What the model reads of a tool's result (``PostToolUse``'s ``tool_response``), for the guard to digest.

    An MCP tool's response is its list of content blocks (a ``CallToolResult``'s ``content``; some tools give
    the whole result, with ``content`` and ``structuredContent``): a text block is read as its text, and each
    block's protocol metadata (``_meta``, ``annotations``, fresh request ids and the like) is left out, as
    the model never reads it. A built-in tool's response (Read's file, Bash's stdout, ...) is taken as it is.
    """
    if isinstance(tool_response, Mapping) and isinstance(tool_response.get("content"), list):
        view = {key: value for key, value in tool_response.items() if key not in _MCP_META}
        view["content"] = result_view(tool_response["content"])
        return view
    if isinstance(tool_response, list) and all(isinstance(block, Mapping) for block in tool_response):
        return [_block_view(block) for block in tool_response]
    return tool_response


def _block_view(block: Mapping[str, Any]) -> Any:
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return block["text"]
    return {key: value for key, value in block.items() if key not in _MCP_META}


def allow() -> SyncHookJSONOutput:
    """The ``PreToolUse`` output that lets the call go on: no decision, so Claude Code's own permission rules
    (``allowed_tools``, ``permission_mode``, ``can_use_tool``) still decide; the guard never grants one."""
    return {}


def deny(decision: Refusal | Stop, stop: Stop | None = None) -> SyncHookJSONOutput:
    """The ``PreToolUse`` output for a refused call: the tool does not run and the model reads the refusal's
    text as the call's error result. A ``Stop`` (and a refusal because the turn already stopped) also ends the
    turn (``continue_: False``): Claude Code makes no further model call, and the stop message is the reason
    the call's result holds, so the model reads it when the conversation goes on. ``stop``: the refusal itself
    ends the turn with that stop (``max_refusals`` reached at it): the model reads the refusal, and the
    caller gets the stop."""
    output: SyncHookJSONOutput = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": decision.message,
        }
    }
    if stop is not None or isinstance(decision, Stop) or decision.reason is RefusalKind.TURN_ENDED:
        output["continue_"] = False
        output["stopReason"] = (stop or decision).message
    return output


_HOOK_ERROR = re.compile(r"^PreToolUse:\S+ hook error: ")
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*$", re.DOTALL)


def result_text(content: str | list[dict[str, Any]] | None) -> str:
    """The text of a tool result (a ``ToolResultBlock``'s ``content``), as the model reads it, without Claude
    Code's framing: the ``PreToolUse:<tool> hook error: `` that it puts before a refusal's text, and the
    ``<system-reminder>`` it may append. Text blocks are joined; any other block is written as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    else:
        parts = [
            block["text"] if block.get("type") == "text" and isinstance(block.get("text"), str) else json.dumps(block)
            for block in content
        ]
        text = "".join(parts)
    text = _REMINDER.sub("", text)
    return _HOOK_ERROR.sub("", text, count=1).strip()
