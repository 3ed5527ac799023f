"""LlamaIndex's tool calls and results as the guard reads them: a ``ToolSelection`` (or a tool's keyword arguments)
as a ``ToolCall``, what the model reads of a ``ToolOutput``, whether it succeeded, and a response's usage."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from llama_index.core.tools import ToolOutput

from repeat_hooks import ToolCall, kit

FEEDS = (*kit.FEEDS, kit.Feed.WARNINGS)
"""What the guard feeds the policy: each call's outcome, each model call; and it hands the model the guard's notes."""
HANDOFF = "handoff"
"""The tool ``AgentWorkflow`` adds to each agent (multi_agent_workflow.py:73,245): never wrapped, never counted."""


def tool_call(name: str, arguments: Mapping[str, Any] | None, call_id: str | None = None) -> ToolCall:
    """The ``ToolCall`` of one call: its tool's name, keyword arguments and id (``None``/``""``: none). LlamaIndex's
    ``ToolMetadata`` carries no MCP annotations (``McpToolSpec`` drops them, tools/mcp/base.py:163), so the effect
    hints come from the policy's ``read_only`` / ``destructive`` settings."""
    return kit.tool_call(name, dict(arguments or {}), call_id=call_id or None)


def arguments_key(arguments: Mapping[str, Any] | None) -> str:
    """A digest of the arguments, to find a call of the batch again from its tool's keyword arguments (the run's
    ``Context`` is saved with the conversation: it holds no argument value)."""
    text = json.dumps(dict(arguments or {}), sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def model_view(output: ToolOutput) -> str:
    """What the model reads of a tool's result: ``ToolOutput.content`` (its text blocks), never its raw output."""
    return output.content


def succeeded(output: ToolOutput) -> bool:
    """Whether a ``ToolOutput`` reports success: not ``is_error`` (an exception, base_agent.py:375-388, or a tool
    not found, :647-655), and no MCP ``isError`` in its raw output (``McpToolSpec`` hands the ``CallToolResult``
    back as a value, which LlamaIndex does not read)."""
    return not output.is_error and getattr(output.raw_output, "isError", None) is not True


def usage_of(raw: Any) -> Any:
    """The token usage of a model response's raw payload (``AgentOutput.raw``: the provider's response as a dict,
    or its object), for ``cost=``; ``None`` when it reports none."""
    if isinstance(raw, Mapping):
        return raw.get("usage") or raw.get("usage_metadata")
    return getattr(raw, "usage", None)
