"""What the SDK hands a hook, turned into what the core counts: a tool call, its outcome, its cost."""

from __future__ import annotations

from typing import Any

from mistralai.vibe.harness.core.protocol import (
    HookToolCall,
    ProvidedToolCall,
    RuntimeBuiltinToolCall,
    TokenUsage,
    ToolFailureResult,
    ToolSuccessResult,
)

from repeat_hooks import ToolCall

USER_TOOL_GROUP = "client"
"""The group rc11 gives the tools passed to ``agents.Harness(tools=...)``: they keep their bare name."""


def tool_name(call: ProvidedToolCall | RuntimeBuiltinToolCall) -> str:
    """The name the policy knows a tool by: ``track_parcel`` for your own tools, ``group.tool`` for others
    (an MCP server's, a connector's), the builtin's name (``file_system.bash``) for the runtime's."""
    if isinstance(call, ProvidedToolCall):
        return call.tool_name if call.group_name == USER_TOOL_GROUP else f"{call.group_name}.{call.tool_name}"
    return str(call.name)


def tool_call(hook_tool_call: HookToolCall, delivery_id: str | None) -> ToolCall:
    """The core's ``ToolCall`` for an SDK ``HookToolCall``, with ``delivery_id`` as its delivery id."""
    call = hook_tool_call.call
    return ToolCall(name=tool_name(call), arguments=call.arguments, call_id=delivery_id)


def succeeded(tool_result: ToolSuccessResult | ToolFailureResult) -> bool:
    """Whether a tool ran without error: rc11 reports a raised exception as a ``ToolFailureResult``."""
    return not isinstance(tool_result, ToolFailureResult)


def tool_result(result: ToolSuccessResult | ToolFailureResult) -> Any:
    """What a tool returned, for the core to digest (never stored raw): its structured content if it has
    any, else its content blocks; for a failure, the error's code and message."""
    if isinstance(result, ToolFailureResult):
        return f"{result.error.code}: {result.error.message}"
    if result.structured_content is not None:
        return result.structured_content
    return [block.model_dump(mode="json") for block in result.content]


def cost_usd(
    usage: TokenUsage | None, usd_per_million_input_tokens: float, usd_per_million_output_tokens: float
) -> float:
    """The price of one model call from the token usage the SDK recorded (no usage: it costs nothing)."""
    if usage is None:
        return 0.0
    spent = usage.input_tokens * usd_per_million_input_tokens + usage.output_tokens * usd_per_million_output_tokens
    return spent / 1_000_000
