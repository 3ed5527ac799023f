"""Strands' tool calls and results, as the guard reads them.

- ``tool_call``: a ``toolUse`` block (and the tool it names) as a ``repeat_hooks.ToolCall``, with the
  effect hints the tool's ``tool_spec["annotations"]`` sets explicitly (MCP tools carry their server's
  ``readOnlyHint``, ``destructiveHint`` and ``idempotentHint`` there; a key that is absent says nothing).
- ``model_view``: what the model reads of a ``ToolResult``: its ``content`` blocks, not Strands' wrapper
  (``toolUseId``, ``status``), so that two runs returning the same content are the same result.
- ``succeeded``: whether a ``ToolResult`` reports success (``status`` is not ``"error"``; an MCP result
  with ``isError`` is a failure).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strands.types.tools import AgentTool, ToolResult, ToolUse

from repeat_hooks import ToolCall

_HINTS = (("readOnlyHint", "read_only"), ("destructiveHint", "destructive"), ("idempotentHint", "idempotent"))


def hints(tool: AgentTool | None) -> dict[str, bool]:
    """The effect hints ``tool``'s spec sets explicitly: ``{"read_only": True, ...}`` (keyword names of
    ``ToolCall``). A hint that is absent, or not a bool, is left out: unknown."""
    if tool is None:
        return {}
    try:
        annotations = tool.tool_spec.get("annotations")
    except Exception:  # a tool whose spec cannot be built: no hints
        return {}
    if not isinstance(annotations, Mapping):
        return {}
    found: dict[str, bool] = {}
    for key, name in _HINTS:
        value = annotations.get(key)
        if isinstance(value, bool):
            found[name] = value
    return found


def tool_call(tool_use: ToolUse, tool: AgentTool | None = None, *, call_id: str | None = None) -> ToolCall:
    """The ``ToolCall`` of a ``toolUse`` block: its name, its input, its id (``call_id`` overrides it) and
    the hints of ``tool`` (the tool it names, if known)."""
    name = str(tool_use.get("name", ""))
    identifier = call_id if call_id is not None else tool_use.get("toolUseId")
    return ToolCall(name, tool_use.get("input"), call_id=str(identifier) if identifier else None, **hints(tool))


def model_view(result: Mapping[str, Any]) -> Any:
    """What the model reads of a ``ToolResult``: the text of a single text block, the value of a single
    ``json`` block, else the list of content blocks (images and documents as Strands holds them; their
    bytes are digested by the guard, never kept)."""
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
