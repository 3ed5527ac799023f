"""Strands' tool calls and results as the guard reads them: a ``toolUse`` block as a ``ToolCall`` (with the hints
of its tool's ``tool_spec["annotations"]``), what the model reads of a ``ToolResult``, and whether it succeeded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strands.types.tools import AgentTool, ToolResult, ToolUse

from repeat_hooks import ToolCall, kit

FEEDS = (*kit.FEEDS, kit.Feed.ANSWERS, kit.Feed.WARNINGS)
"""What the plugin feeds the guard: each call's outcome, each model call, its text answers; and it hands the model
the guard's notes."""


def mcp_annotations(tool: AgentTool | None) -> object:
    """The MCP annotations ``tool``'s spec carries (``None``: none, or a spec that cannot be built)."""
    try:
        return None if tool is None else tool.tool_spec.get("annotations")
    except Exception:  # a tool whose spec cannot be built: no hints
        return None


def tool_call(tool_use: ToolUse, tool: AgentTool | None = None, *, call_id: str | None = None) -> ToolCall:
    """The ``ToolCall`` of a ``toolUse`` block: its name, input and id (``call_id`` overrides it), and the effect
    hints ``tool`` (the tool it names, if known) sets explicitly."""
    identifier = call_id if call_id is not None else tool_use.get("toolUseId")
    return kit.tool_call(
        str(tool_use.get("name", "")),
        tool_use.get("input"),
        call_id=str(identifier) if identifier else None,
        annotations=mcp_annotations(tool),
    )


def model_view(result: Mapping[str, Any]) -> Any:
    """What the model reads of a ``ToolResult``: the text of a single text block, the value of a single ``json``
    block, else the list of content blocks (never Strands' wrapper: ``toolUseId``, ``status``)."""
    content = result.get("content")
    if not isinstance(content, list):
        return content
    if len(content) == 1 and isinstance(content[0], Mapping) and len(content[0]) == 1:
        (kind, value), *_ = content[0].items()
        if kind in ("text", "json"):
            return value
    return content


def succeeded(result: ToolResult | Mapping[str, Any]) -> bool:
    """Whether a ``ToolResult`` reports success: ``status`` is not ``"error"`` and no MCP ``isError``."""
    return result.get("status") != "error" and result.get("isError") is not True


def answer_of(message: Mapping[str, Any]) -> str | None:
    """A model message's text answer (its text blocks), for ``max_same_answers``; ``None`` when it uses a tool
    (something happens)."""
    content = message.get("content")
    if not isinstance(content, list):
        return None
    blocks = [block for block in content if isinstance(block, Mapping)]
    if any("toolUse" in block for block in blocks):
        return None
    return "".join(block["text"] for block in blocks if isinstance(block.get("text"), str))


def noted(result: ToolResult, note: str) -> ToolResult:
    """``result`` with the guard's ``note`` as a text block after its content (what the model reads next)."""
    return {**result, "content": [*result.get("content", []), {"text": note}]}
