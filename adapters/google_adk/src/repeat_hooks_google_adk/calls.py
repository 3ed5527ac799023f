"""What ADK hands the plugin, turned into what the core counts: tool calls with their hints, and what the
model reads of a tool's result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.transfer_to_agent_tool import TransferToAgentTool
from google.genai import types

from repeat_hooks import ToolCall


def _annotation(tool: BaseTool | None, name: str) -> bool | None:
    """An MCP tool's explicit annotation ``name`` (``True``/``False``), else ``None``: ADK's ``McpTool`` keeps
    the MCP tool definition in ``raw_mcp_tool``, and an annotation the server did not set is ``None`` there
    (MCP's defaults for an unannotated tool say nothing)."""
    annotations = getattr(getattr(tool, "raw_mcp_tool", None), "annotations", None)
    hint = getattr(annotations, name, None)
    return hint if isinstance(hint, bool) else None


def read_only_hint(tool: BaseTool | None) -> bool | None:
    """What the tool says of itself: an MCP tool's ``annotations.readOnlyHint`` (``True``/``False``);
    ``True`` for ADK's ``transfer_to_agent`` (it hands the turn to another agent and changes no data, so
    it must not restart the counts of the calls around it); else ``None`` (unknown: the policy's
    ``read_only`` setting decides). Other tools carry no hint.
    """
    if isinstance(tool, TransferToAgentTool):
        return True
    return _annotation(tool, "readOnlyHint")


def tool_call(
    tool: BaseTool | None, arguments: Mapping[str, Any] | None, call_id: str | None, *, name: str | None = None
) -> ToolCall:
    """The core's ``ToolCall`` for one call ADK is about to run, with the tool's effect hints: read-only
    (``read_only_hint``), and an MCP tool's explicit ``destructiveHint`` and ``idempotentHint``.

    ``tool`` is ``None`` for a name the agent has no tool for (``name`` then names the call).
    """
    return ToolCall(
        tool.name if tool is not None else str(name),
        dict(arguments or {}),
        call_id=call_id,
        read_only=read_only_hint(tool),
        destructive=_annotation(tool, "destructiveHint"),
        idempotent=_annotation(tool, "idempotentHint"),
    )


def is_mcp_tool(tool: BaseTool | None) -> bool:
    """Whether ``tool`` wraps an MCP server's tool (ADK's ``McpTool`` keeps its definition in ``raw_mcp_tool``)."""
    return getattr(tool, "raw_mcp_tool", None) is not None


def function_response(result: Any) -> dict[str, Any]:
    """The function response ADK builds from what a tool returned: the ``response`` dict of the
    ``FunctionResponse`` the model is handed.

    ADK 2.13 unwraps a returned ``types.FunctionResponse`` to its ``response`` and wraps anything that is
    not a dict as ``{"result": value}`` (``google/adk/flows/llm_flows/tools/_caller.py:63-67`` and
    ``:282-297``); the after-tool callbacks get the value unchanged (``_caller.py:70-77``, ``:599``).
    Media parts (``types.Part`` with inline or file data, which ADK moves into the response's ``parts``,
    ``_caller.py:223-265``) are left where they are: the same bytes either way.
    """
    if isinstance(result, types.FunctionResponse):
        result = result.response
    if isinstance(result, dict):
        return result
    return {"result": result}


def model_view(result: Any, tool: BaseTool | None = None) -> Any:
    """What the model reads of one tool run: the function response dict (``function_response``), the
    value the guard digests to tell a new result from the same one again.

    For an MCP tool, ADK's ``McpTool`` hands the model the whole ``CallToolResult`` dumped to a dict
    (``google/adk/tools/mcp_tool/mcp_tool.py:150-175`` and ``:741``): ``content``, ``structuredContent``,
    ``isError`` and the server's ``meta`` (``_meta`` on the wire). ``meta`` is protocol metadata (request
    and trace ids, fresh on every call), not the tool's answer: it is left out, at the top and in each
    content block, so a server that answers the same text with a new request id is seen answering the
    same. Values stay Python values (a ``datetime`` stays a ``datetime``): the core turns them into JSON.
    """
    response = function_response(result)
    if not is_mcp_tool(tool):
        return response
    view = {key: value for key, value in response.items() if key not in _MCP_META}
    content = view.get("content")
    if isinstance(content, list):
        view["content"] = [
            {key: value for key, value in block.items() if key not in _MCP_META} if isinstance(block, dict) else block
            for block in content
        ]
    return view


def mcp_is_error(result: Any, tool: BaseTool | None) -> bool:
    """Whether an MCP tool's result says it failed (``isError: true``, which the model reads as well)."""
    return is_mcp_tool(tool) and function_response(result).get("isError") is True


_MCP_META = frozenset({"meta", "_meta"})
