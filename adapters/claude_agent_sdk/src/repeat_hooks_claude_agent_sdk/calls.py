"""What Claude Code hands the hooks, as the core counts it, and what the hooks hand back: a call as a ``ToolCall``
with its tool's effect hints (``tool_call``), a result as the model reads it (``result_view``, ``result_text``),
and the ``PreToolUse`` output for a decision (``allow``, ``deny``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from claude_agent_sdk.types import SyncHookJSONOutput

from repeat_hooks import ToolCall, kit

BUILTIN_READ_ONLY: frozenset[str] = frozenset(
    "Read Glob Grep LS NotebookRead WebFetch WebSearch ToolSearch TaskOutput BashOutput ListMcpResourcesTool "  # noqa: SIM905
    "ReadMcpResourceTool".split()
)
"""Claude Code's own tools that read and change nothing: a call to one restarts no other call's count."""


def tool_call(name: str, tool_input: Any, call_id: str | None, annotations: object = None) -> ToolCall:
    """The ``ToolCall`` of a call Claude Code is about to run, with the hints of its MCP tool's ``annotations`` (as
    ``tools/list`` gave them), else ``read_only=True`` for a tool of ``BUILTIN_READ_ONLY``."""
    arguments = tool_input if tool_input is not None else {}
    builtin = True if name in BUILTIN_READ_ONLY else None
    return kit.tool_call(name, arguments, call_id=call_id, annotations=annotations, read_only=builtin)


_MCP_META = frozenset({"_meta", "meta", "annotations"})


def result_view(tool_response: Any) -> Any:
    """What the model reads of a tool's result (``PostToolUse``'s ``tool_response``): an MCP tool's content blocks,
    a text block as its text, protocol metadata (``_meta``, ``annotations``) left out; anything else as it is."""
    if isinstance(tool_response, Mapping) and isinstance(tool_response.get("content"), list):
        view = {key: value for key, value in tool_response.items() if key not in _MCP_META}
        view["content"] = result_view(tool_response["content"])
        return view
    if isinstance(tool_response, list) and all(isinstance(block, Mapping) for block in tool_response):
        return [
            block["text"]
            if block.get("type") == "text" and isinstance(block.get("text"), str)
            else {key: value for key, value in block.items() if key not in _MCP_META}
            for block in tool_response
        ]
    return tool_response


def allow() -> SyncHookJSONOutput:
    """The output that lets a call go on: no decision, so Claude Code's own permissions still decide."""
    return {}


def deny(message: str, ends: str | None = None) -> SyncHookJSONOutput:
    """The ``PreToolUse`` output for a refused call: the tool does not run and the model reads ``message`` as its
    error result. ``ends``: the turn ends too (``continue_: False``, no further model call), for that reason."""
    output: SyncHookJSONOutput = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": message,
        }
    }
    if ends is not None:
        output["continue_"] = False
        output["stopReason"] = ends
    return output


_HOOK_ERROR = re.compile(r"^PreToolUse:\S+ hook error: ")
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*$", re.DOTALL)


def result_text(content: str | list[dict[str, Any]] | None) -> str:
    """The text of a tool result (a ``ToolResultBlock``'s ``content``) as the model reads it, without Claude Code's
    framing (the ``PreToolUse:<tool> hook error: `` before a refusal, a trailing ``<system-reminder>``). Text
    blocks are joined; any other block is written as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    else:
        text = "".join(
            block["text"] if block.get("type") == "text" and isinstance(block.get("text"), str) else json.dumps(block)
            for block in content
        )
    return _HOOK_ERROR.sub("", _REMINDER.sub("", text), count=1).strip()
