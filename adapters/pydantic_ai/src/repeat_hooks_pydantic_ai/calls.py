"""Translating pydantic-ai's tool calls and their outcomes into the core's terms.

- A ``ToolCallPart`` (with its ``ToolDefinition``) becomes a ``ToolCall``: the arguments the model sent,
  its call id, and the MCP hints its toolset carries (``tool_call``).
- A tool's return value becomes what the model reads of it (``model_view``); a failure, the text the
  model reads instead (``failure_view``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_ai.exceptions import ModelRetry, ToolFailed, ToolFailedError, ToolRetryError
from pydantic_ai.messages import TextContent, ToolCallPart, ToolReturn
from pydantic_ai.tools import ToolDefinition

from repeat_hooks import ToolCall
from repeat_hooks.result import error_text

FailureCheck = Callable[[Any], bool]
"""Says whether a tool's return value means the call failed (``True``) or succeeded."""

_HINTS = {"read_only": "readOnlyHint", "destructive": "destructiveHint", "idempotent": "idempotentHint"}
"""``ToolCall`` hint -> the MCP annotation that gives it."""


def tool_hints(tool_def: ToolDefinition | None) -> dict[str, bool]:
    """The MCP hints a tool's annotations set explicitly, as ``ToolCall`` keywords (``read_only``,
    ``destructive``, ``idempotent``); a hint the server left unset is left out (MCP's defaults say nothing).

    pydantic-ai's ``MCPToolset`` copies each MCP tool's annotations into its ``ToolDefinition`` metadata
    under their wire spelling, unset ones as ``None`` (``pydantic_ai/mcp.py:1529-1533``); tools of other
    toolsets carry none, unless their ``metadata`` holds ``{"annotations": {"readOnlyHint": True}}`` too.
    """
    metadata = tool_def.metadata if tool_def is not None else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return {}
    return {hint: value for hint, name in _HINTS.items() if isinstance(value := annotations.get(name), bool)}


def read_only_hint(tool_def: ToolDefinition) -> bool | None:
    """The tool's explicit MCP ``readOnlyHint``, or ``None`` when it has none (see ``tool_hints``)."""
    return tool_hints(tool_def).get("read_only")


def tool_call(call: ToolCallPart, tool_def: ToolDefinition | None) -> ToolCall:
    """The core's ``ToolCall`` for one call the model made.

    The arguments are the ones the model sent (a dict, or JSON text, maybe malformed: the core parses
    it), so that a call has one key from the moment the response arrives, before pydantic-ai validates
    it. The call id is the model's (the core scopes it by turn and response, and treats ``""`` as none).
    """
    arguments = call.args if call.args is not None else {}
    return ToolCall(call.tool_name, arguments, call_id=call.tool_call_id, **tool_hints(tool_def))


def model_view(result: Any) -> Any:
    """What the model reads of a tool's return value: the value to digest as the call's result.

    pydantic-ai 2.68 turns a tool's return into the model's message in
    ``pydantic_ai/_tool_execution.py:140-191`` (``build_tool_return_part``): a ``ToolReturn`` gives the
    ``ToolReturnPart`` its ``return_value`` (:188), its ``content`` goes to the model as a separate
    ``UserPromptPart`` (:931-932), its ``tools`` become a ``ToolAvailabilityDeltaPart`` (:891-907), and
    its ``metadata`` stays in the message history only (``messages.py:1505``: "not sent to the LLM").
    Any other value is the ``ToolReturnPart``'s content as it is, and reaches the model as its JSON text
    (``messages.py:1728-1740``, ``model_response_str`` :2565).

    So: a plain value is returned unchanged (a dict holding a ``datetime`` stays a Python value: the
    core converts it to its JSON form); a ``ToolReturn`` without ``content`` nor ``tools`` is its
    ``return_value`` (the same digest as returning the value plainly); one with either is a dict of
    the fields the model reads, never ``metadata``. ``TextContent`` items of ``content`` count by
    their text, as their ``metadata`` is not sent in a user prompt (``messages.py:636-644``).
    MCP tools through ``MCPToolset`` already return the mapped content / structured content
    without the result's ``_meta`` (``pydantic_ai/mcp.py:2185-2200``); MCP App tools wrap it in a
    ``ToolReturn`` whose ``metadata`` holds the raw result, ``_meta`` included (``mcp.py:1747-1753``),
    dropped here.
    """
    if not isinstance(result, ToolReturn):
        return result
    returned: ToolReturn[Any] = result
    content = returned.content
    if not content and not returned.tools:
        return returned.return_value
    view: dict[str, Any] = {"return_value": returned.return_value}
    if content:
        view["content"] = content if isinstance(content, str) else [_user_text(item) for item in content]
    if returned.tools:
        view["tools"] = list(returned.tools)
    return view


def _user_text(item: Any) -> Any:
    """A user-prompt item as the model reads it: a ``TextContent`` by its text (its metadata is not sent)."""
    return item.content if isinstance(item, TextContent) else item


def failure_view(error: BaseException) -> Any:
    """What the model reads for a call that raised ``error`` (pydantic-ai sends it as a retry or a failed
    return): a ``ModelRetry`` / ``ToolFailed`` message, the content of a retried or failed
    ``ToolReturnPart`` pydantic-ai already built, a validation error's details as the retried return holds
    them, else ``"Type: message"`` (``repeat_hooks.error_text``). The same text a rebuilt turn reads back
    from the history (``state.rebuild``), so a resumed turn digests a failure as the live run did."""
    if isinstance(error, ValidationError):  # as pydantic-ai words the retry (``_output.py:168-170``)
        return error.errors(include_url=False, include_context=False)
    if isinstance(error, ToolRetryError):
        return error.tool_retry.content
    if isinstance(error, ToolFailedError):
        return error.tool_failed.model_response_str(wrap_if_error=False)
    if isinstance(error, (ModelRetry, ToolFailed)):
        return error.message
    return error_text(error)
