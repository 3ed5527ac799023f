"""The SDK's calls and results as the guard sees them: a response's function calls as ``ToolCall`` (with an MCP
server's hints), a result as the model reads it, and whether it failed (SDK facts: the README's "How it maps")."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from typing import Any

import pydantic
from agents import Agent, Handoff, ItemHelpers, ModelResponse, default_tool_error_function
from agents._tool_invocation import tool_invocation_identity
from openai.types.responses import ResponseFunctionToolCall
from pydantic_core import PydanticSerializationError

from repeat_hooks import ToolCall
from repeat_hooks.kit import tool_call

SDK_ERROR_TEXT: str = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
"""What the SDK hands the model when a tool raised (``tool.py`` ``default_tool_error_function``)."""
_TIMEOUT_TEXT = re.compile(r"Tool '.*' timed out after \S+ seconds\.", re.DOTALL)


def model_view(output: Any, output_type: pydantic.TypeAdapter[Any] | None = None) -> Any:
    """One tool result as the model reads it: a ``str`` or a plain value as it is (the core turns it into JSON),
    the SDK's structured outputs as their Responses items, and a tool's ``output_type`` value as its aliased JSON
    dump (a value it rejects, which fails the run anyway, as it is)."""
    if isinstance(output, str):
        return output
    if output_type is not None:
        try:
            return output_type.dump_python(output_type.validate_python(output), mode="json", by_alias=True)
        except (pydantic.ValidationError, PydanticSerializationError):
            return output
    structured = ItemHelpers._convert_tool_output_as_structured(output)  # items.py:954, the SDK's own conversion
    return [dict(item) for item in structured] if structured is not None else output


def is_sdk_error(output: Any) -> bool:
    """``True`` when ``output`` is the SDK's own text for a tool that raised or timed out (with the default
    ``failure_error_function``; tools that write their own error text need ``guard_agent(..., is_failure=...)``)."""
    return isinstance(output, str) and (output == SDK_ERROR_TEXT or _TIMEOUT_TEXT.fullmatch(output) is not None)


def annotations_of(servers: Iterable[Any], name: str) -> Any:
    """The MCP annotations of tool ``name`` in the last tool listing of the first of ``servers`` listing it."""
    for server in servers:
        listed = getattr(server, "_tools_list", None)  # the SDK's own list; cached_tools is a deep copy per read
        if not isinstance(listed, list):
            listed = getattr(server, "cached_tools", None)
        for tool in listed if isinstance(listed, list) else ():
            if getattr(tool, "name", None) == name:
                return getattr(tool, "annotations", None)
    return None


def batch_of(response: ModelResponse, agent: Agent[Any], invoked: dict[str, Any]) -> list[ToolCall]:
    """The function calls of one model response that the SDK will run or refuse, in the model's order: handoffs
    left out, and as the SDK leaves them out, a call repeated under its id in the response or in the run
    (``invoked``: call id -> its item, updated here); none for a response the SDK rejects before any tool runs
    (an empty id, one id for different calls). A local MCP server's tool carries the server's hints."""
    handoffs = {
        entry.tool_name if isinstance(entry, Handoff) else Handoff.default_tool_name(entry) for entry in agent.handoffs
    }
    in_response: dict[str, ResponseFunctionToolCall] = {}
    calls = []
    for item in response.output:
        if not isinstance(item, ResponseFunctionToolCall) or item.name in handoffs:
            continue
        if not item.call_id:
            return []  # the SDK raises ModelBehaviorError for this response
        earlier = in_response.get(item.call_id) or invoked.get(item.call_id)
        if earlier is not None:
            if _identity(earlier) != _identity(item):
                return []  # the SDK raises ModelBehaviorError for this response
            continue
        in_response[item.call_id] = item
        annotations = annotations_of(agent.mcp_servers, item.name)
        calls.append(tool_call(item.name, item.arguments, call_id=item.call_id, annotations=annotations))
    invoked.update(in_response)
    return calls


def _identity(item: Any) -> Hashable:
    """The SDK's own identity of an invocation (type, call id, fingerprint of the normalized arguments)."""
    identity = tool_invocation_identity(item)
    return identity if identity is not None else (item.call_id, item.name, item.arguments)
