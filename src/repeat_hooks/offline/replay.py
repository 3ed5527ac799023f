"""Replay recorded trajectories through a policy: what it would have refused, and was that right.

A refused call does not run; the replay goes on with the recorded calls, as if the model had asked
again anyway. A refused call is **waste prevented** when its recorded result equals the last result the
model saw for that same call (same tool, same canonical arguments) in the turn, and **harmful** when it
differs (the model would have learned something new). A refused call is neither, and counted **unjudged**,
when its result or the last one the model saw for it was never recorded (``UNRECORDED``: a digest recording
of a call whose outcome never reached the recorder, or one the live guard refused before it ever ran). A
successful trajectory with any refusal or stop is the false-alarm proxy: the task succeeded without help.
Turns and calls are numbered from 1, as the recorder and OpenTelemetry number them. Pure: no I/O;
``repeat_hooks.offline.cli`` reads files.

The tally also keeps where refusals fell (by tool, by the call's position in its turn), the longest loops
and the first harmful refusals with the calls around them, for ``repeat_hooks.report``. It holds tool
names, trajectory ids and digests only, never a raw argument or result value (reports get shared), and
its memory is bounded: ``MAX_TOOLS`` tools, ``MAX_LOOPS`` loops, ``MAX_EXAMPLES`` harmful refusals.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from ..call import ToolCall, call_key, canonical_arguments
from ..policy import Policy
from ..result import outcome_digest
from ..state import GuardState

LOOP_RUNS = 3
"""A no-progress loop: one call (same tool, same arguments) returning the same outcome this many times in
a turn, other calls between or not; it is caught when the policy refused it by that run."""


class _Unrecorded:
    """The type of ``UNRECORDED``."""

    def __repr__(self) -> str:
        return "UNRECORDED"


UNRECORDED: Any = _Unrecorded()
"""A ``RecordedCall.result`` that was never recorded: the call is replayed without telling the policy its
outcome, and a refusal judged on it is neither harmful nor waste prevented (``Tally.unjudged``)."""


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of a recorded trajectory, with its recorded outcome."""

    name: str
    arguments: Any = None
    result: Any = None
    """What it returned; ``UNRECORDED`` when that was never recorded."""
    ok: bool = True
    read_only: bool | None = None
    refused: str | None = None
    """The rule the live guard refused it by (a digest recording's); its ``result`` is then what the same call
    last returned in its turn (what the guard judged), not anything it returned: no evidence for ``tune``."""


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

    def replayed_by(self, policy: Policy) -> Policy:
        """The policy that replays this trajectory as ``policy`` would decide it: ``policy`` itself for a full
        one; a digest recording (``repeat_hooks.offline.recording``) digests the field names ``policy`` ignores as it
        digests its fields, and raises ``NotReplayable`` where that cannot be exact."""
        return policy


class NotReplayable(ValueError):
    """Raised by ``replay_one`` for a trajectory that cannot be replayed exactly under the policy given."""


ROWS: tuple[tuple[str, str], ...] = (
    ("trajectories", "trajectories"),
    ("successful", "successful"),
    ("successful_with_refusal", "successful with a refusal or stop"),
    ("harmful_in_successful", "harmful refusals in successful"),
    ("harmful", "harmful refusals (all)"),
    ("waste_prevented", "waste prevented"),
    ("unjudged", "refusals unjudged (no result)"),
    ("refused", "calls refused"),
    ("warned", "results with a warning (warn=True)"),
    ("turns_stopped", "turns stopped"),
    ("loops_caught", "no-progress loops caught"),
)
"""The headline figures, in order, with their words: ``Tally`` fields (the table ``replay`` prints, the
page ``--html`` writes)."""

POSITIONS: tuple[tuple[int, int | None], ...] = (
    (1, 1),
    (2, 2),
    (3, 3),
    (4, 5),
    (6, 10),
    (11, 20),
    (21, 50),
    (51, None),
)
"""The buckets of a call's position in its turn (1 for its first call), first and last (``None``: no end)."""
MAX_TOOLS = 50
"""Tools counted one by one in ``Tally.refused_by_tool``; further tools add to ``Tally.refused_by_other_tools``."""
MAX_LOOPS = 10
"""The longest loops kept (``Tally.longest_loops``)."""
MAX_EXAMPLES = 20
"""The harmful refusals kept, with their context (``Tally.harmful_refusals``): the first ones met."""
CONTEXT_CALLS = 3
"""A harmful refusal's context: up to this many calls of its turn before it, and as many after."""


@dataclass
class Refusals:
    """Refused calls of one tool: how many, and how many of those were harmful (the others prevented waste)."""

    refused: int = 0
    harmful: int = 0


@dataclass
class Position:
    """The calls at positions ``first`` to ``last`` of their turn (1 for a turn's first call; ``last`` is
    ``None`` for no end): how many there were, how many were refused, and how many of those were harmful."""

    first: int
    last: int | None
    calls: int = 0
    refused: int = 0
    harmful: int = 0


@dataclass(frozen=True)
class Loop:
    """A no-progress loop: ``length`` runs of one call (same tool, same arguments) with the same outcome in
    turn ``turn`` (1 for the first) of trajectory ``trajectory``; ``refused`` of those runs were refused."""

    trajectory: str
    turn: int
    tool: str
    length: int
    refused: int


@dataclass(frozen=True)
class ContextCall:
    """One call around a harmful refusal: its position in the turn, tool name, and digests only.

    ``arguments`` is 8 hex characters of an unkeyed BLAKE2b of the canonical arguments, ``outcome`` the first
    8 of ``outcome_digest``: they tell calls apart on the page, but a short, guessable value (a PIN, a date)
    could be recovered from them by trying every candidate."""

    position: int
    tool: str
    arguments: str
    outcome: str
    ok: bool
    refused: bool


@dataclass(frozen=True)
class HarmfulRefusal:
    """A refused call whose recorded outcome was new to the model, with the calls around it in its turn
    (``turn`` and ``position`` count from 1).

    ``seen`` is the outcome digest (8 hex characters, as in ``ContextCall``) the model last saw for that call
    (``None``: it never ran in the turn); ``rule`` is the ``RefusalKind`` that refused it."""

    trajectory: str
    turn: int
    position: int
    tool: str
    rule: str
    seen: str | None
    context: tuple[ContextCall, ...]


def _positions() -> list[Position]:
    return [Position(first, last) for first, last in POSITIONS]


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
    unjudged: int = 0
    """Refused calls neither harmful nor waste prevented: their result, or the last one the model saw for that
    call, was never recorded (``UNRECORDED``)."""
    warned: int = 0
    """Results that carried the guard's note (``Policy(warn=True)``): the same call made next would be refused."""
    turns: int = 0
    turns_stopped: int = 0
    loops: int = 0
    """Turns with a no-progress loop: a call returning the same outcome ``LOOP_RUNS`` times in the turn."""
    loops_caught: int = 0
    """Of those, turns where the policy refused the loop by its ``LOOP_RUNS``-th run."""
    refused_by_tool: dict[str, Refusals] = field(default_factory=dict)
    """Refusals of each tool, for the first ``MAX_TOOLS`` tools refused."""
    refused_by_other_tools: Refusals = field(default_factory=Refusals)
    """Refusals of the tools past the first ``MAX_TOOLS``."""
    refused_by_position: list[Position] = field(default_factory=_positions)
    """Calls, refusals and harmful refusals by the call's position in its turn (``POSITIONS``)."""
    longest_loops: list[Loop] = field(default_factory=list)
    """The ``MAX_LOOPS`` longest loops, longest first (the first met first among equals)."""
    harmful_refusals: list[HarmfulRefusal] = field(default_factory=list)
    """The first ``MAX_EXAMPLES`` harmful refusals, each with its context (digests and tool names only)."""

    @property
    def examples(self) -> list[str]:
        """Where the first harmful refusals happened, one line each: ``"<trajectory> turn <n>: <tool>"``."""
        return [f"{refusal.trajectory} turn {refusal.turn}: {refusal.tool}" for refusal in self.harmful_refusals]

    def tools(self) -> list[tuple[str, Refusals]]:
        """``refused_by_tool``, most refused first (by name among equals)."""
        return sorted(self.refused_by_tool.items(), key=lambda item: (-item[1].refused, item[0]))

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict: each field, ``refused_by_tool`` as a list (``tools()``), and
        ``examples``."""
        figures = {name: _plain(getattr(self, name)) for name in self.__dataclass_fields__}
        figures["refused_by_tool"] = [{"tool": tool, **asdict(counts)} for tool, counts in self.tools()]
        figures["examples"] = self.examples
        return figures

    def _call_at(self, index: int) -> Position:
        """Count a call at ``index`` (0 for the first) in its turn; returns its ``Position`` bucket."""
        self.calls += 1
        position = self.refused_by_position[_position(index)]
        position.calls += 1
        return position

    def _harmful(self, position: Position, counts: Refusals, successful: bool) -> None:
        """Count a harmful refusal at ``position`` of the tool counted in ``counts``."""
        self.harmful += 1
        self.harmful_in_successful += successful
        position.harmful += 1
        counts.harmful += 1

    def _refused(self, tool: str, position: Position) -> Refusals:
        """Count a refusal of ``tool`` at ``position``; returns the tool's counts."""
        position.refused += 1
        counts = self.refused_by_tool.get(tool)
        if counts is None:
            if len(self.refused_by_tool) >= MAX_TOOLS:
                counts = self.refused_by_other_tools
            else:
                counts = self.refused_by_tool[tool] = Refusals()
        counts.refused += 1
        return counts

    def _add_loop(self, loop: Loop) -> None:
        if len(self.longest_loops) == MAX_LOOPS and loop.length <= self.longest_loops[-1].length:
            return
        at = next((i for i, kept in enumerate(self.longest_loops) if kept.length < loop.length), None)
        self.longest_loops.insert(len(self.longest_loops) if at is None else at, loop)
        del self.longest_loops[MAX_LOOPS:]


def printable(text: str) -> str:
    """``text`` safe to show an operator, on a terminal or a page: each character Python does not call
    printable (control characters, a newline too, bidi and zero-width marks, lone surrogates, separators
    other than the space) written as its escape, as ``repr`` writes it (``\\x1b``, ``\\u202e``, ``\\ud800``).
    Tool names and trajectory ids come from the files read: one that says ``\\x1b]0;...`` must not retitle
    the operator's terminal, nor one holding a lone surrogate crash the output. Printable text is returned
    as it is; the result is printable (so escaping it again changes nothing)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _position(index: int) -> int:
    """The ``POSITIONS`` bucket of the call at ``index`` (0 for the first) in its turn."""
    return next(b for b, (_, last) in enumerate(POSITIONS) if last is None or index < last)


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
    time and cost budgets cannot be replayed from a corpus that has none). Raises ``NotReplayable``, before
    counting anything, for a trajectory that cannot be replayed exactly under ``policy``. Observers
    (``repeat_hooks.observe``) hear nothing of it: its state never listens (a replay's decisions are no agent's).
    """
    _replay_turns(trajectory.replayed_by(policy), trajectory, tally)


def _replay_turns(policy: Policy, trajectory: Trajectory, tally: Tally) -> None:
    state = GuardState()
    success = trajectory.success is True
    tally.trajectories += 1
    tally.successful += success
    alarmed = False
    for number, turn in enumerate(trajectory.turns, start=1):
        policy.start_turn(state)
        tally.turns += 1
        seen: dict[str, str | None] = {}  # full key -> the outcome the model last saw (None: unrecorded)
        refused_at: set[int] = set()
        order: list[tuple[str, str]] = []  # (full key, outcome) of every recorded call, for loops
        recorded: list[RecordedCall] = []  # every recorded call, for the context of harmful refusals
        harmful: list[tuple[int, str, str | None]] = []  # (index, rule, outcome seen) of those kept
        stopped = False
        for response in turn:
            stopped = policy.decide_model_call(state) is not None or stopped
            policy.record_model_call(state)
            ran: list[tuple[ToolCall, RecordedCall, str, str | None]] = []
            tool_calls = [ToolCall(call.name, call.arguments, read_only=call.read_only) for call in response]
            decisions = policy.decide_tool_calls(state, tool_calls)
            for call, tool_call, decision in zip(response, tool_calls, decisions, strict=True):
                full, outcome = call_key(call.name, call.arguments), _outcome(call)
                order.append((full, outcome or f"unrecorded {len(order)}"))  # never one loop
                recorded.append(call)
                position = tally._call_at(len(order) - 1)
                if decision is None:
                    ran.append((tool_call, call, full, outcome))
                    continue
                tally.refused += 1
                counts = tally._refused(call.name, position)
                refused_at.add(len(order) - 1)
                if outcome is None or (full in seen and seen[full] is None):
                    tally.unjudged += 1
                    continue
                if seen.get(full) == outcome:
                    tally.waste_prevented += 1
                    continue
                tally._harmful(position, counts, success)
                if len(tally.harmful_refusals) + len(harmful) < MAX_EXAMPLES:
                    harmful.append((len(order) - 1, str(decision.reason), (seen.get(full) or "")[:8] or None))
            for tool_call, call, full, ran_outcome in ran:
                if ran_outcome is not None:  # an unrecorded outcome is not told (as the live guard was not)
                    policy.record_tool_result(state, tool_call, ok=call.ok, result=call.result)
                    tally.warned += policy.warning(state, tool_call) is not None
                seen[full] = ran_outcome
        if any(turn):
            # the model's next call, for its answer: a stop there replaces the answer
            stopped = policy.decide_model_call(state) is not None or stopped
        tally.turns_stopped += stopped
        alarmed = alarmed or stopped or bool(refused_at)
        _close_turn(tally, trajectory.id, number, recorded, order, refused_at, harmful)
    tally.successful_with_refusal += success and alarmed


def _outcome(call: RecordedCall) -> str | None:
    """The call's outcome as the guard compares it; ``None`` when it was not recorded."""
    return None if call.result is UNRECORDED else outcome_digest(call.ok, call.result)


def _close_turn(
    tally: Tally,
    trajectory: str,
    number: int,
    recorded: list[RecordedCall],
    order: list[tuple[str, str]],
    refused_at: set[int],
    harmful: list[tuple[int, str, str | None]],
) -> None:
    """Add a finished turn's harmful refusals (with their context) and its loop to ``tally``."""
    for index, rule, outcome_seen in harmful:
        context = tuple(
            _context_call(at, recorded[at], order[at][1], at in refused_at)
            for at in range(max(0, index - CONTEXT_CALLS), min(len(order), index + CONTEXT_CALLS + 1))
        )
        tool = recorded[index].name
        tally.harmful_refusals.append(HarmfulRefusal(trajectory, number, index + 1, tool, rule, outcome_seen, context))
    loop = _first_loop(order)
    if loop is not None:
        tally.loops += 1
        tally.loops_caught += any(index in refused_at for index in loop)
        runs = _longest_run(order)
        refused = sum(index in refused_at for index in runs)
        tally._add_loop(Loop(trajectory, number, recorded[runs[0]].name, len(runs), refused))


def _context_call(index: int, call: RecordedCall, outcome: str, refused: bool) -> ContextCall:
    text = canonical_arguments(call.arguments).encode("utf-8", "surrogatepass")
    arguments = hashlib.blake2b(text, digest_size=4).hexdigest()
    shown = "?" if call.result is UNRECORDED else outcome[:8]
    return ContextCall(index + 1, call.name, arguments, shown, call.ok, refused)


def _longest_run(order: list[tuple[str, str]]) -> list[int]:
    """The indexes of the runs of the call that returned one outcome most often in the turn (the first to
    get there among equals)."""
    runs: dict[tuple[str, str], list[int]] = {}
    longest: list[int] = []
    for index, run in enumerate(order):
        indexes = runs.setdefault(run, [])
        indexes.append(index)
        if len(indexes) > len(longest):
            longest = indexes
    return longest


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
