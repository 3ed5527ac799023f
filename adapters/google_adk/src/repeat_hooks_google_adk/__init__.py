"""repeat-hooks for Google ADK (``google-adk`` 2.13): the guard as a Runner plugin.

::

    from google.adk.runners import InMemoryRunner
    from repeat_hooks import Policy
    from repeat_hooks_google_adk import RepeatGuardPlugin

    runner = InMemoryRunner(agent=root_agent, plugins=[RepeatGuardPlugin(Policy(max_refusals=3))])

One plugin serves every session and invocation; a turn is one invocation. The guard's state lives in
the session state under ``STATE_KEY`` (plain JSON, written through ADK's state delta), so every
session service persists it: ``DatabaseSessionService`` on SQLite or Postgres shares it across processes.
"""

from .calls import read_only_hint, tool_call
from .plugin import STOP_METADATA, Clock, FailureCheck, RepeatGuardPlugin, stop_response
from .prices import CostOf, token_prices
from .session_state import STATE_KEY, read_state, stop_of, write_state

__all__ = [
    "STATE_KEY",
    "STOP_METADATA",
    "Clock",
    "CostOf",
    "FailureCheck",
    "RepeatGuardPlugin",
    "read_only_hint",
    "read_state",
    "stop_of",
    "stop_response",
    "token_prices",
    "tool_call",
    "write_state",
]

__version__ = "0.1.0"
