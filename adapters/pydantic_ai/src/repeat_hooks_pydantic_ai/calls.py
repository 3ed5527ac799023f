"""pydantic-ai's calls and results in the core's terms: a ``ToolCallPart`` as a ``ToolCall`` with its MCP hints,
a tool's return (or failure) as the model reads it, the names of the tools an agent registered, the calls
pydantic-ai answered before any tool hook saw them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_ai import toolsets
from pydantic_ai.exceptions import ModelRetry, ToolFailed, ToolFailedError, ToolRetryError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextContent,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from repeat_hooks import ToolCall
from repeat_hooks.kit import FEEDS as KIT_FEEDS
from repeat_hooks.kit import Feed
from repeat_hooks.kit import tool_call as kit_tool_call
from repeat_hooks.result import error_text

FEEDS = (*KIT_FEEDS, Feed.WARNINGS)
"""What the guard feeds the core: each call's outcome, each model call, and the model the guard's notes (a
return in the request being sent, rewritten by ``before_model_request``: ``state.noted_part``)."""

DECIDED_KINDS = frozenset({"function", "unapproved"})
"""The tool kinds whose calls the guard decides: ones the agent runs, with or without a person's approval (and
calls of a tool the agent lacks: ``decided_calls``)."""
REJECTED_UNSEEN = frozenset({"unknown_tool", "unavailable_tool"})
"""The ``RetryInfo.cause`` of a retried return pydantic-ai writes for a call it rejects while resolving the tool
(``ToolManager._resolve_tool``), before any tool hook runs: a name the agent lacks, a tool not revealed yet."""
Tools = Callable[[str], "ToolDefinition | None"]
"""A tool's definition by the name the model calls it, ``None`` for a name the agent has no tool by."""


def tools_of(parameters: ModelRequestParameters) -> dict[str, ToolDefinition]:
    """The tools a model request offers, function and output ones, by name: the step's ``ToolManager.tool_defs``
    (``_agent_graph._prepare_request_parameters`` splits them), so a name not here is one pydantic-ai answers with
    its unknown-tool retry."""
    return {tool.name: tool for tool in (*parameters.function_tools, *parameters.output_tools)}


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
    """The calls of ``response`` the guard decides: of tools the agent runs (``DECIDED_KINDS``), and of names it has
    no tool by (``tools`` gives ``None``), which pydantic-ai answers with an unknown-tool retry, a failed call."""
    return [
        tool_call(part, tool)
        for part in response.tool_calls
        if (tool := tools(part.tool_name)) is None or tool.kind in DECIDED_KINDS
    ]


def rejected_unseen(messages: Sequence[ModelMessage]) -> list[tuple[ToolReturnPart, ToolCallPart | None]]:
    """The returns of the history's last request that pydantic-ai wrote for calls no tool hook saw (a retried
    return whose cause is in ``REJECTED_UNSEEN``), each with the call it answers in the last response, if found."""
    request = messages[-1] if messages else None
    if not isinstance(request, ModelRequest):
        return []
    found = [
        part
        for part in request.parts
        if isinstance(part, ToolReturnPart)
        and part.outcome == "retried"
        and part.retry is not None
        and part.retry.cause in REJECTED_UNSEEN
    ]
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None) if found else None
    calls = response.tool_calls if response is not None else []

    def asked_by(part: ToolReturnPart) -> ToolCallPart | None:
        same = (c for c in calls if c.tool_name == part.tool_name and c.tool_call_id == part.tool_call_id)
        return next(same, None)

    return [(part, asked_by(part)) for part in found]


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
