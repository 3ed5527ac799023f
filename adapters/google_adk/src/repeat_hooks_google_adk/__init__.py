"""repeat-hooks for Google ADK (``google-adk`` 2.11 to 2.13): the guard as a Runner plugin.

::

    from google.adk.apps import App
    from repeat_hooks_google_adk import RepeatGuardPlugin

    app = App(name="parcels", root_agent=root_agent, plugins=[RepeatGuardPlugin()])

One plugin serves every session and invocation; a turn is one invocation (in ``run_live``, one user
message), and a stop ends the invocation for the whole agent tree. Calls are counted per scope, what
one model saw (``RepeatGuardPlugin.scope_of``: parallel branches and loop iterations apart). The guard's
state lives in the session state under ``STATE_KEY`` and keys derived from it (plain JSON, small
deltas, written through ADK's state delta), so every session service persists it:
``DatabaseSessionService`` on SQLite or Postgres shares it across processes. ``stop_of(session,
invocation_id)`` says how the guard stopped a turn; ``refusal_of(tool_response)`` tells a refusal from a
tool's result in your own callbacks.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import model_view, read_only_hint, tool_call
from .guard import FailureCheck, Refused, RepeatGuardPlugin, Scope, refusal_of, stop_response
from .state import STATE_KEY, STOP_METADATA, read_events, read_state, stop_of, write_state

__all__ = [
    "STATE_KEY",
    "STOP_METADATA",
    "FailureCheck",
    "Policy",
    "Refused",
    "RepeatGuardPlugin",
    "Scope",
    "Stop",
    "StopReason",
    "TokenPrices",
    "model_view",
    "read_events",
    "read_only_hint",
    "read_state",
    "refusal_of",
    "stop_of",
    "stop_response",
    "tool_call",
    "write_state",
]

__version__ = "0.3.0"
