"""Calls and results as the guard sees them: SDK call -> ``ToolCall`` with hints; result -> what the model reads.

**Calls.** A function tool's call becomes ``ToolCall(tool_name, tool_arguments, call_id=...)``; a local
MCP server's tool carries the server's explicit annotations (``McpHints``: ``readOnlyHint``,
``destructiveHint``, ``idempotentHint``; ``None`` when the server said nothing). A model response's
function calls (``ModelResponse.output``, handoffs left out) are decided as one batch (``batch_of``).

**Outcomes.** A call failed when its output is the SDK's own error text (``is_sdk_error``) or the
user's ``is_failure`` says so.

**Results.** What the model reads of a tool's result is the value the guard digests to tell progress
from none.

The guard refuses a repeat whose result is the same as last time and lets a new result restart the
count, so it must compare what the *model* received, not the SDK's wrapper around it. In
``openai-agents`` 0.24 a function tool's return value (``real_result``) becomes the model's
``function_call_output`` in ``ItemHelpers.tool_call_output_item`` (``agents/items.py:845-922``),
called from ``run_internal/tool_execution.py:2160``:

- a tool with an ``output_type`` (a ``TypeAdapter``): the value validated and dumped as JSON with
  aliases (``items.py:861-883``);
- a ``str``: sent as it is (``items.py:901-902``);
- ``ToolOutputText`` / ``ToolOutputImage`` / ``ToolOutputFileContent`` (models or ``{"type": ...}``
  dicts), or a list of them: the Responses ``input_text`` / ``input_image`` / ``input_file`` items
  (``items.py:954-1035``);
- anything else: ``str(value)`` (``items.py:947-951``).

A local MCP server's tool answers with a ``CallToolResult``; the SDK keeps only its text/image
content (or ``json.dumps(structuredContent)`` with ``use_structured_content=True``) and drops the
result's ``_meta`` before the output guardrails see it (``agents/mcp/util.py:790-821``), so a fresh
request id in ``_meta`` is not progress.

For "anything else" the guard is handed the Python value itself rather than its ``str()``: the core
converts it to JSON (datetimes, UUIDs, Decimals, Enums, dataclasses, pydantic models) and masks the
tokens that change on every call, which a Python repr such as ``datetime.datetime(2026, 12, 1, ...)``
would hide from it. It holds the same information the model reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import pydantic
from agents import Agent, Handoff, ItemHelpers, ModelResponse, default_tool_error_function
from agents._tool_invocation import tool_invocation_identity
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall
from pydantic_core import PydanticSerializationError

from repeat_hooks import ToolCall

FailureCheck = Callable[[Any], bool]
"""Says whether a tool's output means the call failed (``True``) or succeeded."""

SDK_ERROR_TEXT: str = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
"""What the SDK hands the model when a tool raised (``tool.py`` ``default_tool_error_function``)."""
_TIMEOUT_TEXT = re.compile(r"Tool '.*' timed out after \S+ seconds\.", re.DOTALL)


def model_view(output: Any, output_type: pydantic.TypeAdapter[Any] | None = None) -> Any:
    """The result of one tool call as the model reads it; fires in the output guardrail after each call.

    Returns ``output`` unchanged when it is a ``str``, or a plain Python value the SDK would send as
    ``str(output)``; the Responses items (a list of dicts) for the SDK's structured tool outputs; and
    the aliased JSON dump for a tool with an ``output_type`` (``output_type``: the tool's
    ``TypeAdapter``; a value it rejects, which fails the run anyway, is returned unchanged).
    """
    if isinstance(output, str):
        return output
    if output_type is not None:
        try:
            validated = output_type.validate_python(output)
            return output_type.dump_python(validated, mode="json", by_alias=True)
        except (pydantic.ValidationError, PydanticSerializationError):
            return output
    structured = ItemHelpers._convert_tool_output_as_structured(output)  # items.py:954, the SDK's own conversion
    if structured is not None:
        return [dict(item) for item in structured]
    return output


def output_type_of(tool: Any) -> pydantic.TypeAdapter[Any] | None:
    """The ``TypeAdapter`` a function tool's results are validated and dumped with, or ``None``."""
    adapter = getattr(tool, "_output_type_adapter", None)  # tool.py:543 (FunctionTool, output_type=...)
    return adapter if isinstance(adapter, pydantic.TypeAdapter) else None


def is_sdk_error(output: Any) -> bool:
    """``True`` when ``output`` is the SDK's own text for a tool that raised or timed out.

    The SDK catches an exception raised by a function tool (or by parsing its arguments) and hands
    the model the tool's ``failure_error_function`` text instead; with the default function that text
    is fixed, so this is how the adapter sees that a call failed. Tools with a custom
    ``failure_error_function``, or that return their own error text, need ``guard_agent(...,
    is_failure=...)``.
    """
    return isinstance(output, str) and (output == SDK_ERROR_TEXT or _TIMEOUT_TEXT.fullmatch(output) is not None)


def failed(output: Any, is_failure: FailureCheck | None) -> bool:
    """Whether a call whose tool returned ``output`` failed: the SDK's error text, or ``is_failure`` says so."""
    return is_sdk_error(output) or (is_failure is not None and bool(is_failure(output)))


Hints = tuple[bool | None, bool | None, bool | None]
"""A tool's explicit ``(readOnlyHint, destructiveHint, idempotentHint)``; ``None`` where it said nothing."""
NO_HINTS: Hints = (None, None, None)


class McpHints:
    """What a local MCP server says of its tools, by tool name: its explicit effect annotations.

    Read from the server's last tool listing (the SDK lists the tools before every run that uses the
    server, so the listing is there before any call). ``True``/``False`` only where the server set the
    annotation (MCP's defaults for an unannotated tool say nothing here); ``None`` otherwise, or when
    the tool is not found under that name (``include_server_in_tool_names`` renames tools): the
    policy's ``read_only`` / ``destructive`` settings then decide. These are the server's hints, not
    proof: a server that lies about them weakens the guard.
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self._listed: object = None
        self._hints: dict[str, Hints] = {}

    def of(self, tool_name: str) -> Hints | None:
        """The server's hints for ``tool_name``; ``None`` when the server does not list that tool."""
        # The SDK's own list (replaced on every refresh); its public ``cached_tools`` is a deep copy per read.
        listed = getattr(self.server, "_tools_list", None)
        if not isinstance(listed, list):
            listed = getattr(self.server, "cached_tools", None)
        if not isinstance(listed, list):
            return None
        if listed is not self._listed:
            self._hints = {
                tool.name: _hints_of(getattr(tool, "annotations", None))
                for tool in listed
                if isinstance(getattr(tool, "name", None), str)
            }
            self._listed = listed
        return self._hints.get(tool_name)


def _hints_of(annotations: Any) -> Hints:
    def explicit(name: str) -> bool | None:
        hint = getattr(annotations, name, None)
        return hint if isinstance(hint, bool) else None

    return explicit("readOnlyHint"), explicit("destructiveHint"), explicit("idempotentHint")


def tool_call(name: str, arguments: str, call_id: str | None, hints: Hints = NO_HINTS) -> ToolCall:
    """The guard's ``ToolCall`` for one call the model made, with the tool's explicit hints."""
    read_only, destructive, idempotent = hints
    return ToolCall(
        name, arguments, call_id=call_id, read_only=read_only, destructive=destructive, idempotent=idempotent
    )


def call_of(tool_context: ToolContext[Any], hints: McpHints | None, call_id: str | None) -> ToolCall:
    """The ``ToolCall`` a guardrail fires for, decided under ``call_id`` (the id its batch gave it)."""
    found = None if hints is None else hints.of(tool_context.tool_name)
    return tool_call(tool_context.tool_name, tool_context.tool_arguments, call_id, found or NO_HINTS)


def batch_of(
    response: ModelResponse, agent: Agent[Any], hints: Iterable[McpHints], invoked: dict[str, Any]
) -> list[ToolCall]:
    """The function calls of one model response that the SDK will run or refuse, in the model's order.

    Handoffs (function calls too) are left out; hosted, shell, computer and custom tool calls are other item
    types. A tool of a local MCP server carries that server's hints. Left out as the SDK leaves them out
    (``run_internal/tool_planning.py:340-500``, ``_dedupe_processed_response_invocations``): a call repeated
    in the response under the same id (run once), and one that ran earlier in this run under the same id
    (``invoked``: call id -> that call's item; its earlier output stands). Two calls under one id are the
    same when the SDK's own identity of them is (its fingerprint of the normalized arguments). A response
    the SDK rejects before any tool runs (an empty id, one id for different calls) gives no calls.
    """
    handoffs = {_handoff_name(entry) for entry in agent.handoffs}
    servers = list(hints)
    in_response: dict[str, ResponseFunctionToolCall] = {}
    calls = []
    for item in response.output:
        if not isinstance(item, ResponseFunctionToolCall) or item.name in handoffs:
            continue
        call_id = item.call_id
        if not call_id:
            return []  # the SDK raises ModelBehaviorError for this response
        earlier = in_response.get(call_id) or invoked.get(call_id)
        if earlier is not None:
            if _identity(earlier) != _identity(item):
                return []  # the SDK raises ModelBehaviorError for this response
            continue
        in_response[call_id] = item
        found = next((h for h in (server.of(item.name) for server in servers) if h is not None), NO_HINTS)
        calls.append(tool_call(item.name, item.arguments, call_id, found))
    invoked.update(in_response)
    return calls


def _identity(item: Any) -> Hashable:
    """The SDK's own identity of an invocation (type, call id, fingerprint of the normalized arguments)."""
    identity = tool_invocation_identity(item)
    return identity if identity is not None else (item.call_id, item.name, item.arguments)


def _handoff_name(entry: Agent[Any] | Handoff[Any, Any]) -> str:
    return entry.tool_name if isinstance(entry, Handoff) else Handoff.default_tool_name(entry)
