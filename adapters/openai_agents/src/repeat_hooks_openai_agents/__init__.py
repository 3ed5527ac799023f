"""repeat-hooks for the OpenAI Agents SDK (``openai-agents`` 0.24).

::

    from repeat_hooks_openai_agents import GuardState, guard_agent, stop_of

    agent = guard_agent(Agent(name="parcel-tracker", tools=[track_parcel]))  # once, shared; Policy() by default
    state = GuardState()                                                     # one per conversation
    result = await Runner.run(agent, "Keep checking FR-7731", context=state)
    stop_of(result)  # None, or the guard's Stop when it ended the run (final_output is then its message)

``guard_agent(agent, policy, cost=TokenPrices(...), clock=..., **settings)`` holds the policy; the run
context holds the conversation's counts (the context *is* the ``GuardState``, or your own object holds one
in ``repeat_guard``). Its ``RepeatGuardHooks`` (the clone's agent hooks) start turns, count model calls and
decide each response's calls as a batch; a tool input guardrail hands each call its decision, an output
guardrail records its outcome, and the agent's ``tool_use_behavior`` ends the turn with the guard's
message (or raises ``RepeatGuardStopped`` for a structured ``output_type``, or with ``on_stop="raise"``).
Save a paused run with ``RunState.to_json(context_serializer=context_serializer)``: the resumed run, in any
process, continues the turn; a call a human rejects counts as rejected (the same call rejected ``max_calls``
times is refused without asking again), and one the guard refused is never asked.
"""

from repeat_hooks import GuardState, Policy, Stop, StopReason, TokenPrices

from .calls import McpHints, is_sdk_error, model_view
from .guard import AskUnlessRefused, EndTurn, RecordOutcome, RefuseRepeats, RepeatGuardHooks, guard_agent
from .state import (
    GUARD_ATTRIBUTE,
    GuardSetupError,
    MissingGuard,
    RepeatGuardStopped,
    context_deserializer,
    context_serializer,
    find_state,
    require_state,
    save_stop,
    stop_items,
    stop_of,
)

__all__ = [
    "GUARD_ATTRIBUTE",
    "AskUnlessRefused",
    "EndTurn",
    "GuardSetupError",
    "GuardState",
    "McpHints",
    "MissingGuard",
    "Policy",
    "RecordOutcome",
    "RefuseRepeats",
    "RepeatGuardHooks",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "context_deserializer",
    "context_serializer",
    "find_state",
    "guard_agent",
    "is_sdk_error",
    "model_view",
    "require_state",
    "save_stop",
    "stop_items",
    "stop_of",
]

__version__ = "0.3.0"
