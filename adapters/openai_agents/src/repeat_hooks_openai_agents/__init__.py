"""repeat-hooks for the OpenAI Agents SDK (``openai-agents`` 0.24).

::

    from repeat_hooks import StopRepeatedCalls
    from repeat_hooks_openai_agents import GuardHooks, guard_agent

    agent = guard_agent(Agent(name="parcel-tracker", tools=[track_parcel]))   # once, shared
    guard = StopRepeatedCalls(match="tool", max_calls=2, max_refusals=3)       # one per conversation
    result = await Runner.run(agent, "Keep checking FR-7731", context=guard, hooks=GuardHooks())

The guard lives in the run context (the context *is* the ``StopRepeatedCalls``, or your own object
holds one in ``repeat_guard``). A tool input guardrail refuses repeated calls, the agent's
``tool_use_behavior`` ends the turn with the guard's message, and ``GuardHooks`` starts turns and
counts model calls. Save a paused run with ``RunState.to_json(context_serializer=context_serializer)``.
A run set up wrongly (no ``GuardHooks``, one guard in two concurrent runs, an unguarded agent, a
budget nothing feeds) raises ``GuardSetupError`` at its first model call. ``run_stop(result)`` says
whether the guard ended a run; ``save_stop(session, result)`` keeps its message in a ``Session``.
"""

from .agent import guard_agent
from .behavior import EndTurn
from .context import GUARD_ATTRIBUTE, context_deserializer, context_serializer, find_guard, require_guard
from .errors import GuardSetupError, MissingGuard
from .guardrails import FailureCheck, McpHints, is_sdk_error, record_outcome, refuse_repeats
from .hooks import Clock, CostOf, GuardHooks, RequireGuardHooks, token_prices
from .stops import run_stop, save_stop, stop_items

__all__ = [
    "GUARD_ATTRIBUTE",
    "Clock",
    "CostOf",
    "EndTurn",
    "FailureCheck",
    "GuardHooks",
    "GuardSetupError",
    "McpHints",
    "MissingGuard",
    "RequireGuardHooks",
    "context_deserializer",
    "context_serializer",
    "find_guard",
    "guard_agent",
    "is_sdk_error",
    "record_outcome",
    "refuse_repeats",
    "require_guard",
    "run_stop",
    "save_stop",
    "stop_items",
    "token_prices",
]

__version__ = "0.1.0"
