"""Ending the turn: a callable ``tool_use_behavior`` that runs after each batch of function tools.

The SDK calls an agent's ``tool_use_behavior`` after every batch of function-tool results and before
the next model call (``run_internal/turn_resolution.py`` ``check_for_final_output_from_tools``). A
final output there ends the run with no further model call, which is exactly the guard's
``pre_llm_call``. ``EndTurn`` first asks the agent's own behaviour: if that ends the run (for
example ``"stop_on_first_tool"``), its output stands and the guard does not interfere.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from agents import FunctionToolResult, RunContextWrapper, ToolsToFinalOutputResult, UserError
from agents.agent import StopAtTools, ToolsToFinalOutputFunction

from .context import require_guard
from .turns import turn_of

ToolUseBehavior = Any
"""What ``Agent.tool_use_behavior`` accepts: ``"run_llm_again"``, ``"stop_on_first_tool"``, a
``StopAtTools`` dict, or a ``ToolsToFinalOutputFunction``."""

_GO_ON = ToolsToFinalOutputResult(is_final_output=False, final_output=None)
logger = logging.getLogger("repeat_hooks")
_warned: set[str] = set()


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
        decided = await self._original_decision(context, results)
        if decided.is_final_output:
            return decided
        guard = require_guard(context.context)
        turn_id = turn_of(context.usage)
        if turn_id is None and guard.state.turn_id is None:
            _warn_no_hooks()
        stop = guard.pre_llm_call(turn_id)
        if stop is None:
            return decided
        return ToolsToFinalOutputResult(is_final_output=True, final_output=stop.message)

    async def _original_decision(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        # The same rules as the SDK's check_for_final_output_from_tools (turn_resolution.py:776).
        original = self.original
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
        function: ToolsToFinalOutputFunction[Any] = original
        decided = function(context, results)
        if inspect.isawaitable(decided):
            decided = await decided
        if not isinstance(decided, ToolsToFinalOutputResult):  # as the SDK itself checks
            raise UserError("Agent tool_use_behavior callable must return ToolsToFinalOutputResult.")
        return decided


def _warn_no_hooks() -> None:
    if "no hooks" not in _warned:
        _warned.add("no hooks")
        logger.warning(
            "repeat_hooks: a guarded agent ran without GuardHooks, so no turn was started and counts carry over "
            "from run to run: pass Runner.run(..., hooks=GuardHooks())"
        )


def _stop_names(behavior: StopAtTools | dict[str, Any]) -> list[str]:
    return list(behavior.get("stop_at_tool_names", []))
