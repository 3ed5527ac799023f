"""What ADK hands a tool callback, turned into what the core counts: a tool call and its outcome."""

from __future__ import annotations

from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.transfer_to_agent_tool import TransferToAgentTool

from repeat_hooks import ToolCall


def read_only_hint(tool: BaseTool) -> bool | None:
    """What the tool says of itself: an MCP tool's ``annotations.readOnlyHint`` (``True``/``False``);
    ``True`` for ADK's ``transfer_to_agent`` (it hands the turn to another agent and changes no data, so
    it must not restart the counts of the calls around it); else ``None`` (unknown: the policy's
    ``read_only`` setting decides).

    ADK's ``McpTool`` keeps the MCP tool definition it wraps in ``raw_mcp_tool``; other tools carry no hint.
    """
    if isinstance(tool, TransferToAgentTool):
        return True
    raw = getattr(tool, "raw_mcp_tool", None)
    annotations = getattr(raw, "annotations", None)
    hint = getattr(annotations, "readOnlyHint", None)
    return hint if isinstance(hint, bool) else None


def tool_call(tool: BaseTool, arguments: dict[str, Any], call_id: str | None) -> ToolCall:
    """The core's ``ToolCall`` for one call ADK is about to run."""
    return ToolCall(name=tool.name, arguments=arguments, call_id=call_id, read_only=read_only_hint(tool))


def error_text(error: BaseException) -> str:
    """The result the guard records for a tool that raised: the exception's type and text (digested by
    the core, never stored)."""
    return f"{type(error).__name__}: {error}"
