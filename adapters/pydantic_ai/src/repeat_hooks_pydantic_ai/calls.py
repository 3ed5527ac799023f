"""pydantic-ai's calls and results in the core's terms: a ``ToolCallPart`` as a ``ToolCall`` with its MCP hints,
a tool's return (or failure) as the model reads it, the names of the tools an agent registered."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_ai import toolsets
from pydantic_ai.exceptions import ModelRetry, ToolFailed, ToolFailedError, ToolRetryError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextContent, ToolCallPart, ToolReturn, ToolReturnPart
from pydantic_ai.tools import ToolDefinition

from repeat_hooks import ToolCall
from repeat_hooks.kit import tool_call as kit_tool_call
from repeat_hooks.result import error_text

DECIDED_KINDS = frozenset({"function", "unapproved"})
"""The tool kinds whose calls the guard decides: ones the agent runs, with or without a person's approval."""
Tools = Callable[[str], "ToolDefinition | None"]


def annotations_of(tool_def: ToolDefinition | None) -> object:
    """The MCP annotations a tool carries (``MCPToolset`` puts them in ``metadata["annotations"]``), or ``None``."""
    metadata = tool_def.metadata if tool_def is not None else None
    return metadata.get("annotations") if isinstance(metadata, Mapping) else None


def tool_call(call: ToolCallPart, tool_def: ToolDefinition | None) -> ToolCall:
    """The ``ToolCall`` of one call the model made: the arguments it sent (a dict, or JSON text, maybe malformed:
    the core parses it), its call id, and the hints its tool's MCP annotations set."""
    arguments = call.args if call.args is not None else {}
    return kit_tool_call(call.tool_name, arguments, call_id=call.tool_call_id, annotations=annotations_of(tool_def))


def model_view(result: Any) -> Any:
    """What the model reads of a tool's return: a plain value as it is; a ``ToolReturn``'s ``return_value``, with
    its ``content`` (a ``TextContent`` by its text) and ``tools`` when set, never its ``metadata``."""
    if not isinstance(result, ToolReturn):
        return result
    returned: ToolReturn[Any] = result
    content = returned.content
    if not content and not returned.tools:
        return returned.return_value
    view: dict[str, Any] = {"return_value": returned.return_value}
    if content:
        view["content"] = (
            content if isinstance(content, str) else [i.content if isinstance(i, TextContent) else i for i in content]
        )
    if returned.tools:
        view["tools"] = list(returned.tools)
    return view


def failure_view(error: BaseException) -> Any:
    """What the model reads for a call that raised ``error`` (the text a rebuilt turn reads back from the history)."""
    if isinstance(error, ValidationError):
        return error.errors(include_url=False, include_context=False)
    if isinstance(error, ToolRetryError):
        return error.tool_retry.content
    if isinstance(error, ToolFailedError):
        return error.tool_failed.model_response_str(wrap_if_error=False)
    if isinstance(error, (ModelRetry, ToolFailed)):
        return error.message
    return error_text(error)


def registered(toolset: toolsets.AbstractToolset[Any]) -> set[str]:
    """The names the model calls ``toolset``'s function and external tools by, ones a ``prepare`` hides included;
    a toolset listing its tools only when asked (an MCP server) adds none: the request offers them."""
    if isinstance(toolset, toolsets.CombinedToolset):
        return set().union(*(registered(child) for child in toolset.toolsets))
    if isinstance(toolset, toolsets.PrefixedToolset):
        return {f"{toolset.prefix}_{name}" for name in registered(toolset.wrapped)}
    if isinstance(toolset, toolsets.RenamedToolset):
        new_names = {original: new for new, original in toolset.name_map.items()}
        return {new_names.get(name, name) for name in registered(toolset.wrapped)}
    if isinstance(toolset, toolsets.WrapperToolset):  # prepared, filtered, approval-required, ...: the same names
        return registered(toolset.wrapped)
    if isinstance(toolset, toolsets.FunctionToolset):
        return set(toolset.tools)
    if isinstance(toolset, toolsets.ExternalToolset):
        return {tool.name for tool in toolset.tool_defs}
    return set()


def decided_calls(response: ModelResponse, tools: Tools) -> list[ToolCall]:
    """The calls of ``response`` the guard decides (of tools the agent runs: ``DECIDED_KINDS``)."""
    return [
        tool_call(part, tool)
        for part in response.tool_calls
        if (tool := tools(part.tool_name)) and tool.kind in DECIDED_KINDS
    ]


def denied(messages: Sequence[ModelMessage], tools: Tools) -> list[ToolCall]:
    """The calls a person denied (``ToolDenied``), in the history's last request: they never ran."""
    parts = getattr(messages[-1], "parts", ()) if messages else ()
    ids = {p.tool_call_id for p in parts if isinstance(p, ToolReturnPart) and p.outcome == "denied"}
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None) if ids else None
    if response is None:
        return []
    return [tool_call(part, tools(part.tool_name)) for part in response.tool_calls if part.tool_call_id in ids]


def asked(messages: Sequence[ModelMessage], call: ToolCallPart, tool: ToolDefinition | None) -> ToolCall | None:
    """``call`` as the model asked for it in the history's last response (a person may have edited it since)."""
    response = next((message for message in reversed(messages) if isinstance(message, ModelResponse)), None)
    found = [part for part in response.tool_calls if part.tool_call_id == call.tool_call_id] if response else []
    return tool_call(found[0], tool) if found else None
