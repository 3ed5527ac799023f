"""Where the guard's state lives: in the ADK session state (plain JSON under ``STATE_KEY`` and keys derived from
it, written through ADK's state delta), or with ``store=`` in the store under the session's key; and
``stop_of``, which reads a stop from what ``run_async`` handed the caller."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from google.adk.agents.context import Context
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from pydantic import ValidationError

from repeat_hooks import GuardSetupError, GuardState, StateCorrupt, Stop, StopReason
from repeat_hooks.decision import GuardEvent
from repeat_hooks.kit import GuardStopped, ParsedStates

STATE_KEY = "repeat_hooks:guard"
"""The session-state key of the invocation's state (its scopes' keys start with it)."""
EVENTS_SUFFIX = "#events"  # appended to the state key: the last EVENTS_KEPT refusals and stops
EVENTS_KEPT = 16
SCOPE_SEPARATOR = "@"  # between a key and a scope's name, a turn id and a scope's path
STOP_METADATA = "repeat_hooks_stop"
"""The ``custom_metadata`` key of the guard's final event: the stop's reason (``"ignored_refusals"``, ...); its
message is under ``STOP_METADATA + "_message"``."""
_MESSAGE = STOP_METADATA + "_message"


def conversation_key(session: Session, named: Callable[[str], str | None] = lambda id: id) -> str:
    """The store key of a session's state (``store=``): ``<app name>/<user id>/<session id>``; ``named``: the
    conversation a caller named instead of the session (``GuardCore.conversation_id``)."""
    return f"{session.app_name}/{session.user_id}/{named(session.id) or session.id}"


def _recover(key: str) -> str:
    return (
        f"to recover, write None under {key!r} (append an Event with actions=EventActions(state_delta="
        f"{{{key!r}: None}}) to the session: the guard starts its counts afresh), or give the plugin another "
        "state_key= if something else of yours owns that key"
    )


def read_state(session: Session, key: str = STATE_KEY) -> GuardState:
    """The guard's state in ``session`` under ``key`` (a scope's: ``key + "@" + scope``), with the kept refusals and
    stops (``events``); ``StateCorrupt`` names the key and the way out. (With ``store=``: ``store.load(key)``.)"""
    state = SessionSlot(ParsedStates(), session, key).read()
    state.events = read_events(session, key.split(SCOPE_SEPARATOR, 1)[0])
    return state


def read_events(session: Session, key: str = STATE_KEY) -> list[GuardEvent]:
    """The refusals and stops kept in ``session`` (the last ``EVENTS_KEPT``), oldest first."""
    try:
        return [GuardEvent.model_validate(item) for item in session.state.get(key + EVENTS_SUFFIX) or ()]
    except (ValidationError, TypeError) as error:
        where = key + EVENTS_SUFFIX
        reason = str(error).splitlines()[0]
        raise StateCorrupt(
            f"repeat-hooks: session state {where!r} holds no repeat-hooks events ({reason}); {_recover(where)}"
        ) from error


def compact(state: GuardState) -> dict[str, Any]:
    """What is written of ``state``: its turn, its digest-key fingerprint, and the delivery ids of its current
    model response (the only ones the core looks up); no events (those go under ``#events``)."""
    turn = state.turn
    current = f"@{turn.number}.{turn.responses}"
    raw = state.model_dump(mode="json", exclude={"events", "deliveries"})
    deliveries = state.deliveries  # only the current response's are read back (each unpacked from its text)
    raw["deliveries"] = {ident: list(deliveries[ident]) for ident in deliveries if ident.endswith(current)}
    return raw


class SessionSlot:
    """One guard state in an ADK session, as the kit's ``Slot``: read through the parsed cache, written into the
    callback context's ``state`` or into an event's ``state_delta`` (``target``), which ADK persists with the
    event it appends next."""

    __slots__ = ("cache", "key", "session", "target")

    def __init__(self, cache: ParsedStates, session: Session, key: str, target: Context | Event | None = None) -> None:
        self.cache, self.session, self.key, self.target = cache, session, key, target

    def read(self, *, peek: bool = False) -> GuardState:
        raw = self.session.state.get(self.key)
        try:
            return (self.cache.peek if peek else self.cache.take)(raw, where=f"session state {self.key!r}")
        except StateCorrupt as error:
            raise StateCorrupt(f"{error}; {_recover(self.key)}") from error

    def write(self, state: GuardState) -> None:
        raw = compact(state)
        target = self.target
        first: Any = target.state if isinstance(target, Context) else self.session.state
        delta = target.actions.state_delta if isinstance(target, Event) else None
        if state.events:  # moved out of the state, to the session's kept events
            events_key = self.key.split(SCOPE_SEPARATOR, 1)[0] + EVENTS_SUFFIX
            kept = self.session.state.get(events_key)
            kept = [*(kept if isinstance(kept, list) else ()), *(e.model_dump(mode="json") for e in state.events)]
            state.events.clear()
            first[events_key] = kept[-EVENTS_KEPT:]
            if delta is not None:
                delta[events_key] = kept[-EVENTS_KEPT:]
        first[self.key] = raw
        if delta is not None:
            delta[self.key] = raw
        self.cache.keep(raw, state)

    def __repr__(self) -> str:
        return f"session state {self.key!r}"


def stop_metadata(stop: Stop) -> dict[str, str]:
    """The ``custom_metadata`` of the guard's final event: the whole ``Stop``."""
    return {STOP_METADATA: stop.reason.value, _MESSAGE: stop.message}


def stop_of(
    returned: Event | Sequence[Event] | Session | BaseException | None = None,
    /,
    *old: Any,
    invocation_id: str | None = None,
    session: Session | None = None,
    key: str | None = None,
) -> Stop | None:
    """How the guard stopped an invocation, read from what ``run_async`` handed you: its final ``Event`` (or the
    events, or the ``Session``: its latest invocation, or ``invocation_id``'s), or the error it raised with
    ``on_stop="raise"``; ``None`` if the guard did not stop it; ``GuardSetupError`` for anything else. Works with
    ``store=`` too: the final event holds the whole ``Stop`` (``custom_metadata``). 0.2's ``stop_of(session,
    invocation_id, key)`` (``session=``, ``key=``) still works, with a ``DeprecationWarning``."""
    if len(old) > 2:
        raise TypeError("stop_of(session, invocation_id=...) takes one positional argument, what run_async handed you")
    if old or session is not None or key is not None:
        message = "stop_of(session, invocation_id, key) is deprecated: use stop_of(session, invocation_id=...) (the"
        warnings.warn(f"{message} stop is read from the events, whatever the state key)", DeprecationWarning, 2)
        returned = session if session is not None else returned
        invocation_id = old[0] if old else invocation_id
    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    if not isinstance(returned, Event | Session | Sequence) or isinstance(returned, str | bytes):
        wants = "stop_of takes what run_async handed you (its final Event, events, Session) or a RepeatGuardStopped"
        raise GuardSetupError(f"{wants}; got {type(returned).__name__}")
    events = [returned] if isinstance(returned, Event) else list(getattr(returned, "events", returned))
    if invocation_id is None and events:
        invocation_id = events[-1].invocation_id
    for event in reversed(events):
        metadata = event.custom_metadata or {}
        if event.invocation_id == invocation_id and STOP_METADATA in metadata:
            parts = event.content.parts if event.content is not None else None
            text = metadata.get(_MESSAGE) or "".join(part.text or "" for part in parts or [])
            try:
                return Stop(message=text, reason=StopReason(metadata[STOP_METADATA]))
            except ValueError:
                return None
    return None
