"""Translating LangChain's messages to the guard's words: tool calls, their outcomes, model usage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langchain_core.tools import BaseTool

from repeat_hooks import ToolCall


def guard_call(call: LangChainToolCall, read_only: Mapping[str, bool] | None = None) -> ToolCall:
    """The guard's ``ToolCall`` for one tool call (arguments as the model sent them).

    ``read_only``: the hints of the tools offered (``read_only_hints``). No ``call_id``: each call is
    decided once, in the model node that received it, and that decision is committed with the response
    in one checkpoint, so no call is ever seen twice.
    """
    name = call["name"]
    return ToolCall(name, call.get("args"), read_only=None if read_only is None else read_only.get(name))


def read_only_hints(tools: Sequence[object]) -> dict[str, bool]:
    """The tools that say whether they change anything: MCP's ``readOnlyHint``, which
    ``langchain-mcp-adapters`` puts in ``BaseTool.metadata`` (any tool may set it there)."""
    hints: dict[str, bool] = {}
    for tool in tools:
        if isinstance(tool, BaseTool) and isinstance(tool.metadata, Mapping):
            hint = tool.metadata.get("readOnlyHint")
            if isinstance(hint, bool):
                hints[tool.name] = hint
    return hints


def last_batch(messages: Sequence[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The last ``AIMessage`` with tool calls, if only ``ToolMessage``\\ s follow it, and those messages.

    ``(None, [])`` when the conversation does not end in a batch of tool calls and their results
    (a user message came last, or the model answered in text).
    """
    answers: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answers.append(message)
            continue
        if isinstance(message, AIMessage) and message.tool_calls:
            answers.reverse()
            return message, answers
        break
    return None, []


def failed(message: ToolMessage) -> bool:
    """The tool call failed: LangChain marks errors (raised and handled, bad arguments) ``status="error"``."""
    return message.status == "error"


def result_of(message: ToolMessage) -> Any:
    """What the tool returned, as the model reads it: the message's content."""
    return message.content


def model_messages(result: Sequence[BaseMessage]) -> list[AIMessage]:
    """The ``AIMessage``\\ s among a model call's result messages."""
    return [message for message in result if isinstance(message, AIMessage)]
