"""Which turn a run belongs to: one ``Runner.run`` call is one turn, whatever happens inside it.

The SDK fires ``on_agent_start`` at the start of a run, again after every handoff, again when a
saved ``RunState`` resumes, and inside every nested run of an agent used as a tool. Only the first
starts a turn. The adapter tells them apart by the run's ``Usage`` object, which the SDK keeps for the
whole run (``run_context.py``: ``RunContextWrapper.usage``), shares with nested agent-as-tool runs
(``agent.py``: ``ToolContext(usage=context.usage)``) and restores from a saved ``RunState``:

- a ``Usage`` object already seen: a handoff or a nested run, same turn;
- a new ``Usage`` object that has recorded model work (requests or tokens): a resumed run, same turn;
- a new, empty ``Usage`` object: a new run, so a new turn (ids ``turn-1``, ``turn-2``, ...: deterministic,
  so a Temporal replay decides the same).

The turn id is remembered per ``Usage`` object (weakly: nothing outlives the run) and passed to every
rule of the core, which resets lazily when it sees a new id and does nothing for the current one.

``turn_in_run`` is what every guarded callback asks: it raises when the run has no turn (no
``GuardHooks``) or when another run has started a turn on the same guard since (one guard shared by
two concurrent runs, which would otherwise reset each other's counts back and forth).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, NoReturn

from .errors import NO_HOOKS, ONE_GUARD_PER_CONVERSATION, GuardSetupError

if TYPE_CHECKING:
    from agents import Usage

    from repeat_hooks import GuardState, StopRepeatedCalls


class _Run:
    """What the adapter remembers of one run: its turn, and the calls its guard refused."""

    __slots__ = ("error", "refused", "turn_id", "usage")

    def __init__(self, usage: weakref.ref[Usage], turn_id: str) -> None:
        self.usage = usage
        self.turn_id = turn_id
        self.refused: set[str] = set()
        self.error: GuardSetupError | None = None


_turns: dict[int, _Run] = {}


def _run_of(usage: Usage) -> _Run | None:
    entry = _turns.get(id(usage))
    if entry is None or entry.usage() is not usage:
        return None
    return entry


def turn_of(usage: Usage) -> str | None:
    """The turn id of the run that owns ``usage``; ``None`` if no turn was started for it (no ``GuardHooks``)."""
    entry = _run_of(usage)
    return None if entry is None else entry.turn_id


def turn_in_run(guard: StopRepeatedCalls, usage: Usage, *, resumed: bool = False) -> str:
    """The turn of the run that owns ``usage``, checked against its guard; fires in every guarded callback.

    Raises ``GuardSetupError`` when the run has no turn (it runs without ``GuardHooks``), unless
    ``resumed``: a call a human approved runs, on resume, before the run's ``on_agent_start``; it
    belongs to the guard's saved turn. Raises it too when the guard's current turn is another run's
    (two runs share one guard): the older run fails at its next step, the newer keeps clean counts.
    """
    entry = _run_of(usage)
    current = guard.state.turn_id
    if entry is None:
        if resumed and current is not None:
            return current
        raise GuardSetupError(NO_HOOKS)
    if entry.error is not None:
        raise entry.error
    if entry.turn_id != current:
        fail(usage, GuardSetupError(ONE_GUARD_PER_CONVERSATION.format(old=entry.turn_id, new=current)))
    return entry.turn_id


def fail(usage: Usage, error: GuardSetupError) -> NoReturn:
    """Raise ``error``, and raise it again at the run's next guarded step.

    An agent used as a tool turns an exception of its nested run into the tool's error text
    (``as_tool(failure_error_function=...)``), which would hide the mistake; the nested run shares
    the outer run's ``Usage``, so the outer run raises it at its next step.
    """
    entry = _run_of(usage)
    if entry is not None and entry.error is None:
        entry.error = error
    raise error


def note_refused(usage: Usage, call_id: str) -> None:
    """Remember that the guard refused call ``call_id`` in the run that owns ``usage``."""
    entry = _run_of(usage)
    if entry is not None:
        entry.refused.add(call_id)


def was_refused(usage: Usage, call_id: str | None) -> bool:
    """``True`` when the guard refused call ``call_id`` in the run that owns ``usage``."""
    entry = _run_of(usage)
    return entry is not None and call_id is not None and call_id in entry.refused


def turn_for_run(usage: Usage, state: GuardState) -> str:
    """Fires at every ``on_agent_start``: the id of the turn this run is in, starting one if it is new."""
    known = turn_of(usage)
    if known is not None:
        return known
    if state.turn_id is not None and _has_worked(usage):
        turn_id = state.turn_id  # a resumed RunState: carry on with the saved turn
    else:
        number = state.turn + 1
        while f"turn-{number}" == state.turn_id:  # a state restored from elsewhere may use that id
            number += 1
        turn_id = f"turn-{number}"
    _remember(usage, turn_id)
    return turn_id


def _has_worked(usage: Usage) -> bool:
    return bool(usage.requests or usage.input_tokens or usage.output_tokens or usage.total_tokens)


def _remember(usage: Usage, turn_id: str) -> None:
    key = id(usage)

    def forget(ref: weakref.ref[Usage]) -> None:
        entry = _turns.get(key)
        if entry is not None and entry.usage is ref:
            del _turns[key]

    _turns[key] = _Run(weakref.ref(usage, forget), turn_id)
