"""Where the guard's state lives. No per-conversation state of CrewAI's reaches a tool hook, so each guarded object
(``Crew``, standalone ``Agent``, ``Flow``) carries a ``Book``: the turn's id, each agent's ``GuardState`` by role
(agents count apart), this turn's stops. A ``Flow`` also keeps the states in its own state (``repeat_hooks``: JSON
by role), which ``@persist`` saves; with ``store=`` they live in the store. And ``stop_of``."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from crewai.hooks.dispatch import HookAborted

import repeat_hooks
from repeat_hooks import GuardState, Stop, kit

STATE_KEY = "repeat_hooks"
"""The flow state's field (or key, for a dict state) holding the guard's states: ``{role: GuardState JSON}``; and the
attribute of the ``Book`` on a guarded object."""
MAX_AGENTS = 256
"""Agents (roles) whose states one guarded object keeps in memory; past it the least recently used is dropped."""


class GuardSetupError(repeat_hooks.GuardSetupError, HookAborted):
    """A setup the guard cannot work with. A ``HookAborted`` too: CrewAI's dispatcher swallows any other exception a
    hook raises (``hooks/dispatch.py:284``), and lets this one through to the caller, unretried
    (``agent/core.py:144``)."""

    def __init__(self, message: str) -> None:
        HookAborted.__init__(self, message, "RepeatGuard")


class RepeatGuardStopped(kit.GuardStopped, HookAborted):
    """The guard stopped the turn by raising: with ``on_stop="raise"``, or for a stop due at a model call no tool
    call precedes (``before_llm_call`` can only raise: ``utilities/agent_utils.py:496``). A ``HookAborted``, which
    CrewAI hands the caller unretried; ``stop`` says why."""

    def __init__(self, stop: Stop, *details: Any) -> None:
        kit.GuardStopped.__init__(self, stop, *details)
        self.reason, self.source = self.args[0], "RepeatGuard"


@dataclass(eq=False)
class Seat:
    """One agent's in-process part: the response being decided (its history message, held so that its identity is
    not reused) and its calls, the next model call decided already, the model call in flight, the executor."""

    watch: kit.Stopwatch
    batch: kit.Batch = field(default_factory=kit.Batch)
    response: object = None  # the assistant message (a dict in the executor's history) decided
    ahead: bool = False  # the next model call was decided when the batch ended
    executor: Any = None


@dataclass(eq=False)
class Book:
    """What a guarded object carries: its turn (``None`` on a checkpoint resume: the stored turn goes on), its
    agents' states (kept here without a store), this turn's stops and each agent's ``Seat``, by role."""

    turn_id: str | None = None
    states: OrderedDict[str, GuardState] = field(default_factory=OrderedDict)
    stops: OrderedDict[str, Stop] = field(default_factory=OrderedDict)
    seats: OrderedDict[str, Seat] = field(default_factory=OrderedDict)
    conversation: str | None = None

    def seat(self, role: str, clock: Any) -> Seat:
        """The agent's seat (made on first use; bounded)."""
        seat = self.seats.get(role)
        if seat is None:
            seat = self.seats[role] = Seat(kit.Stopwatch(clock))
            _bound(self.seats)
        return seat

    def new_turn(self, turn_id: str | None) -> None:
        """A new kickoff: no stop yet, nothing pending."""
        self.turn_id = turn_id
        self.stops.clear()
        self.seats.clear()


def _bound(entries: OrderedDict[str, Any]) -> None:
    while len(entries) > MAX_AGENTS:
        entries.popitem(last=False)


def book_of(owner: Any) -> Book | None:
    """The ``Book`` a guard put on ``owner`` (a ``Crew``, ``Agent`` or ``Flow``), if any."""
    book = getattr(owner, f"_{STATE_KEY}", None)
    return book if isinstance(book, Book) else None


def put_book(owner: Any) -> Book:
    """The ``Book`` on ``owner``, put there first if need be (CrewAI's objects are pydantic models: it is set beside
    their fields, never one of them, so their serialisation and checkpoints do not carry it)."""
    book = book_of(owner)
    if book is None:
        book = Book()
        object.__setattr__(owner, f"_{STATE_KEY}", book)
    return book


def flow_states(flow: Any) -> dict[str, str] | None:
    """The flow state's ``repeat_hooks`` mapping (made if the state is a dict, or its field is empty); ``None`` if
    the state has no such field."""
    state = getattr(flow, "state", None)
    if isinstance(state, dict):
        held = state.setdefault(STATE_KEY, {})
    elif state is not None and STATE_KEY in type(state).model_fields:
        held = getattr(state, STATE_KEY)
    else:
        return None
    if not isinstance(held, dict):
        kind = type(held).__name__
        raise GuardSetupError(f"repeat-hooks: flow.state.{STATE_KEY} must be a dict[str, str], not {kind}")
    return held


class BookSlot:
    """One agent's state in a guarded object, as the kit's ``Slot``: in memory in its ``Book``, and in a flow, written
    to ``flow.state["repeat_hooks"][role]`` as JSON too (read back from there when the book has none: a flow
    restored by ``@persist`` in another process)."""

    def __init__(self, book: Book, role: str, flow: Any, parsed: kit.ParsedStates) -> None:
        self.book, self.role, self.flow, self.parsed = book, role, flow, parsed

    def read(self) -> GuardState:
        """The agent's state (a fresh one if none)."""
        raw = (flow_states(self.flow) or {}).get(self.role) if self.flow is not None else None
        if raw is not None:
            return self.parsed.take(raw, where=repr(self))
        return self.book.states.get(self.role) or GuardState()

    def write(self, state: GuardState) -> None:
        """Keep ``state`` in the book, and in the flow's state."""
        self.book.states[self.role] = state
        self.book.states.move_to_end(self.role)
        _bound(self.book.states)
        held = flow_states(self.flow) if self.flow is not None else None
        if held is not None:
            held[self.role] = raw = state.model_dump_json()
            self.parsed.keep(raw, state)

    def __repr__(self) -> str:
        return f"flow.state[{STATE_KEY!r}][{self.role!r}]" if self.flow is not None else f"<state of {self.role!r}>"


def stop_of(returned: Any, /, *, role: str | None = None) -> Stop | None:
    """How the guard stopped the latest turn; ``None`` if it did not. ``returned``: the ``Crew``, standalone ``Agent``
    or ``Flow`` the guard is attached to (its latest kickoff; ``role``: one agent's stop, else the first agent
    stopped), or the ``RepeatGuardStopped`` a run raised. CrewAI's outputs (``CrewOutput``, ``LiteAgentOutput``)
    carry only the stop's text, so they are refused with the right spelling, as is anything else."""
    if isinstance(returned, BaseException):
        return kit.GuardStopped.of(returned)
    book = book_of(returned)
    if book is None:
        output = type(returned).__name__
        hint = " (which holds only the stop's text): stop_of(crew) after crew.kickoff()" if "Output" in output else ""
        raise GuardSetupError(
            f"stop_of takes the Crew, Agent or Flow a RepeatGuard is attached to, or a RepeatGuardStopped; got {output}"
            + hint
        )
    return book.stops.get(role) if role is not None else next(iter(book.stops.values()), None)
