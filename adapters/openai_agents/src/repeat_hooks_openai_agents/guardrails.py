"""The two tool guardrails the adapter attaches to every function tool of a guarded agent.

- ``refuse_repeats`` (a tool *input* guardrail) runs before the tool: it counts the call and, past
  the limit, rejects it with ``ToolGuardrailFunctionOutput.reject_content(message)``, so the tool does
  not run and the model receives the refusal text as the call's output.
- ``RecordOutcome`` (a tool *output* guardrail) runs after the tool: it tells the guard whether the
  call succeeded and what it returned (a different result is progress; the core keeps a digest).

For a local MCP server's tools, the call carries the server's ``readOnlyHint`` (``McpHints``).

Both are appended after the tool's own guardrails. The SDK runs input guardrails in order and stops
at the first rejection (``run_internal/tool_execution.py`` ``_execute_tool_input_guardrails``), so a
call your guardrail rejects never reaches the guard and is not counted.

Parallel calls of one model response: the SDK starts one task per call, in the order the model
listed them, and the check-and-count here is synchronous (atomic under asyncio), so siblings are
decided in that order: with a limit of 2, the 3rd listed call is refused whichever finishes first.
(A tool guardrail of yours that really suspends before this one could reorder them.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agents import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
    default_tool_error_function,
)
from agents.tool_context import ToolContext

from repeat_hooks import StopRepeatedCalls, ToolCall

from .context import find_guard, require_guard
from .turns import note_refused, turn_in_run, turn_of

FailureCheck = Callable[[Any], bool]
"""Says whether a tool's output means the call failed (``True``) or succeeded."""

SDK_ERROR_TEXT: str = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
"""What the SDK hands the model when a tool raised (``tool.py`` ``default_tool_error_function``)."""
_TIMEOUT_TEXT = re.compile(r"Tool '.*' timed out after \S+ seconds\.", re.DOTALL)
_ALLOW = ToolGuardrailFunctionOutput.allow()


def is_sdk_error(output: Any) -> bool:
    """``True`` when ``output`` is the SDK's own text for a tool that raised or timed out.

    The SDK catches an exception raised by a function tool (or by parsing its arguments) and hands
    the model the tool's ``failure_error_function`` text instead; with the default function that text
    is fixed, so this is how the adapter sees that a call failed. Tools with a custom
    ``failure_error_function``, or that return their own error text, need ``guard_agent(...,
    is_failure=...)``.
    """
    return isinstance(output, str) and (output == SDK_ERROR_TEXT or _TIMEOUT_TEXT.fullmatch(output) is not None)


def delivery_id(tool_context: ToolContext[Any], guard: StopRepeatedCalls) -> str | None:
    """The id under which one delivery of a tool call is decided once.

    The SDK runs the input guardrails twice for the same call when
    ``ToolExecutionConfig(pre_approval_tool_input_guardrails=True)``: before the approval
    interruption and again before execution. The call id, scoped by the turn and by the model calls
    made so far, makes the second run return the first decision without counting again, while a
    provider that reuses call ids across responses (``call_0`` every time) is still counted.
    """
    call_id = tool_context.tool_call_id
    if not call_id:
        return None
    state = guard.state
    return f"{call_id}@{state.turn}.{state.model_calls}"


def _resumed(tool_context: ToolContext[Any]) -> bool:
    """``True`` for a call a human approved that runs, on resume, before the run's ``on_agent_start``."""
    if turn_of(tool_context.usage) is not None:
        return False  # the usual case: the run has its turn; no approval lookup
    return tool_context.is_tool_approved(tool_context.tool_name, tool_context.tool_call_id) is True


class McpHints:
    """What a local MCP server says of its tools: ``readOnlyHint``, by tool name, for ``ToolCall.read_only``.

    Read from the server's last tool listing (the SDK lists the tools before every run that uses the
    server, so the listing is there before any call). ``True``/``False`` as the server declared it;
    ``None`` when the server said nothing (the policy's ``read_only`` setting then decides) or when
    the tool is not found under that name (``include_server_in_tool_names`` renames tools).
    These are the server's hints, not proof: a server that lies about them weakens the guard.
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self._listed: object = None
        self._hints: dict[str, bool | None] = {}

    def read_only(self, tool_name: str) -> bool | None:
        """The server's ``readOnlyHint`` for ``tool_name``, or ``None`` when unknown."""
        # The SDK's own list (replaced on every refresh); its public ``cached_tools`` is a deep copy per read.
        listed = getattr(self.server, "_tools_list", None)
        if not isinstance(listed, list):
            listed = getattr(self.server, "cached_tools", None)
        if not isinstance(listed, list):
            return None
        if listed is not self._listed:
            self._hints = {
                tool.name: _read_only_hint(tool) for tool in listed if isinstance(getattr(tool, "name", None), str)
            }
            self._listed = listed
        return self._hints.get(tool_name)


def _read_only_hint(tool: Any) -> bool | None:
    hint = getattr(getattr(tool, "annotations", None), "readOnlyHint", None)
    return hint if isinstance(hint, bool) else None


def _call_of(tool_context: ToolContext[Any], guard: StopRepeatedCalls, hints: McpHints | None) -> ToolCall:
    read_only = None if hints is None else hints.read_only(tool_context.tool_name)
    return ToolCall(
        tool_context.tool_name, tool_context.tool_arguments, delivery_id(tool_context, guard), read_only=read_only
    )


class RefuseRepeats:
    """The input guardrail's function: fires before each call of a guarded tool, allows it or refuses it.

    ``strict`` (a guarded agent's own tools): a run context without a guard raises ``MissingGuard``.
    Not strict (a local MCP server, which unguarded agents may share): no guard, no check.
    ``hints``: the MCP server's ``readOnlyHint`` for each of its tools.
    """

    def __init__(self, *, strict: bool, hints: McpHints | None = None) -> None:
        self.strict = strict
        self.hints = hints

    def __call__(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Count the call in the run's guard; returns "allow", or ``reject_content(refusal.message)``."""
        tool_context = data.context
        guard = require_guard(tool_context.context) if self.strict else find_guard(tool_context.context)
        if guard is None:
            return _ALLOW
        turn_id = turn_in_run(guard, tool_context.usage, resumed=_resumed(tool_context))
        refusal = guard.pre_tool_call(_call_of(tool_context, guard, self.hints), turn_id)
        if refusal is None:
            return _ALLOW
        note_refused(tool_context.usage, tool_context.tool_call_id)
        return ToolGuardrailFunctionOutput.reject_content(refusal.message, output_info=refusal)


refuse_repeats: ToolInputGuardrail[Any] = ToolInputGuardrail(RefuseRepeats(strict=True), name="repeat_hooks")
"""The input guardrail on a guarded agent's own tools; raises ``MissingGuard`` if the context holds no guard."""


def refuse_repeats_on_server(server: Any) -> ToolInputGuardrail[Any]:
    """The input guardrail for a local MCP server's tools: no guard in the context, no check."""
    return ToolInputGuardrail(RefuseRepeats(strict=False, hints=McpHints(server)), name="repeat_hooks")


class RecordOutcome:
    """The output guardrail's function: fires after a guarded tool ran and records its outcome.

    Passes the guard the call's result (the tool's output, digested by the core, never stored) and
    whether it failed: its output is the SDK's error text (``is_sdk_error``) or ``is_failure`` says
    so. Always allows the output through unchanged.
    """

    def __init__(self, is_failure: FailureCheck | None = None, hints: McpHints | None = None) -> None:
        self.is_failure = is_failure
        self.hints = hints

    def __call__(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Record the call's outcome and result in the run context's guard; returns "allow"."""
        tool_context = data.context
        guard = find_guard(tool_context.context)
        if guard is None:
            return _ALLOW
        turn_id = turn_in_run(guard, tool_context.usage, resumed=_resumed(tool_context))
        output = data.output
        failed = is_sdk_error(output) or (self.is_failure is not None and bool(self.is_failure(output)))
        call = _call_of(tool_context, guard, self.hints)
        guard.post_tool_call(call, not failed, turn_id, result=output)
        return _ALLOW


def record_outcome(is_failure: FailureCheck | None = None, hints: McpHints | None = None) -> ToolOutputGuardrail[Any]:
    """A tool output guardrail that records each call's outcome and result (see ``RecordOutcome``)."""
    return ToolOutputGuardrail(RecordOutcome(is_failure, hints), name="repeat_hooks_outcome")


def is_ours(guardrail: object) -> bool:
    """``True`` for a guardrail this adapter made (so guarding twice attaches nothing twice)."""
    return isinstance(getattr(guardrail, "guardrail_function", None), (RefuseRepeats, RecordOutcome))
