"""repeat-hooks for Strands Agents (``strands-agents`` 1.62): the guard as a hook provider (and agent plugin).

::

    from strands import Agent
    from repeat_hooks_strands import RepeatGuardHooks

    agent = Agent(tools=[track_parcel], hooks=[RepeatGuardHooks()])

One guard may serve many agents; a turn is one invocation that brings new input. The guard's state lives
in each agent's ``agent.state`` under ``STATE_KEY`` (plain JSON), so Strands' session managers
(``FileSessionManager``, ``S3SessionManager``, ...) save it with the conversation and restore it in any
process that joins the session. ``stop_of(agent)`` says how the guard stopped the agent's last turn.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import hints, model_view, succeeded, tool_call
from .guard import STOP_KEY, RepeatGuardHooks
from .state import STATE_KEY, read_state, stop_of, write_state

__all__ = [
    "STATE_KEY",
    "STOP_KEY",
    "Policy",
    "RepeatGuardHooks",
    "Stop",
    "StopReason",
    "TokenPrices",
    "hints",
    "model_view",
    "read_state",
    "stop_of",
    "succeeded",
    "tool_call",
    "write_state",
]

__version__ = "0.3.0"
