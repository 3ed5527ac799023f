"""Replay recorded trajectories through a policy: what it would have refused, and was that right.

A refused call does not run; the replay goes on with the recorded calls, as if the model had asked
again anyway. A refused call is **waste prevented** when its recorded result equals the last result the
model saw for that same call (same tool, same canonical arguments) in the turn, and **harmful** when it
differs (the model would have learned something new). A successful trajectory with any refusal or stop
is the false-alarm proxy: the task succeeded without help. Pure: no I/O; ``repeat_hooks.cli`` reads files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .call import ToolCall, call_key
from .policy import Policy
from .result import outcome_digest
from .state import GuardState

LOOP_RUNS = 3
"""A no-progress loop: one call (same tool, same arguments) returning the same outcome this many times in
a turn, other calls between or not; it is caught when the policy refused it by that run."""


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of a recorded trajectory, with its recorded outcome."""

    name: str
    arguments: Any = None
    result: Any = None
    ok: bool = True
    read_only: bool | None = None


Response = Sequence[RecordedCall]
"""The calls of one model response (parallel calls), in order."""
Turn = Sequence[Response]
"""One user turn: the model's responses that asked for tools, in order."""


@dataclass(frozen=True)
class Trajectory:
    """A recorded conversation: its turns and the benchmark's success label (``None``: unknown)."""

    id: str
    turns: Sequence[Turn]
    success: bool | None = None


@dataclass
class Tally:
    """What one policy did over a set of trajectories."""

    trajectories: int = 0
    successful: int = 0
    calls: int = 0
    refused: int = 0
    successful_with_refusal: int = 0
    """Successful trajectories in which the policy refused a call or stopped a turn: false alarms."""
    harmful: int = 0
    """Refused calls whose recorded result was new to the model."""
    harmful_in_successful: int = 0
    waste_prevented: int = 0
    """Refused calls whose recorded result repeated the last one the model saw."""
    turns: int = 0
    turns_stopped: int = 0
    loops: int = 0
    """Turns with a no-progress loop: a call returning the same outcome ``LOOP_RUNS`` times in the turn."""
    loops_caught: int = 0
    """Of those, turns where the policy refused the loop by its ``LOOP_RUNS``-th run."""
    examples: list[str] = field(default_factory=list)
    """Where harmful refusals happened (trajectory id, turn, tool), the first few."""

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


MAX_EXAMPLES = 20


def replay(policy: Policy, trajectories: Iterable[Trajectory], tally: Tally | None = None) -> Tally:
    """Replay ``trajectories`` through ``policy``, adding to ``tally`` (a new one if ``None``); returns it."""
    tally = Tally() if tally is None else tally
    for trajectory in trajectories:
        replay_one(policy, trajectory, tally)
    return tally


def replay_one(policy: Policy, trajectory: Trajectory, tally: Tally) -> None:
    """Replay one trajectory through ``policy`` into ``tally``.

    Each response is decided as one batch (``decide_tool_calls``), then the outcomes of the calls that ran
    are recorded. A refused call's recorded result is compared with the last one the model saw as the guard
    compares results (volatile tokens masked). Each response counts one model call (no figures: the
    time and cost budgets cannot be replayed from a corpus that has none).
    """
    state = GuardState()
    success = trajectory.success is True
    tally.trajectories += 1
    tally.successful += success
    alarmed = False
    for number, turn in enumerate(trajectory.turns):
        policy.start_turn(state)
        tally.turns += 1
        seen: dict[str, str] = {}  # full key -> the outcome the model last saw
        refused_at: set[int] = set()
        order: list[tuple[str, str]] = []  # (full key, outcome) of every recorded call, for loops
        stopped = False
        for response in turn:
            stopped = policy.decide_model_call(state) is not None or stopped
            policy.record_model_call(state)
            ran: list[tuple[ToolCall, RecordedCall, str, str]] = []
            tool_calls = [ToolCall(call.name, call.arguments, read_only=call.read_only) for call in response]
            decisions = policy.decide_tool_calls(state, tool_calls)
            for call, tool_call, decision in zip(response, tool_calls, decisions, strict=True):
                tally.calls += 1
                full = call_key(call.name, call.arguments)
                outcome = outcome_digest(call.ok, call.result)
                order.append((full, outcome))
                if decision is None:
                    ran.append((tool_call, call, full, outcome))
                    continue
                tally.refused += 1
                refused_at.add(len(order) - 1)
                if seen.get(full) == outcome:
                    tally.waste_prevented += 1
                    continue
                tally.harmful += 1
                tally.harmful_in_successful += success
                if len(tally.examples) < MAX_EXAMPLES:
                    tally.examples.append(f"{trajectory.id} turn {number}: {call.name}")
            for tool_call, call, full, outcome in ran:
                policy.record_tool_result(state, tool_call, ok=call.ok, result=call.result)
                seen[full] = outcome
        if any(turn):
            # the model's next call, for its answer: a stop there replaces the answer
            stopped = policy.decide_model_call(state) is not None or stopped
        tally.turns_stopped += stopped
        alarmed = alarmed or stopped or bool(refused_at)
        loop = _first_loop(order)
        if loop is not None:
            tally.loops += 1
            tally.loops_caught += any(index in refused_at for index in loop)
    tally.successful_with_refusal += success and alarmed


def _first_loop(order: list[tuple[str, str]]) -> list[int] | None:
    """The indexes of the first ``LOOP_RUNS`` runs of the first call that returned the same outcome
    ``LOOP_RUNS`` times in the turn (other calls may run between), or ``None``."""
    runs: dict[tuple[str, str], list[int]] = {}
    for index, run in enumerate(order):
        indexes = runs.setdefault(run, [])
        indexes.append(index)
        if len(indexes) == LOOP_RUNS:
            return indexes
    return None
