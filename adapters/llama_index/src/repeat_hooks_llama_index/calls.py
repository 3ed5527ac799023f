"""LlamaIndex's tool calls and results as the guard reads them: a ``ToolSelection`` (or a tool's keyword arguments)
as a ``ToolCall``, what the model reads of a ``ToolOutput``, whether it succeeded, and a response's usage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.agent.workflow.multi_agent_workflow import handoff
from llama_index.core.tools import AsyncBaseTool, FunctionTool, ToolOutput

from repeat_hooks import Policy, ToolCall, kit

FEEDS = (*kit.FEEDS, kit.Feed.WARNINGS)
"""What the guard feeds the policy: each call's outcome, each model call; and it hands the model the guard's notes."""
HANDOFF = "handoff"
"""The tool ``AgentWorkflow`` adds to each agent (multi_agent_workflow.py:73,245): never wrapped, never counted."""


def is_handoff(tool: AsyncBaseTool) -> bool:
    """Whether ``tool`` is the workflow's own handoff tool (its ``handoff`` function), not a tool of that name."""
    return isinstance(tool, FunctionTool) and tool.metadata.name == HANDOFF and tool.real_fn is handoff


def tool_call(name: str, arguments: Mapping[str, Any] | None, call_id: str | None = None) -> ToolCall:
    """The ``ToolCall`` of one call (``call_id`` ``None``/``""``: none). ``ToolMetadata`` has no MCP annotations
    (``McpToolSpec`` drops them, tools/mcp/base.py:163): the policy's ``read_only`` / ``destructive`` decide."""
    return kit.tool_call(name, dict(arguments or {}), call_id=call_id or None)


def batch_key(name: str, arguments: Any, policy: Policy) -> str:
    """The call's key as the policy counts it (``Policy.key_of``, keyed with its ``digest_key``): the batch in the saved
    ``Context`` cannot be tested for guesses of an argument without it."""
    return policy.key_of(ToolCall(name, arguments))


def model_view(output: ToolOutput) -> str:
    """What the model reads of a tool's result: ``ToolOutput.content`` (its text blocks), never its raw output."""
    return output.content


def succeeded(output: ToolOutput) -> bool:
    """Whether a ``ToolOutput`` reports success: not ``is_error`` (an exception, base_agent.py:375-388, or a tool
    not found, :647-655), nor an MCP ``isError`` raw output (``McpToolSpec`` hands back the ``CallToolResult``)."""
    return not output.is_error and getattr(output.raw_output, "isError", None) is not True


def usage_of(raw: Any) -> Any:
    """The token usage in a response's ``AgentOutput.raw`` (a dict or the provider's object); ``None``: none."""
    if isinstance(raw, Mapping):
        return raw.get("usage") or raw.get("usage_metadata")
    return getattr(raw, "usage", None)
