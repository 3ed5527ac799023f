"""Translating pydantic-ai's tool calls and their outcomes into the core's terms."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition

from repeat_hooks import ToolCall

FailureCheck = Callable[[Any], bool]
"""Says whether a tool's return value means the call failed (``True``) or succeeded."""


def read_only_hint(tool_def: ToolDefinition) -> bool | None:
    """The tool's MCP ``readOnlyHint`` (``tool_def.metadata["annotations"]``), or ``None`` when it has none.

    pydantic-ai's ``MCPToolset`` copies each MCP tool's annotations into its ``ToolDefinition``
    metadata under their wire spelling; tools of other toolsets carry no hint.
    """
    metadata = tool_def.metadata
    if not isinstance(metadata, Mapping):
        return None
    annotations = metadata.get("annotations")
    if not isinstance(annotations, Mapping):
        return None
    hint = annotations.get("readOnlyHint")
    return hint if isinstance(hint, bool) else None


def tool_call(call: ToolCallPart, tool_def: ToolDefinition | None, arguments: Any, scope: str) -> ToolCall:
    """The core's ``ToolCall`` for one call the model made.

    ``arguments``: the validated arguments when there are some, else the raw ones the model sent
    (a dict or JSON text, maybe malformed). ``scope`` makes the model's call id unique within the run
    (providers reuse ids such as ``call_0`` from one response to the next).
    """
    call_id = f"{call.tool_call_id}@{scope}" if call.tool_call_id else None
    read_only = read_only_hint(tool_def) if tool_def is not None else None
    return ToolCall(call.tool_name, arguments, call_id, read_only)


def error_text(error: BaseException) -> str:
    """What a failed call returned, for ``record_tool_result(result=...)``: the error's type and text."""
    message = getattr(error, "message", None)
    text = message if isinstance(message, str) else str(error)
    return f"{type(error).__name__}: {text}"
