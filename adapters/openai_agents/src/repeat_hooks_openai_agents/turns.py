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
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents import Usage

    from repeat_hooks import GuardState

_turns: dict[int, tuple[weakref.ref[Usage], str]] = {}


def turn_of(usage: Usage) -> str | None:
    """The turn id of the run that owns ``usage``; ``None`` if no turn was started for it (no ``GuardHooks``)."""
    entry = _turns.get(id(usage))
    if entry is None or entry[0]() is not usage:
        return None
    return entry[1]


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
        if entry is not None and entry[0] is ref:
            del _turns[key]

    _turns[key] = (weakref.ref(usage, forget), turn_id)
