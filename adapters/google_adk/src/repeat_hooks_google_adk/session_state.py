"""Where the guard's state lives: in the ADK session state, as plain JSON under one key.

The plugin never keeps counters of its own. Every callback reads the guard's ``GuardState`` from the
session it is called for (``session.state[STATE_KEY]``, the dict ``GuardState.model_dump(mode="json")``
gives) and writes it back through the callback context's ``state``, so the change rides on the event
ADK appends next (its ``actions.state_delta``) and every session service (in memory, SQLite,
``DatabaseSessionService`` on Postgres, Vertex AI) persists it with that event.

The key holds a ``:`` so that an agent's declared ``state_schema`` leaves it alone (ADK validates only
unprefixed keys), and it is not a ``temp:`` key, which ADK would drop before persisting.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.context import Context
from google.adk.sessions.session import Session

from repeat_hooks import GuardState, Stop

STATE_KEY = "repeat_hooks:guard"
"""The session-state key the guard's state is kept under (JSON: ``GuardState.model_dump(mode="json")``)."""


def read_state(session: Session, key: str = STATE_KEY) -> GuardState:
    """The guard's state in ``session`` (a fresh ``GuardState`` if it has none yet).

    Raises ``ValueError`` naming the key when the value there is not a guard state (something else
    wrote to the key): the guard never guesses counts.
    """
    raw: Any = session.state.get(key)
    if raw is None:
        return GuardState()
    try:
        return GuardState.model_validate(raw)
    except ValueError as error:
        raise ValueError(
            f"repeat-hooks: session state {key!r} does not hold a guard state (something else wrote it?): {error}"
        ) from error


def write_state(context: Context, state: GuardState, key: str = STATE_KEY) -> None:
    """Write ``state`` through ``context.state``: into the session now, and into the delta of the event
    ADK appends next, which persists it."""
    context.state[key] = state.model_dump(mode="json")


def stop_of(session: Session, invocation_id: str, key: str = STATE_KEY) -> Stop | None:
    """How the guard stopped invocation ``invocation_id`` of ``session``; ``None`` if it did not (or the
    stop is no longer among the kept events)."""
    return read_state(session, key).stop_of(invocation_id)
