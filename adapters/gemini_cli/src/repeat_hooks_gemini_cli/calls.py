"""What Gemini CLI's hook events hand the guard, as the core counts it, and what the hook answers: a call of a
built-in tool as a ``ToolCall`` (``tool_call``: its volatile fields left out, its effect known), a result as the
model reads it (``outcome``: ``AfterTool``'s ``llmContent`` without its volatile tail), and the JSON a hook prints
(``allowed``, ``denied``, ``ended``).

Gemini CLI 0.61.0 takes a hook's answer as JSON on stdout with exit code 0. A denied call's reason reaches the model
as the call's error (``{"error": "Tool execution blocked: <reason>"}``); ``continue: false`` ends the run with no
further model call, and the CLI prints ``Agent execution stopped: Agent execution stopped by hook: <stopReason>`` on
stderr (exit code 0). No event carries a call id: the hook processes of two same calls are told apart by nothing,
so each counts once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from repeat_hooks import Policy, Refusal, Stop, ToolCall
from repeat_hooks.kit.command import cli_call

READ_ONLY: frozenset[str] = frozenset(
    "read_file read_many_files glob grep_search search_file_content list_directory web_fetch google_web_search "  # noqa: SIM905
    "get_internal_docs".split()
)
"""Gemini CLI's own tools that read and change nothing (``search_file_content``: ``grep_search``'s older name): a
call to one restarts no other call's count."""
WRITES: frozenset[str] = frozenset({"write_file", "replace", "edit"})
"""Gemini CLI's own tools that change files (``replace`` is its edit tool): a success restarts every other call's
count, so the tests rerun after an edit run."""
VOLATILE_ARGUMENTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {"run_shell_command": frozenset({"description"}), "replace": frozenset({"instruction"})}
)
"""Free text the model writes afresh beside the real arguments: ``run_shell_command``'s ``description`` beside its
``command``, ``replace``'s ``instruction`` beside its strings."""
VOLATILE_LINES = re.compile(r"^(?:Process Group PGID|Background PIDs): .*\n?", re.MULTILINE)
"""The lines of ``run_shell_command``'s result that differ at every run whatever the command printed: its process
group id, and the ids of what it left in the background."""
FAILED = re.compile(r"^(?:Exit Code|Signal): ", re.MULTILINE)
"""``run_shell_command``'s result says so when the command exited non-zero or was killed (there is no other flag)."""


def tool_call(name: str, tool_input: Any, policy: Policy) -> ToolCall:
    """The ``ToolCall`` of a call Gemini CLI is about to run (or ran): a built-in tool's volatile fields left out,
    and its effect (read-only, or a write) unless the settings name the tool in ``read_only`` or ``destructive``.
    Any other tool (``run_shell_command``, an MCP tool) is unknown: a success of it may change what others return."""
    return cli_call(name, tool_input, None, policy, read_only=READ_ONLY, writes=WRITES, volatile=VOLATILE_ARGUMENTS)


def outcome(name: str, tool_response: Any) -> tuple[bool, Any]:
    """Whether the call succeeded, and what the model read of it (``AfterTool``'s ``tool_response.llmContent``,
    text or parts, without ``run_shell_command``'s volatile lines). A failure: the response's ``error``, or a shell
    command's ``Exit Code:`` or ``Signal:`` line."""
    response = tool_response if isinstance(tool_response, Mapping) else {}
    content = response.get("llmContent", tool_response)
    if name == "run_shell_command":
        content = _masked(content)
    failed = bool(response.get("error")) or (name == "run_shell_command" and _text(content, FAILED))
    return not failed, content


def _masked(content: Any) -> Any:
    if isinstance(content, str):
        return VOLATILE_LINES.sub("", content)
    if isinstance(content, list):
        return [_masked(part) for part in content]
    if isinstance(content, Mapping) and isinstance(content.get("text"), str):
        return {**content, "text": VOLATILE_LINES.sub("", content["text"])}
    return content


def _text(content: Any, pattern: re.Pattern[str]) -> bool:
    if isinstance(content, str):
        return pattern.search(content) is not None
    if isinstance(content, list):
        return any(_text(part, pattern) for part in content)
    return isinstance(content, Mapping) and _text(content.get("text"), pattern)


def allowed(event_name: str, warning: str | None) -> dict[str, Any] | None:
    """The answer that lets the event go on: nothing, or after a call's result the guard's warning
    (``Policy(warn=True)``) as ``additionalContext``, which the model reads with that result."""
    if warning is None or event_name != "AfterTool":
        return None
    return {"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": warning}}


def denied(refusal: Refusal, stop: Stop | None) -> dict[str, Any]:
    """``BeforeTool``'s answer to a refused call: the tool does not run and the model reads the refusal as its
    error; with ``stop``, the run ends there instead (``continue: false`` is read first: the model is not called)."""
    answer: dict[str, Any] = {"decision": "deny", "reason": refusal.message}
    return {**answer, **ended(stop)} if stop is not None else answer


def ended(stop: Stop) -> dict[str, Any]:
    """The answer that ends the run with no further model call: ``continue: false``, with the stop's message as
    ``stopReason``, which the CLI prints on stderr."""
    return {"continue": False, "stopReason": f"repeat-hooks stopped the turn ({stop.reason.value}): {stop.message}"}
