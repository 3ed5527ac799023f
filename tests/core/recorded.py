"""A tiny agent loop for the core tests: plays recorded model steps through a guard, as an adapter would.

Each step is one model call that asked for one tool call. ``finish`` is the model's final answer: an
accepted one (``ok=True``) ends the run as ``finished``; a refused one counts as a failed call (seed 002).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from repeat_hooks import StopRepeatedCalls, ToolCall


@dataclass(frozen=True)
class Step:
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    ok: bool = True
    seconds: float = 0.0
    cost_usd: float = 0.0


@dataclass
class Run:
    reason: str
    model_calls: int
    ran: list[str]
    model_seconds: float


def play(guard: StopRepeatedCalls, steps: list[Step], turn_id: str = "turn") -> Run:
    """Drive ``guard`` through ``steps``; returns how the run ended and after how many model calls."""
    guard.pre_agent_turn(turn_id=turn_id)
    ran: list[str] = []
    for number, step in enumerate(steps, start=1):
        stop = guard.pre_llm_call()
        if stop is not None:
            return Run(stop.reason.value, number - 1, ran, guard.state.turn.model_seconds)
        guard.post_llm_call(seconds=step.seconds, cost_usd=step.cost_usd)
        call = ToolCall(step.tool, step.arguments)
        if guard.pre_tool_call(call) is not None:
            continue
        ran.append(step.tool)
        guard.post_tool_call(call, ok=step.ok)
        if step.tool == "finish" and step.ok:
            return Run("finished", number, ran, guard.state.turn.model_seconds)
    stop = guard.pre_llm_call()
    return Run(stop.reason.value if stop else "out_of_steps", len(steps), ran, guard.state.turn.model_seconds)
