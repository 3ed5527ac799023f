"""repeat-hooks for pydantic-ai (``pydantic-ai-slim`` 2.x): a capability that stops repeated tool calls.

::

    from pydantic_ai import Agent
    from repeat_hooks import Policy
    from repeat_hooks_pydantic_ai import RepeatGuard, stop_of

    agent = Agent(model, tools=[track_parcel], capabilities=[RepeatGuard(Policy(max_refusals=3))])
    result = await agent.run("Keep checking FR-7731")
    stop_of(result)       # None, or the Stop (reason, message) that ended the run; result.output is its message
    refusals_of(result)   # [(tool name, Refusal), ...]: the calls the guard refused in this run

Each run is one turn with its own counters (``for_run``). A refused call never runs: the model reads
the refusal as the tool's return. A run with structured output only raises ``RepeatGuardStopped``.
"""

from .calls import FailureCheck, read_only_hint
from .capability import RepeatGuard, accepts_text
from .costs import CostOf, token_prices
from .stopped import GUARD_NAME, RepeatGuardStopped, refusals_of, stop_of

__all__ = [
    "GUARD_NAME",
    "CostOf",
    "FailureCheck",
    "RepeatGuard",
    "RepeatGuardStopped",
    "accepts_text",
    "read_only_hint",
    "refusals_of",
    "stop_of",
    "token_prices",
]

__version__ = "0.1.0"
