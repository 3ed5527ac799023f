"""Where the guard's state lives: in the ADK session state, as plain JSON under one key.

The plugin never keeps counters of its own. Every callback reads the guard's ``GuardState`` from the
session it is called for (``session.state[STATE_KEY]``, the dict ``GuardState.model_dump(mode="json")``
gives) and writes it back through the callback context's ``state`` (or, for the decisions taken when the
model's response arrives, into that event's ``state_delta``), so the change rides on the event ADK
appends next and every session service (in memory, SQLite, ``DatabaseSessionService`` on Postgres,
Vertex AI) persists it with that event.

The key holds a ``:`` so that an agent's declared ``state_schema`` leaves it alone (ADK validates only
unprefixed keys), and it is not a ``temp:`` key, which ADK would drop before persisting.

``stop_of(session, invocation_id)`` is the one way to read afterwards how the guard stopped a turn.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.context import Context
from google.adk.events.event import Event
from google.adk.sessions.session import Session

from repeat_hooks import GuardState, StateCorrupt, Stop, load_state

STATE_KEY = "repeat_hooks:guard"
"""The session-state key the guard's state is kept under (JSON: ``GuardState.model_dump(mode="json")``)."""


def read_state(session: Session, key: str = STATE_KEY) -> GuardState:
    """The guard's state in ``session`` (a fresh ``GuardState`` if it has none yet), a copy of its own.

    Raises ``repeat_hooks.StateCorrupt`` naming the key, and saying how to recover, when the value there is
    not a guard state (something else wrote to the key): the guard never guesses counts.
    """
    return _parse(session.state.get(key), key)


def write_state(context: Context, state: GuardState, key: str = STATE_KEY) -> None:
    """Write ``state`` through ``context.state``: into the session now, and into the delta of the event
    ADK appends next, which persists it."""
    context.state[key] = state.model_dump(mode="json")


def stop_of(session: Session, invocation_id: str, key: str = STATE_KEY) -> Stop | None:
    """How the guard stopped invocation ``invocation_id`` of ``session`` (a turn is one invocation); ``None``
    if it did not (or the stop is no longer among the kept events)."""
    return read_state(session, key).stop_of(invocation_id)


class ParsedStates:
    """The states last written, parsed: reading the dict just written skips validating it again.

    A cache by identity: an entry is used only while the session holds the very dict object it was
    made from (ADK replaces a state value, never edits it in place, and every session loaded from
    storage holds new objects), and at most once: ``read`` takes the entry out, ``write`` puts one
    back, so a dict that is no longer current can never be read as the state that later changed.
    Bounded; the session state stays the only source of truth.

    ``stage`` keeps a changed state for the next ``read`` of the same session without writing it yet,
    for a change that the same event's next write is sure to carry (a callback whose partner callback
    runs next on the same context and writes).
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._entries: dict[int, tuple[Any, GuardState]] = {}

    def read(self, session: Session, key: str) -> GuardState:
        """The guard's state in ``session``, for the caller to change and then ``write``."""
        raw = session.state.get(key)
        entry = self._entries.pop(id(raw), None)
        if entry is not None and entry[0] is raw:
            return entry[1]
        return _parse(raw, key)

    def write(self, context: Context, state: GuardState, key: str) -> None:
        """``write_state``, remembering the dict written as ``state`` parsed."""
        raw = state.model_dump(mode="json")
        context.state[key] = raw
        self._remember(raw, state)

    def write_event(self, session: Session, event: Event, state: GuardState, key: str) -> None:
        """Write ``state`` into ``session`` and into ``event``'s state delta, for an event on its way to the
        session service (which persists the delta with it)."""
        raw = state.model_dump(mode="json")
        session.state[key] = raw
        event.actions.state_delta[key] = raw
        self._remember(raw, state)

    def stage(self, context: Context, state: GuardState, key: str) -> None:
        """Keep ``state`` (changed) as the session's current guard state, to be written by the next
        ``write``; with nothing in the session yet, ``write`` it now."""
        raw = context.session.state.get(key)
        if raw is None:
            self.write(context, state, key)
        else:
            self._remember(raw, state)

    def _remember(self, raw: Any, state: GuardState) -> None:
        entries = self._entries
        if len(entries) >= self.size:
            del entries[next(iter(entries))]
        entries[id(raw)] = (raw, state)


def _parse(raw: Any, key: str) -> GuardState:
    try:
        return load_state(raw)
    except StateCorrupt as error:
        raise StateCorrupt(f"repeat-hooks: session state {key!r}: {error}") from error.__cause__
