"""What ADK hands the plugin, as the core counts it: a call with its tool's hints, what the model reads of a
tool's result, whether the call failed, and the guard's answer to a refused call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.transfer_to_agent_tool import TransferToAgentTool
from google.genai import types

from repeat_hooks import Refusal, ToolCall, kit

REFLECT_AND_RETRY = "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
"""The ``response_type`` of ``ReflectAndRetryToolPlugin``'s answer to a failed call: a failure."""
_MCP_META = frozenset({"meta", "_meta"})
FEEDS = (*kit.FEEDS, kit.Feed.ANSWERS, kit.Feed.WARNINGS)
"""What the plugin feeds the guard: every call's outcome, every model call, its text answers; and it hands the
model the guard's notes (``NOTE_KEY``)."""
NOTE_KEY = "repeat_hooks_note"
"""The key of a function response under which the model reads the guard's note (``Policy(warn=True)``); what the
guard records is the response without it."""


def mcp_annotations(tool: BaseTool | None) -> object:
    """An MCP tool's annotations (ADK's ``McpTool`` keeps its MCP definition in ``raw_mcp_tool``), else ``None``."""
    return getattr(getattr(tool, "raw_mcp_tool", None), "annotations", None)


def tool_call(
    tool: BaseTool | None, arguments: Mapping[str, Any] | None, call_id: str | None, *, name: str | None = None
) -> ToolCall:
    """The ``ToolCall`` of one call ADK is about to run, with its MCP tool's explicit hints; ``transfer_to_agent``
    is read-only (it changes no data). ``tool`` is ``None`` for a name the agent has no tool for (``name``)."""
    read_only = True if isinstance(tool, TransferToAgentTool) else None
    name = tool.name if tool is not None else str(name)
    return kit.tool_call(
        name, dict(arguments or {}), call_id=call_id, annotations=mcp_annotations(tool), read_only=read_only
    )


def function_response(result: Any) -> dict[str, Any]:
    """The ``response`` dict of the ``FunctionResponse`` ADK builds from what a tool returned."""
    if isinstance(result, types.FunctionResponse):
        result = result.response
    return result if isinstance(result, dict) else {"result": result}


def model_view(result: Any, tool: BaseTool | None = None) -> Any:
    """What the model reads of one tool run: the function response dict; for an MCP tool, without the server's
    ``meta`` (request and trace ids, fresh on every call), at the top and in each content block."""
    response = function_response(result)
    if getattr(tool, "raw_mcp_tool", None) is None:
        return response
    view = {key: value for key, value in response.items() if key not in _MCP_META}
    content = view.get("content")
    if isinstance(content, list):
        view["content"] = [
            {key: value for key, value in block.items() if key not in _MCP_META} if isinstance(block, dict) else block
            for block in content
        ]
    return view


def failed(result: Any, tool: BaseTool | None) -> bool:
    """Whether a result that came back reports a failure: an MCP ``isError: true`` (the model reads it too), or
    ``ReflectAndRetryToolPlugin``'s answer to a failed call."""
    if isinstance(result, dict) and result.get("response_type") == REFLECT_AND_RETRY:
        return True
    return getattr(tool, "raw_mcp_tool", None) is not None and function_response(result).get("isError") is True


class Refused(dict[str, Any]):
    """The guard's answer to a refused call, ``{"error": <refusal text>}`` (what the model reads), with the
    ``Refusal`` attached for your own callbacks (``refusal_of``)."""

    refusal: Refusal

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(error=refusal.message)
        self.refusal = refusal


def refusal_of(tool_response: Any) -> Refusal | None:
    """The guard's ``Refusal`` if ``tool_response`` (what an ``after_tool_callback`` receives) is its answer to a
    refused call, else ``None`` (the tool ran, or another callback answered)."""
    return tool_response.refusal if isinstance(tool_response, Refused) else None


def answer_of(response: LlmResponse) -> str | None:
    """A model response's text answer (its text parts, thoughts left out), for ``max_same_answers``; ``None`` when it
    calls a function (something happens) or holds no content."""
    content = response.content
    if content is None or content.parts is None:
        return None
    parts = content.parts
    if any(part.function_call is not None for part in parts):
        return None
    return "".join(part.text for part in parts if part.text and not part.thought)
