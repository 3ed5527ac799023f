"""The adapter kit: what every adapter needs, written once, so that an adapter's own modules only translate.

- ``core``: ``GuardCore``, what every adapter's guard holds: the common keywords checked once (``policy``,
  ``store``, ``cost``, ``clock``, ``is_failure``, ``check_tools``, ``on_stop``, ``fail``), the one path to a
  conversation's state (a store key or the SDK's ``Slot``) with the outage policy and the observers told after
  the commit, a caller's ``request(conversation_id=..., turn_id=...)``, and ``GuardStopped``;
  ``FEEDS`` (what every adapter feeds: outcomes and model calls; one that feeds more, a ``Feed``, says so);
- ``noted``, ``unnoted``: a result's text with the guard's warning after it (``Policy(warn=True)``), and without;
- ``batch``: one model response's calls as decided (``Batch``), found again by each per-call hook;
- ``calls``: a ``ToolCall`` with the effect hints of its tool's MCP annotations (``hints``, ``tool_call``);
- ``states``: the SDK's own place for a state (``Slot``), ``load`` naming it, ``ParsedStates``;
- ``setup``: the settings (``policy_from``) and the setup checks (``check_budgets``, ``check_feeds``,
  ``check_tool_names``), failing loudly with the right spelling;
- ``clock``, ``usage``: the ``Clock`` model calls are timed with, a ``Stopwatch``; ``TokenPrices`` and
  ``usage_tokens``, which read every supported SDK's usage object;
- ``beside``: what an adapter keeps beside an SDK object it does not own (``Beside``), by identity;
- ``moved``: a module ``__getattr__`` for the names an adapter moved, warning with the new spelling;
- ``conformance``: the scenarios every adapter passes on its SDK's real loop (imported on its own);
- ``command``: a coding CLI's hook command (one process per event: stdin, settings files, the SQLite store, the
  outage policy), which a CLI's adapter drives with its ``Hook`` protocol; ``resident``: the server that keeps the core
  loaded between hook calls, and the small client each call is while it runs; ``install``: its entries merged into and
  removed from the CLI's JSON settings file; ``fake_messages``: a scripted Anthropic Messages API on loopback, for
  the tests that run the Claude Code CLI; ``fake_models``: scripted Gemini and Responses APIs, for the tests that run
  the Gemini CLI and Codex; ``tool_server``: a conformance scenario's tools as an MCP server in the test process, which
  the CLI drivers hand their CLI (each imported on its own).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: a hook call's client loads nothing it does not use (``kit.resident``)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from .._moved import forwarder as moved
    from ..messages import noted, unnoted
    from ..state import load_state
    from ..stop_rules import Feed
    from .batch import ANY, Batch, Decided
    from .beside import Beside
    from .calls import hints, tool_call
    from .clock import Clock, Stopwatch, monotonic
    from .core import (
        COMMON,
        FEEDS,
        Fail,
        FailureCheck,
        GuardCore,
        GuardStopped,
        OnStop,
        Request,
        common,
        current_request,
        request,
    )
    from .setup import check_budgets, check_feeds, check_tool_names, policy_from
    from .states import ParsedStates, Slot, load
    from .usage import CostOf, TokenPrices, usage_tokens

_HOMES: dict[str, tuple[str, str]] = {
    "ANY": ("repeat_hooks.kit.batch", "ANY"),
    "Batch": ("repeat_hooks.kit.batch", "Batch"),
    "Beside": ("repeat_hooks.kit.beside", "Beside"),
    "COMMON": ("repeat_hooks.kit.core", "COMMON"),
    "Clock": ("repeat_hooks.kit.clock", "Clock"),
    "CostOf": ("repeat_hooks.kit.usage", "CostOf"),
    "Decided": ("repeat_hooks.kit.batch", "Decided"),
    "FEEDS": ("repeat_hooks.kit.core", "FEEDS"),
    "Fail": ("repeat_hooks.kit.core", "Fail"),
    "Feed": ("repeat_hooks.stop_rules", "Feed"),
    "FailureCheck": ("repeat_hooks.kit.core", "FailureCheck"),
    "GuardCore": ("repeat_hooks.kit.core", "GuardCore"),
    "GuardStopped": ("repeat_hooks.kit.core", "GuardStopped"),
    "OnStop": ("repeat_hooks.kit.core", "OnStop"),
    "ParsedStates": ("repeat_hooks.kit.states", "ParsedStates"),
    "Request": ("repeat_hooks.kit.core", "Request"),
    "Slot": ("repeat_hooks.kit.states", "Slot"),
    "Stopwatch": ("repeat_hooks.kit.clock", "Stopwatch"),
    "TokenPrices": ("repeat_hooks.kit.usage", "TokenPrices"),
    "check_budgets": ("repeat_hooks.kit.setup", "check_budgets"),
    "check_feeds": ("repeat_hooks.kit.setup", "check_feeds"),
    "check_tool_names": ("repeat_hooks.kit.setup", "check_tool_names"),
    "common": ("repeat_hooks.kit.core", "common"),
    "current_request": ("repeat_hooks.kit.core", "current_request"),
    "hints": ("repeat_hooks.kit.calls", "hints"),
    "load": ("repeat_hooks.kit.states", "load"),
    "monotonic": ("repeat_hooks.kit.clock", "monotonic"),
    "noted": ("repeat_hooks.messages", "noted"),
    "unnoted": ("repeat_hooks.messages", "unnoted"),
    "policy_from": ("repeat_hooks.kit.setup", "policy_from"),
    "request": ("repeat_hooks.kit.core", "request"),
    "tool_call": ("repeat_hooks.kit.calls", "tool_call"),
    "usage_tokens": ("repeat_hooks.kit.usage", "usage_tokens"),
    "load_state": ("repeat_hooks.state", "load_state"),
    "moved": ("repeat_hooks._moved", "forwarder"),
}
"""Where each name lives: the kit loads a module when one of its names is first asked for, so ``import repeat_hooks``
(which takes ``TokenPrices`` from ``usage``) loads nothing else of the kit."""

__all__ = [
    "ANY",
    "COMMON",
    "FEEDS",
    "Batch",
    "Beside",
    "Clock",
    "CostOf",
    "Decided",
    "Fail",
    "FailureCheck",
    "Feed",
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
    "common",
    "current_request",
    "hints",
    "load",
    "load_state",
    "monotonic",
    "moved",
    "noted",
    "policy_from",
    "request",
    "tool_call",
    "unnoted",
    "usage_tokens",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'repeat_hooks.kit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home[0]), home[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Every name of the kit (so ``help(repeat_hooks.kit)`` and completion show them, loading their modules)."""
    return sorted({*globals(), *__all__})
