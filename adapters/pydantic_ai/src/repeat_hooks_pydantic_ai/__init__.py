"""repeat-hooks for pydantic-ai (``pydantic-ai-slim`` 2.x): a capability that stops repeated tool calls.

::

    from pydantic_ai import Agent
    from repeat_hooks_pydantic_ai import Policy, RepeatGuard, refusals_of, stop_of

    agent = Agent(model, tools=[track_parcel], capabilities=[RepeatGuard(Policy(max_refusals=3))])
    result = await agent.run("Keep checking FR-7731")
    stop_of(result)       # None, or the Stop (reason, message) that ended the run; result.output is its message
    refusals_of(result)   # [(tool name, Refusal), ...]: the calls the guard refused in this run

A turn is a user message: a run given a prompt starts one; a run given none (approvals with
``deferred_tool_results=``, ``message_history=`` resumes, ``continue_as_new``) continues it, its counts
rebuilt from the history. A refused call never runs: the model reads the refusal as the tool's return,
and an approval-required call the guard refuses is never put to a person. A run whose output is not
plain text (an output function, structured output), or any run with ``on_stop="raise"``, raises
``RepeatGuardStopped``.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import FailureCheck, model_view, read_only_hint, tool_hints
from .guard import GuardSetupError, RepeatGuard, accepts_text
from .state import GUARD_NAME, RepeatGuardStopped, refusals_of, stop_of

__all__ = [
    "GUARD_NAME",
    "FailureCheck",
    "GuardSetupError",
    "Policy",
    "RepeatGuard",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "accepts_text",
    "model_view",
    "read_only_hint",
    "refusals_of",
    "stop_of",
    "tool_hints",
]

__version__ = "0.3.0"
