"""Agent Framework's calls and results as the guard reads them: a ``function_call`` ``Content`` as a ``ToolCall``,
what the model reads of a function's result, a response's text answer, and its usage in the kit's spelling."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agent_framework import ChatResponse, ChatResponseUpdate, Content, FunctionTool, Message

from repeat_hooks import ToolCall, kit

FEEDS = (*kit.FEEDS, kit.Feed.ANSWERS, kit.Feed.WARNINGS)
"""What the guard feeds the policy (outcomes, model calls and their text answers); it hands the model its notes."""


def arguments_of(arguments: Any) -> Any:
    """A call's arguments as plain data: a mapping as a dict, a pydantic model dumped, a JSON text parsed (the model's
    own text when it is no JSON)."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if callable(dump := getattr(arguments, "model_dump", None)):
        return dump(mode="json")
    try:
        return (json.loads(arguments) if arguments.strip() else {}) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def tool_call(name: str, arguments: Any, call_id: str | None, tool: object = None) -> ToolCall:
    """The ``ToolCall`` of one function call: its name, arguments and id, and the effect hints ``tool`` (the
    ``FunctionTool`` it names, if known) carries in its ``additional_properties``, in MCP's spelling (``{"readOnlyHint":
    True}``; ``MCPStdioTool``'s tools carry none, ``_mcp.py:3118``)."""
    properties = getattr(tool, "additional_properties", None)
    return kit.tool_call(name, arguments_of(arguments), call_id=call_id, annotations=properties)


def call_of(content: Content, tool: object = None) -> ToolCall:
    """The ``ToolCall`` of a ``function_call`` content (``tool``: the ``FunctionTool`` it names, if known)."""
    return tool_call(str(content.name), content.arguments, content.call_id, tool)


def function_calls(response: ChatResponse[Any]) -> list[Content]:
    """The calls of ``response`` the function loop may run: ``function_call`` contents, neither hosted nor only
    informational, with no ``function_result`` for their id in the response already (``_tools.py:4645``)."""
    contents = [item for message in response.messages for item in message.contents]
    answered = {item.call_id for item in contents if item.type == "function_result"}
    return [
        c
        for c in contents
        if c.type == "function_call" and not (c.informational_only or c.hosted or (c.call_id and c.call_id in answered))
    ]


def model_view(result: Any) -> Any:
    """What the model reads of a function's result as the function middleware sees it: the text of its text items
    (``Content.from_function_result`` keeps that as ``result``, ``_types.py:1176``), else the items as data."""
    if isinstance(result, str):
        return result
    if isinstance(result, Sequence) and all(isinstance(item, Content) for item in result):
        texts = [item.text for item in result if item.type == "text" and item.text is not None]
        if len(texts) == len(result):
            return "".join(texts)
        return [item.to_dict() for item in result]
    return result


def result_view(content: Content) -> str:
    """What the model reads of a ``function_result`` in the conversation: its text (or its items, as JSON)."""
    if isinstance(content.result, str) and content.result:
        return content.result
    if content.items:
        return json.dumps([item.to_dict() for item in content.items], sort_keys=True, default=str)
    return "" if content.result is None else str(content.result)


def answer_of(response: ChatResponse[Any]) -> str | None:
    """The response's text answer, for ``max_same_answers``; ``None`` when it calls a function (something happens)."""
    if function_calls(response):
        return None
    return "".join(message.text for message in response.messages if message.role == "assistant")


def usage(response: ChatResponse[Any]) -> dict[str, int]:
    """The response's ``usage_details`` (``input_token_count``, ...) in the kit's spelling (``usage_tokens``)."""
    details: Mapping[str, Any] = response.usage_details or {}
    pairs = (("input_tokens", "input"), ("output_tokens", "output"), ("cache_read_tokens", "cache_read_input"))
    return {ours: int(details.get(f"{theirs}_token_count") or 0) for ours, theirs in pairs}


def refusal_results(refused: Sequence[tuple[Content, str]]) -> Message:
    """A ``tool`` message with each refused call's text as its ``function_result``, which settles the call for the
    function loop (``_tools.py:4645``): it is neither run nor put to a human."""
    return Message(
        role="tool",
        contents=[Content.from_function_result(call_id=call.call_id or "", result=text) for call, text in refused],
    )


def noted(result: Any, note: str) -> Any:
    """``result`` (as the function middleware holds it) with the guard's ``note`` after it: a text item more (the
    loop joins text items with a newline), or ``kit.noted``."""
    return [*result, Content.from_text(f"\n{note}")] if isinstance(result, list) else kit.noted(str(result), note)


def tools_of(options: Mapping[str, Any] | None) -> dict[str, FunctionTool]:
    """The function tools a model call offers (``options["tools"]``, as the function loop normalized them)."""
    tools = (options or {}).get("tools") or ()
    return {tool.name: tool for tool in tools if isinstance(tool, FunctionTool)}


def reaches_middleware(name: str | None, tools: Mapping[str, FunctionTool]) -> bool:
    """Whether the function loop runs a call of ``name`` through function middleware: a tool it knows, needing no
    approval, not declaration-only (``_tools.py:2608-2640``: else it pauses the batch, or answers the call itself)."""
    tool = tools.get(name or "")
    return tool is not None and tool.approval_mode != "always_require" and not tool.declaration_only


def updates_of(response: ChatResponse[Any]) -> list[ChatResponseUpdate]:
    """A response the guard changed as the updates a streamed run releases: one per message."""
    return [  # a Message's role is one of the update's
        ChatResponseUpdate(role=cast(Any, m.role), contents=m.contents, additional_properties=m.additional_properties)
        for m in response.messages
    ]
