"""The adapter kit: what every adapter needs, written once, so that an adapter's own modules only translate.

- ``core``: ``GuardCore``, what every adapter's guard holds: the common keywords checked once (``policy``,
  ``store``, ``cost``, ``clock``, ``is_failure``, ``check_tools``, ``on_stop``, ``fail``), the one path to a
  conversation's state (a store key or the SDK's ``Slot``) with the outage policy and the observers told after
  the commit, a caller's ``request(conversation_id=..., turn_id=...)``, and ``GuardStopped``;
- ``batch``: one model response's calls as decided (``Batch``), found again by each per-call hook;
- ``calls``: a ``ToolCall`` with the effect hints of its tool's MCP annotations (``hints``, ``tool_call``);
- ``states``: the SDK's own place for a state (``Slot``), ``load`` naming it, ``ParsedStates``;
- ``setup``: the settings (``policy_from``) and the setup checks (``check_budgets``, ``check_feeds``,
  ``check_tool_names``), failing loudly with the right spelling;
- ``clock``, ``usage``: the ``Clock`` model calls are timed with, a ``Stopwatch``; ``TokenPrices`` and
  ``usage_tokens``, which read every supported SDK's usage object;
- ``conformance``: the scenarios every adapter passes on its SDK's real loop (imported on its own).
"""

from .batch import ANY, Batch, Decided
from .calls import hints, tool_call
from .clock import Clock, Stopwatch, monotonic
from .core import Fail, FailureCheck, GuardCore, GuardStopped, OnStop, Request, current_request, request
from .setup import check_budgets, check_feeds, check_tool_names, policy_from
from .states import ParsedStates, Slot, load
from .usage import CostOf, TokenPrices, usage_tokens

from ..state import load_state  # isort: skip  # the core's, for adapters reading a state the SDK kept

__all__ = [
    "ANY",
    "Batch",
    "Clock",
    "CostOf",
    "Decided",
    "Fail",
    "FailureCheck",
    "GuardCore",
    "GuardStopped",
    "OnStop",
    "ParsedStates",
    "Request",
    "Slot",
    "Stopwatch",
    "TokenPrices",
    "check_budgets",
    "check_feeds",
    "check_tool_names",
    "current_request",
    "hints",
    "load",
    "load_state",
    "monotonic",
    "policy_from",
    "request",
    "tool_call",
    "usage_tokens",
]
