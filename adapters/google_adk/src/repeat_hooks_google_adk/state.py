"""Where the guard's state lives: in the ADK session state, as plain JSON under a few keys.

The plugin never keeps counters of its own. Every callback reads the ``GuardState`` it needs from the
session it is called for and writes it back through the callback context's ``state`` (or, for the
decisions taken when the model's response arrives, into that event's ``state_delta``), so the change
rides on the event ADK appends next and every session service (in memory, SQLite,
``DatabaseSessionService`` on Postgres, Vertex AI) persists it with that event.

The keys (``key`` is ``STATE_KEY`` unless the plugin was given another ``state_key``):

- ``key``: the invocation's state: its budgets (model calls, seconds, cost), its stop, and the counts of
  the calls made outside any parallel branch or loop (a single-agent app has only this one).
- ``key + "@" + scope``: the counts of one scope (``scope_of``): a ``ParallelAgent`` branch, a
  ``LoopAgent``'s current iteration. Its ``turn.id`` is ``<invocation id>@<scope with iteration>``.
- ``key + "#events"``: the last ``EVENTS_KEPT`` refusals and stops (``GuardEvent`` dicts), written only
  when one is added.

Each write is small: a state keeps its current turn and only the delivery ids of its current model
response (the only ones the guard looks up), never the history of earlier turns, which lives under
``#events`` (and, for a stop, in the stop event itself: ``stop_of`` reads it back from there too).

The keys hold a ``:`` so that an agent's declared ``state_schema`` leaves them alone (ADK validates only
unprefixed keys), and none is a ``temp:`` key, which ADK would drop before persisting.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.context import Context
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from pydantic import ValidationError

from repeat_hooks import GuardState, StateCorrupt, Stop, StopReason
from repeat_hooks.decision import GuardEvent
from repeat_hooks.kit import load_state

STATE_KEY = "repeat_hooks:guard"
"""The session-state key the guard's invocation state is kept under (its scopes' keys start with it)."""
EVENTS_SUFFIX = "#events"
"""Appended to the state key: where the last refusals and stops are kept."""
SCOPE_SEPARATOR = "@"
"""Between the state key and a scope's name, and between an invocation id and a scope in a turn id."""
EVENTS_KEPT = 16
"""Refusals and stops kept in the session state (the oldest dropped first)."""
STOP_METADATA = "repeat_hooks_stop"
"""The ``custom_metadata`` key of the guard's final event: the stop reason (``"ignored_refusals"``, ...)."""


def _recover(key: str) -> str:
    return (
        f"to recover, write None under {key!r} (append an Event with actions=EventActions(state_delta="
        f"{{{key!r}: None}}) to the session: the guard starts its counts afresh), or give the plugin another "
        "state_key= if something else of yours owns that key"
    )


def read_state(session: Session, key: str = STATE_KEY) -> GuardState:
    """The guard's invocation state in ``session`` (a fresh ``GuardState`` if it has none yet), a copy of its
    own, with the kept refusals and stops (``events``).

    For a scope's counts, pass its key (``key + "@" + scope``). Raises ``repeat_hooks.StateCorrupt``, naming
    the key and saying how to recover, when the value there is not a guard state (something else wrote to
    the key): the guard never guesses counts.
    """
    state = _parse(session.state.get(key), key)
    base = key.split(SCOPE_SEPARATOR, 1)[0]
    state.events = read_events(session, base)
    return state


def read_events(session: Session, key: str = STATE_KEY) -> list[GuardEvent]:
    """The refusals and stops kept in ``session`` (the last ``EVENTS_KEPT``), oldest first."""
    events_key = key + EVENTS_SUFFIX
    raw = session.state.get(events_key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise StateCorrupt(
            f"repeat-hooks: session state {events_key!r} is a {type(raw).__name__}, not a list; " + _recover(events_key)
        )
    try:
        return [GuardEvent.model_validate(item) for item in raw]
    except ValidationError as error:
        raise StateCorrupt(
            f"repeat-hooks: session state {events_key!r} holds something other than repeat-hooks events "
            f"({str(error).splitlines()[0]}); " + _recover(events_key)
        ) from error


def write_state(context: Context, state: GuardState, key: str = STATE_KEY) -> None:
    """Write ``state`` through ``context.state``: into the session now, and into the delta of the event
    ADK appends next, which persists it. Its events go under ``key + "#events"``."""
    context.state[key] = compact(state)
    if state.events:
        context.state[key + EVENTS_SUFFIX] = [event.model_dump(mode="json") for event in state.events[-EVENTS_KEPT:]]


def stop_of(session: Session, invocation_id: str, key: str = STATE_KEY) -> Stop | None:
    """How the guard stopped invocation ``invocation_id`` of ``session`` (a turn is one invocation); ``None``
    if it did not. Read from the invocation state, the kept events, or else the stop event itself (the
    final event whose ``custom_metadata[STOP_METADATA]`` is the reason), while the session keeps it."""
    stop = _parse(session.state.get(key), key).stop_of(invocation_id)
    if stop is not None:
        return stop
    scoped = invocation_id + SCOPE_SEPARATOR
    for event in reversed(read_events(session, key)):
        if (
            event.kind == "stop"
            and event.turn_id is not None
            and (event.turn_id == invocation_id or event.turn_id.startswith(scoped))
        ):
            return event.as_stop()
    for item in reversed(session.events):
        metadata = item.custom_metadata or {}
        if item.invocation_id == invocation_id and STOP_METADATA in metadata and item.content is not None:
            text = "".join(part.text or "" for part in item.content.parts or [])
            try:
                return Stop(message=text, reason=StopReason(metadata[STOP_METADATA]))
            except ValueError:
                return None
    return None


def compact(state: GuardState) -> dict[str, Any]:
    """What is written of ``state``: its turn, its digest-key fingerprint, and the delivery ids of its current
    model response (the only ones the core looks up: ``<call id>@<turn>.<response>``); no events (those go
    under ``#events``)."""
    turn = state.turn
    current = f"@{turn.number}.{turn.responses}"
    raw = state.model_dump(mode="json", exclude={"events", "deliveries"})
    raw["deliveries"] = {
        delivery_id: list(delivery)
        for delivery_id, delivery in state.deliveries.items()
        if delivery_id.endswith(current)
    }
    return raw


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

    Events the core adds to a state are moved out of it when it is written (to ``key + "#events"``).
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._entries: dict[int, tuple[Any, GuardState]] = {}

    def read(self, session: Session, key: str) -> GuardState:
        """The guard's state in ``session`` under ``key``, for the caller to change and then ``write``."""
        raw = session.state.get(key)
        entry = self._entries.pop(id(raw), None)
        if entry is not None and entry[0] is raw:
            return entry[1]
        return _parse(raw, key)

    def peek(self, session: Session, key: str) -> GuardState:
        """The guard's state in ``session`` under ``key``, to read only: a staged state stays staged."""
        raw = session.state.get(key)
        entry = self._entries.get(id(raw))
        if entry is not None and entry[0] is raw:
            return entry[1]
        return _parse(raw, key)

    def write(self, context: Context, state: GuardState, key: str) -> None:
        """``write_state``, remembering the dict written as ``state`` parsed."""
        raw = compact(state)
        context.state[key] = raw
        self._flush_events(context.session, state, key, context.state)
        self._remember(raw, state)

    def write_event(self, session: Session, event: Event, state: GuardState, key: str) -> None:
        """Write ``state`` into ``session`` and into ``event``'s state delta, for an event on its way to the
        session service (which persists the delta with it)."""
        raw = compact(state)
        session.state[key] = raw
        event.actions.state_delta[key] = raw
        self._flush_events(session, state, key, session.state, event.actions.state_delta)
        self._remember(raw, state)

    def stage(self, context: Context, state: GuardState, key: str) -> None:
        """Keep ``state`` (changed) as the session's current guard state, to be written by the next
        ``write``; with nothing in the session yet, ``write`` it now."""
        raw = context.session.state.get(key)
        if raw is None or state.events:
            self.write(context, state, key)
        else:
            self._remember(raw, state)

    def _flush_events(self, session: Session, state: GuardState, key: str, *targets: Any) -> None:
        """Move the events the core added to ``state`` into the session's kept events."""
        if not state.events:
            return
        events_key = key.split(SCOPE_SEPARATOR, 1)[0] + EVENTS_SUFFIX
        kept = session.state.get(events_key)
        kept = list(kept) if isinstance(kept, list) else []
        kept.extend(event.model_dump(mode="json") for event in state.events)
        kept = kept[-EVENTS_KEPT:]
        for target in targets:
            target[events_key] = kept
        state.events.clear()

    def _remember(self, raw: Any, state: GuardState) -> None:
        entries = self._entries
        if len(entries) >= self.size:
            del entries[next(iter(entries))]
        entries[id(raw)] = (raw, state)


def _parse(raw: Any, key: str) -> GuardState:
    try:
        return load_state(raw)
    except StateCorrupt as error:
        raise StateCorrupt(f"repeat-hooks: session state {key!r}: {error}; " + _recover(key)) from error.__cause__
