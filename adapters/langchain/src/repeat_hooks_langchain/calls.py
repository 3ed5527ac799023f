"""Translating LangChain's messages to the guard's words: tool calls, their outcomes, model usage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall

from repeat_hooks import ToolCall


def delivery_id(message: AIMessage, tool_call_id: str | None) -> str | None:
    """The id the guard decides one tool call under: the ``AIMessage`` id and the call id.

    Unique within a thread even for providers that reuse call ids (``call_0`` in every response),
    and the same when the same message is seen again, so a call is never counted twice.
    """
    if not tool_call_id:
        return None
    return f"{message.id}/{tool_call_id}" if message.id else tool_call_id


def guard_call(message: AIMessage, call: LangChainToolCall) -> ToolCall:
    """The guard's ``ToolCall`` for one tool call of ``message`` (arguments as the model sent them)."""
    return ToolCall(call["name"], call.get("args"), call_id=delivery_id(message, call.get("id")))


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


def message_calling(messages: Sequence[AnyMessage], tool_call_id: str | None) -> AIMessage | None:
    """The latest ``AIMessage`` that asked for the tool call ``tool_call_id``, else ``None``."""
    if not tool_call_id:
        return None
    for message in reversed(messages):
        if isinstance(message, AIMessage) and any(call.get("id") == tool_call_id for call in message.tool_calls):
            return message
    return None


def failed(message: ToolMessage) -> bool:
    """The tool call failed: LangChain marks errors (raised and handled, bad arguments) ``status="error"``."""
    return message.status == "error"


def result_of(message: ToolMessage) -> Any:
    """What the tool returned, as the model reads it: the message's content."""
    return message.content


def model_messages(result: Sequence[BaseMessage]) -> list[AIMessage]:
    """The ``AIMessage``\\ s among a model call's result messages."""
    return [message for message in result if isinstance(message, AIMessage)]
