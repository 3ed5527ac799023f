"""repeat-hooks for Google ADK (``google-adk`` 2.13): the guard as a Runner plugin.

::

    from google.adk.apps import App
    from repeat_hooks_google_adk import RepeatGuardPlugin

    app = App(name="parcels", root_agent=root_agent, plugins=[RepeatGuardPlugin()])

One plugin serves every session and invocation; a turn is one invocation. The guard's state lives in
the session state under ``STATE_KEY`` (plain JSON, written through ADK's state delta), so every
session service persists it: ``DatabaseSessionService`` on SQLite or Postgres shares it across processes.
``stop_of(session, invocation_id)`` says how the guard stopped a turn.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import model_view, read_only_hint, tool_call
from .guard import STOP_METADATA, FailureCheck, RepeatGuardPlugin, stop_response
from .state import STATE_KEY, read_state, stop_of, write_state

__all__ = [
    "STATE_KEY",
    "STOP_METADATA",
    "FailureCheck",
    "Policy",
    "RepeatGuardPlugin",
    "Stop",
    "StopReason",
    "TokenPrices",
    "model_view",
    "read_only_hint",
    "read_state",
    "stop_of",
    "stop_response",
    "tool_call",
    "write_state",
]

__version__ = "0.2.0"
