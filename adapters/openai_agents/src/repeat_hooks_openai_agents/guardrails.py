"""The two tool guardrails the adapter attaches to every function tool of a guarded agent.

- ``refuse_repeats`` (a tool *input* guardrail) runs before the tool: it counts the call and, past
  the limit, rejects it with ``ToolGuardrailFunctionOutput.reject_content(message)``, so the tool does
  not run and the model receives the refusal text as the call's output.
- ``RecordOutcome`` (a tool *output* guardrail) runs after the tool: it tells the guard whether the
  call succeeded, for ``max_errors_in_a_row`` and ``count_failures=False``.

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
from .turns import turn_of

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


def _refuse_repeats(data: ToolInputGuardrailData, *, strict: bool) -> ToolGuardrailFunctionOutput:
    tool_context = data.context
    guard = require_guard(tool_context.context) if strict else find_guard(tool_context.context)
    if guard is None:
        return _ALLOW
    call = ToolCall(tool_context.tool_name, tool_context.tool_arguments, delivery_id(tool_context, guard))
    refusal = guard.pre_tool_call(call, turn_of(tool_context.usage))
    if refusal is None:
        return _ALLOW
    return ToolGuardrailFunctionOutput.reject_content(refusal.message, output_info=refusal)


def _refuse_repeats_strict(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Fires before each call of a guarded agent's tool: allows it, or rejects it with the refusal text."""
    return _refuse_repeats(data, strict=True)


def _refuse_repeats_lenient(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """Like ``refuse_repeats``, but allows every call when the run context holds no guard."""
    return _refuse_repeats(data, strict=False)


refuse_repeats: ToolInputGuardrail[Any] = ToolInputGuardrail(_refuse_repeats_strict, name="repeat_hooks")
"""The input guardrail on a guarded agent's own tools; raises ``TypeError`` if the context holds no guard."""

refuse_repeats_on_server: ToolInputGuardrail[Any] = ToolInputGuardrail(_refuse_repeats_lenient, name="repeat_hooks")
"""The input guardrail on MCP servers, which other, unguarded agents may share: no guard, no check."""


class RecordOutcome:
    """The output guardrail's function: fires after a guarded tool ran and records ok or failed.

    A call failed when its output is the SDK's error text (``is_sdk_error``) or when ``is_failure``
    says so. Always allows the output through unchanged.
    """

    def __init__(self, is_failure: FailureCheck | None = None) -> None:
        self.is_failure = is_failure

    def __call__(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Record the call's outcome in the run context's guard; returns "allow"."""
        tool_context = data.context
        guard = find_guard(tool_context.context)
        if guard is None:
            return _ALLOW
        output = data.output
        failed = is_sdk_error(output) or (self.is_failure is not None and bool(self.is_failure(output)))
        call = ToolCall(tool_context.tool_name, tool_context.tool_arguments, delivery_id(tool_context, guard))
        guard.post_tool_call(call, not failed, turn_of(tool_context.usage))
        return _ALLOW


def record_outcome(is_failure: FailureCheck | None = None) -> ToolOutputGuardrail[Any]:
    """A tool output guardrail that records each call's outcome (see ``RecordOutcome``)."""
    return ToolOutputGuardrail(RecordOutcome(is_failure), name="repeat_hooks_outcome")


def is_ours(guardrail: object) -> bool:
    """``True`` for a guardrail this adapter made (so guarding twice attaches nothing twice)."""
    function = getattr(guardrail, "guardrail_function", None)
    return function in (_refuse_repeats_strict, _refuse_repeats_lenient) or isinstance(function, RecordOutcome)
