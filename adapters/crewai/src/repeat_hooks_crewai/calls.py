"""CrewAI's tool calls and results as the guard reads them: a model response's calls from the executor's own history
(the assistant message with every ``tool_calls`` entry is appended before any runs: ``agents/agent_executor.py:1964``),
whether a result is a failure (the after-tool hook has no success flag), and CrewAI's repeated-call tally, which a
refusal must not feed (``utilities/agent_utils.py:1922``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from repeat_hooks import ToolCall, kit

Outcome = Callable[..., object]
"""One call's outcome to record: ``outcome(state, turn_id=...)``."""
FEEDS = (*kit.FEEDS, kit.Feed.ANSWERS, kit.Feed.WARNINGS)
"""What the guard feeds: outcomes, model calls, text answers; and it hands the model the guard's notes."""
FAILED, NOT_FOUND = "Error executing tool: ", "Tool not found"
"""What CrewAI hands the model for a tool's exception, and for a tool the agent lacks (``agent_executor.py:2264``,
:2191)."""
BLOCKED = "Tool execution blocked by hook. Tool: "
"""CrewAI's fixed text for a call a before-tool hook blocked (``agents/agent_executor.py:2237``)."""


def response_calls(messages: list[Any]) -> tuple[object, list[tuple[str, Any]]]:
    """The latest response's tool calls in ``executor.state.messages``: its message there and each call's ``(name,
    arguments)``, but for calls whose arguments CrewAI will not parse: it answers them itself, with no hook
    (``parse_tool_call_args``, ``agents/agent_executor.py:2138``); ``(None, [])`` if there is none."""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "assistant" and message.get("tool_calls"):
            functions = [call.get("function") or {} for call in message["tool_calls"]]
            found = [(str(f.get("name", "")), _arguments(f.get("arguments"))) for f in functions]
            return message, [(name, arguments) for name, arguments in found if arguments is not _UNPARSED]
    return None, []


_UNPARSED = object()


def _arguments(raw: Any) -> Any:
    """The arguments as CrewAI parses them (``utilities/agent_utils.py:1716``: JSON text, or as they are)."""
    try:
        return (json.loads(raw) if isinstance(raw, str) else raw) or {}  # as the hooks get them: agent_executor.py:2149
    except ValueError:
        return _UNPARSED


def tool_call(name: str, arguments: Any, tool: Any = None) -> ToolCall:
    """The ``ToolCall`` of one call, with no id (CrewAI's tool hooks carry none: calls match by name and arguments),
    with the hints of its tool's MCP annotations where it carries them."""
    return kit.tool_call(
        name, arguments, annotations=getattr(getattr(tool, "_original_tool", tool), "annotations", None)
    )


def succeeded(tool: Any, result: Any) -> bool:
    """Whether the tool exists and CrewAI did not hand the model its exception text."""
    text = result if isinstance(result, str) else ""
    return bool(tool is not None and not text.startswith(FAILED) and text != NOT_FOUND)


def blocked(name: str, result: Any) -> bool:
    """Whether another before-tool hook blocked the call (CrewAI's fixed text is the result)."""
    return isinstance(result, str) and result == f"{BLOCKED}{name}"


def uncount(executor: Any, name: str, arguments: Any, text: str) -> None:
    """Take a refusal out of CrewAI's tally before CrewAI adds it (it counts every (tool, arguments, result) and raises
    at the 5th: ``utilities/agent_utils.py:1944``): a refused call never ran, and its text is the same every time."""
    counts = getattr(executor, "_tool_call_counts", None)
    if isinstance(counts, dict):
        key = hash(json.dumps([name, arguments, str(text)], sort_keys=True, default=str))
        counts[key] = counts.get(key, 0) - 1


def answer_of(response: Any) -> str | None:
    """A text answer the after-model hook sees (a structured one as its JSON), for ``max_same_answers``."""
    dump = getattr(response, "model_dump_json", None)
    return response if isinstance(response, str) else dump() if callable(dump) else None
