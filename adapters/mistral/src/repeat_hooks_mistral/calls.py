"""What rc11 hands a hook, turned into what the core counts: the tool call, its outcome and result as the
model reads it, and the delivery id that makes a re-delivered hook call count once.

**Delivery ids.** rc11 gives no id that is unique per hook call. ``call.tool_call.call_id`` is the
model's id (models reuse them: ``call_1`` in every session and response), and ``call.action_id`` /
``call.tool_call.action_id`` are derived from it, so two distinct calls that share a model call id
share those too. Keying idempotency on any of them would merge distinct calls and let a loop through.
What *is* unique per hook call, and stable when it is delivered again, is the Temporal activity a
deployed worker runs it in: ``(workflow_id, workflow_run_id, activity_id)``; a retried activity keeps
all three. In-process runtimes (``create_session()``, ``local_runtime()``) call each hook once and never
re-deliver, so there the delivery id is ``None`` and every call counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mistralai.vibe.harness.core.protocol import (
    HookToolCall,
    ProvidedToolCall,
    RuntimeBuiltinToolCall,
    TextContentBlock,
    ToolFailureResult,
    ToolSuccessResult,
)
from mistralai.vibe.harness.runtime.content import to_model_json_text
from temporalio import activity

from repeat_hooks import ToolCall

USER_TOOL_GROUP = "client"
"""The group rc11 gives the tools passed to ``agents.Harness(tools=...)``: they keep their bare name."""


def tool_name(call: ProvidedToolCall | RuntimeBuiltinToolCall) -> str:
    """The name the policy knows a tool by: ``track_parcel`` for your own tools, ``group.tool`` for others
    (an MCP server's, a connector's), the builtin's name (``file_system.bash``) for the runtime's."""
    if isinstance(call, ProvidedToolCall):
        return call.tool_name if call.group_name == USER_TOOL_GROUP else f"{call.group_name}.{call.tool_name}"
    return str(call.name)


def tool_call(hook_tool_call: HookToolCall, *, call_id: str | None = None) -> ToolCall:
    """The core's ``ToolCall`` for an SDK ``HookToolCall``, decided under ``call_id`` (its delivery id).

    rc11 carries no effect hints for a tool (``ProvidedToolCall`` has none, ``vibe/harness/core/
    protocol.py:208``; its MCP host drops a remote tool's ``annotations``, ``vibe/harness/runtime/hosts/
    mcp_http.py`` ``_remote_tool_definition``): ``read_only``, ``destructive`` and ``idempotent`` stay
    unknown, and the policy's ``read_only`` / ``destructive`` decide.
    """
    call = hook_tool_call.call
    return ToolCall(tool_name(call), call.arguments, call_id=call_id)


def delivery_id() -> str | None:
    """The id of the hook call being run: its Temporal activity identity, or ``None`` outside an activity."""
    if not activity.in_activity():
        return None
    info = activity.info()
    return f"temporal:{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"


def succeeded(tool_result: ToolSuccessResult | ToolFailureResult) -> bool:
    """Whether a tool ran without error: rc11 reports a raised exception as a ``ToolFailureResult``."""
    return not isinstance(tool_result, ToolFailureResult)


def model_view(result: ToolSuccessResult | ToolFailureResult) -> Any:
    """What the model reads for a tool's result, as a value for the core to digest (never stored).

    rc11 writes the tool message from the result alone (observed on the native core's output; the
    rendering lives in ``vibe/harness/core/_native.abi3.so``, the join in
    ``vibe/harness/runtime/completion/request.py:41-44``):

    - with content blocks, the model reads their text joined by newlines (block ``_meta`` and
      annotations, the result's ``_meta``, a ``ToolResult``'s ``annotations``: never). When that
      text is rc11's own rendering of ``structured_content`` (``vibe_agents/sdk/assembly/assemble.py:
      789-791`` for ``@agents.tool`` results, ``vibe/harness/runtime/hosts/mcp_http.py`` for MCP
      ones), the view is ``structured_content`` itself: the same text, kept as a value;
    - with none, a success reads its ``structured_content`` (a string as is, else as JSON; nothing:
      ``""``), and a failure reads ``{"result": {"type": "error", "error": {"name", "message",
      "details"}, "output": ...}}``, which is what this returns for it.

    One exception, in a failure's message: rc11 turns a tool's return value that is not JSON (a
    ``datetime``, ``date``, ``UUID``, ``Decimal``, ``Enum``, dataclass, outside a pydantic model) into
    the failure ``capability_execution_failed``, "input was not a valid JSON value"
    (``assemble.py:1188-1191``, caught at ``vibe/harness/runtime/capabilities/callables.py:24-32``).
    That text never carries the result, only pydantic's ``input_value=`` echo of the offending value,
    which for ``datetime.now()`` differs at every call although the call can never succeed; the
    view leaves the echo out (``_JSON_VALUE_ECHO``), so the same failure is the same outcome.
    """
    if result.content:
        text = "\n".join(block.text for block in result.content if isinstance(block, TextContentBlock))
        structured = result.structured_content
        if structured is not None and text == (
            structured if isinstance(structured, str) else to_model_json_text(structured)
        ):
            return structured
        return text
    if isinstance(result, ToolFailureResult):
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


_JSON_VALUE_ECHO = re.compile(r"(\[type=invalid-json-value, )input_value=.*?, (input_type=[\w.]+\])")
"""pydantic's echo of a value that is not JSON, in rc11's "not a valid JSON value" failure."""


def agent_tool_names(harness: Any) -> tuple[str, ...] | None:
    """The names of the agent's own tools (``agents.Harness(tools=...)``) as the policy knows them, from the
    harness definition a hook's ``ctx.harness`` holds; ``None`` if it holds none (a hand-made context).

    Only these are known before the agent runs: an MCP server's, a connector's or a builtin's tools
    (``group.tool``) are discovered by rc11 at run time.
    """
    config = getattr(harness, "agent_config", None)
    tools: Iterable[Any] | None = getattr(config, "tools", None)
    if tools is None:
        return None
    return tuple(tool.name if tool.namespace is None else f"{tool.namespace}.{tool.name}" for tool in tools)
