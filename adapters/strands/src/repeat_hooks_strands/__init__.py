"""repeat-hooks for Strands Agents (``strands-agents`` 1.62): ``Agent(hooks=[RepeatGuardHooks()])`` guards the
agent (its state in ``agent.state``, saved by its session manager, or with ``store=`` in a shared ``StateStore``),
and ``stop_of(agent(...))`` says how the guard ended the turn, if it did. See the README."""

from __future__ import annotations

from typing import Any

from repeat_hooks import Policy, Stop, StopReason, TokenPrices, kit

from . import calls
from .guard import GuardSetupError, RepeatGuardHooks, RepeatGuardStopped
from .state import STATE_KEY, STOP_KEY, TURN_KEY, read_state, stop_of

__all__ = [
    "STATE_KEY",
    "STOP_KEY",
    "TURN_KEY",
    "GuardSetupError",
    "Policy",
    "RepeatGuardHooks",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "read_state",
    "stop_of",
]

__version__ = "0.3.0"


def _hints(tool: Any) -> dict[str, bool]:
    return kit.hints(calls.mcp_annotations(tool))


def _write_state(agent: Any, state: Any, key: str = STATE_KEY) -> None:
    agent.state.set(key, state.model_dump_json())


__getattr__ = kit.moved(
    __name__,
    {
        "hints": ("repeat_hooks.kit.hints(repeat_hooks_strands.calls.mcp_annotations(tool))", lambda: _hints),
        **{name: f"{__name__}.calls:{name}" for name in ("tool_call", "model_view", "succeeded")},
        "write_state": ("agent.state.set(STATE_KEY, state.model_dump_json())", lambda: _write_state),
    },
)
"""The names 0.3 moved out of the front door, and their new spelling: one release more, with a warning."""
