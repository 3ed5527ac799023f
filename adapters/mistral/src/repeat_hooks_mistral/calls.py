"""What rc11 hands a hook, as the core counts it: the tool call (a ``ToolCall``, with no hints: rc11 has none), its
outcome and its result as the model reads it, the agent's tool names, and the delivery id that makes a hook call
Temporal delivers twice count once; and a result with the guard's note after it (``noted``). The SDK facts behind
each: README, "How it maps to rc11"."""

from __future__ import annotations

import json
import re
from typing import Any

from mistralai.vibe.harness.core import protocol
from mistralai.vibe.harness.runtime.content import to_model_json_text
from temporalio import activity

from repeat_hooks import ToolCall
from repeat_hooks.kit import FEEDS as KIT_FEEDS
from repeat_hooks.kit import Feed
from repeat_hooks.kit import tool_call as kit_tool_call

FEEDS = (*KIT_FEEDS, Feed.WARNINGS)
"""What the guard feeds the core: each call's outcome, each model call, and the model the guard's notes
(``post_tool_call`` returns the result it is handed with the note after it: ``noted``)."""
Result = protocol.ToolSuccessResult | protocol.ToolFailureResult
"""A tool's result, as rc11 hands it to ``post_tool_call``."""

USER_TOOL_GROUP = "client"
"""The group rc11 gives the tools passed to ``agents.Harness(tools=...)``: they keep their bare name."""
_JSON_VALUE_ECHO = re.compile(r"(\[type=invalid-json-value, )input_value=.*?, (input_type=[\w.]+\])")
"""pydantic's echo of a value that is not JSON, in rc11's "not a valid JSON value" failure."""


def tool_call(hook_tool_call: protocol.HookToolCall, *, call_id: str | None = None) -> ToolCall:
    """The core's ``ToolCall`` for an rc11 ``HookToolCall``, decided under ``call_id`` (its delivery id), named as
    the policy knows it: ``track_parcel`` (your own tools), ``group.tool`` (an MCP server's), ``file_system.bash``."""
    call = hook_tool_call.call
    if not isinstance(call, protocol.ProvidedToolCall):
        return kit_tool_call(str(call.name), call.arguments, call_id=call_id)
    name = call.tool_name if call.group_name == USER_TOOL_GROUP else f"{call.group_name}.{call.tool_name}"
    return kit_tool_call(name, call.arguments, call_id=call_id)


def delivery_id() -> str | None:
    """The id of the hook call being run: its Temporal activity's identity (kept by a retry), else ``None``."""
    if not activity.in_activity():
        return None
    info = activity.info()
    return f"temporal:{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"


def succeeded(tool_result: protocol.ToolSuccessResult | protocol.ToolFailureResult) -> bool:
    """Whether a tool ran without error: rc11 reports a raised exception as a ``ToolFailureResult``."""
    return not isinstance(tool_result, protocol.ToolFailureResult)


def model_view(result: protocol.ToolSuccessResult | protocol.ToolFailureResult) -> Any:
    """What the model reads for a tool's result, as a value for the core to digest (never stored): the blocks'
    text (``structured_content`` itself when the text is rc11's rendering of it); with no blocks, a success's
    ``structured_content`` and a failure's error, without pydantic's echo of a value that is not JSON."""
    if result.content:
        text = "\n".join(block.text for block in result.content if isinstance(block, protocol.TextContentBlock))
        structured = result.structured_content
        if structured is not None and text == (
            structured if isinstance(structured, str) else to_model_json_text(structured)
        ):
            return structured
        return text
    if isinstance(result, protocol.ToolFailureResult):
        error = result.error
        message = _JSON_VALUE_ECHO.sub(r"\1\2", error.message)
        failure: dict[str, Any] = {
            "type": "error",
            "error": {"name": error.code, "message": message, "details": error.details},
        }
        if result.structured_content is not None:
            failure["output"] = result.structured_content
        return {"result": failure}
    return "" if result.structured_content is None else result.structured_content


def rendered(result: Result) -> str:
    """The tool message rc11 writes for a result with no content blocks: a success's ``structured_content`` (a
    string as it is, ``""`` for none, else compact JSON), a failure's ``{"result": {"type": "error", "error":
    {...}, "output": ...}}`` in compact JSON (rc11's native core writes both, in no Python file;
    ``tests/adapters/mistral/test_warnings.py`` holds this to rc11's own text)."""
    if isinstance(result, protocol.ToolFailureResult):
        error = result.error
        failure: dict[str, Any] = {
            "type": "error",
            "error": {"name": error.code, "message": error.message, "details": error.details},
        }
        if result.structured_content is not None:
            failure["output"] = result.structured_content
        return _compact({"result": failure})
    structured = result.structured_content
    if structured is None or isinstance(structured, str):
        return structured or ""
    return _compact(structured)


def noted(result: Result, note: str) -> Result:
    """``result`` with the guard's ``note`` as a text block after its content: rc11 writes the tool message from
    the content blocks joined by newlines, so the model reads the result, then the note. A result with no blocks
    gets its own message (``rendered``) as the first one, so what the model reads of the result stays the same."""
    blocks: list[protocol.ContentBlock] = list(result.content)
    if not blocks and (text := rendered(result)):
        blocks.append(protocol.TextContentBlock(text=text))
    return result.model_copy(update={"content": [*blocks, protocol.TextContentBlock(text=note)]})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def agent_of(harness: Any) -> tuple[object, tuple[str, ...] | None]:
    """The agent's ``name`` and its own tools' names (``agents.Harness(tools=...)``) as the policy knows them, from
    the harness definition ``ctx.harness`` holds (``None``: a hand-made context holds none)."""
    config = getattr(harness, "agent_config", None)
    tools = getattr(config, "tools", None)
    named = (
        None if tools is None else tuple(t.name if t.namespace is None else f"{t.namespace}.{t.name}" for t in tools)
    )
    return getattr(config, "name", None), named
