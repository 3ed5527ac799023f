"""Ending the turn: a callable ``tool_use_behavior`` that runs after each batch of function tools.

The SDK calls an agent's ``tool_use_behavior`` after every batch of function-tool results and before
the next model call (``run_internal/turn_resolution.py`` ``check_for_final_output_from_tools``). A
final output there ends the run with no further model call, which is exactly the guard's
``pre_llm_call``. ``EndTurn`` first asks the agent's own behaviour: if that ends the run (for
example ``"stop_on_first_tool"``), its output stands and the guard does not interfere. A call the
guard refused did not run, so it never becomes the caller's output: ``"stop_on_first_tool"`` and
``StopAtTools`` look only at the calls that ran (a callable behaviour of yours sees every result,
refusals included).
"""

from __future__ import annotations

import inspect
from typing import Any

from agents import FunctionToolResult, RunContextWrapper, ToolsToFinalOutputResult, UserError
from agents.agent import StopAtTools, ToolsToFinalOutputFunction

from .context import require_guard
from .turns import turn_in_run, turn_of, was_refused

ToolUseBehavior = Any
"""What ``Agent.tool_use_behavior`` accepts: ``"run_llm_again"``, ``"stop_on_first_tool"``, a
``StopAtTools`` dict, or a ``ToolsToFinalOutputFunction``."""

_GO_ON = ToolsToFinalOutputResult(is_final_output=False, final_output=None)


class EndTurn:
    """A guarded agent's ``tool_use_behavior``.

    Fires after each batch of function tools. Returns the agent's own decision when it ends the run;
    otherwise the guard's ``pre_llm_call``: a ``Stop`` becomes
    ``ToolsToFinalOutputResult(is_final_output=True, final_output=stop.message)`` (the run's
    ``final_output``, whatever the agent's ``output_type``), and no stop lets the model run again.
    """

    def __init__(self, original: ToolUseBehavior) -> None:
        self.original: ToolUseBehavior = original.original if isinstance(original, EndTurn) else original
        """The agent's own behaviour, asked first."""

    async def __call__(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        """Decide whether the batch ends the run; see the class docstring."""
        guard = require_guard(context.context)
        turn_id = turn_in_run(guard, context.usage, resumed=_all_approved(context, results))
        decided = await self._original_decision(context, results)
        if decided.is_final_output:
            return decided
        stop = guard.pre_llm_call(turn_id)
        if stop is None:
            return decided
        return ToolsToFinalOutputResult(is_final_output=True, final_output=stop.message)

    async def _original_decision(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        # The same rules as the SDK's check_for_final_output_from_tools (turn_resolution.py:776).
        original = self.original
        if not results:
            return _GO_ON
        if not isinstance(original, str | dict):
            return await self._ask(original, context, results)
        results = [r for r in results if not was_refused(context.usage, _call_id(r))]  # they did not run
        if not results or original == "run_llm_again":
            return _GO_ON
        if original == "stop_on_first_tool":
            return ToolsToFinalOutputResult(is_final_output=True, final_output=results[0].output)
        if isinstance(original, dict):
            names = _stop_names(original)
            for result in results:
                if result.tool.name in names or result.tool.qualified_name in names:
                    return ToolsToFinalOutputResult(is_final_output=True, final_output=result.output)
        return _GO_ON

    @staticmethod
    async def _ask(
        function: ToolsToFinalOutputFunction[Any], context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        decided = function(context, results)
        if inspect.isawaitable(decided):
            decided = await decided
        if not isinstance(decided, ToolsToFinalOutputResult):  # as the SDK itself checks
            raise UserError("Agent tool_use_behavior callable must return ToolsToFinalOutputResult.")
        return decided


def _call_id(result: FunctionToolResult) -> str | None:
    raw = getattr(result.run_item, "raw_item", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return call_id if isinstance(call_id, str) else None


def _all_approved(context: RunContextWrapper[Any], results: list[FunctionToolResult]) -> bool:
    """``True`` for a batch of calls a human approved: on resume it runs before ``on_agent_start``."""
    if not results or turn_of(context.usage) is not None:
        return False  # the usual case: the run has its turn; no approval lookup
    for result in results:
        call_id = _call_id(result)
        if call_id is None or context.is_tool_approved(result.tool.name, call_id) is not True:
            return False
    return True


def _stop_names(behavior: StopAtTools | dict[str, Any]) -> list[str]:
    return list(behavior.get("stop_at_tool_names", []))
