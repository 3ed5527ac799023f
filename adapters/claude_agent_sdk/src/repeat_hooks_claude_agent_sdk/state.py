"""Where the guard's state lives: one ``GuardState`` per Claude Code session (its session id, kept by
``resume=session_id``; or the caller's ``request(conversation_id=...)``), and one per sub-agent of it
(``session_key``), in the guard's ``StateStore``; ``stop_of`` reads how the guard ended a turn."""

from __future__ import annotations

import warnings
from typing import Any

from claude_agent_sdk import ResultMessage

from repeat_hooks import GuardSetupError, GuardState, Stop
from repeat_hooks.kit import GuardStopped

from .stream import Guarded


def session_key(session_id: str, agent_id: str | None = None) -> str:
    """The store key of a session's state (its id, or the caller's), or of its sub-agent's (``<session>/<agent>``)."""
    return session_id if agent_id is None else f"{session_id}/{agent_id}"


async def stop_of(
    returned: ResultMessage | str | BaseException | None = None,
    /,
    *old: Any,
    guard: Guarded | None = None,
    turn_id: str | None = None,
    agent_id: str | None = None,
    session: ResultMessage | str | None = None,
) -> Stop | None:
    """How ``guard`` ended a turn (``Stop.reason``, ``Stop.message``), or ``None`` if it did not: the turn a
    ``ResultMessage`` ends (its ``terminal_reason`` is then ``"hook_stopped"`` and its ``result`` the stop message),
    or, for a session id, its latest turn; ``turn_id`` (a ``prompt_id``, or the caller's turn id): that turn, while
    the state keeps its stop. ``agent_id``: that sub-agent of the session instead (its run is its one turn). The
    ``RepeatGuardStopped`` the query raised: its stop (no guard needed). Anything else: ``GuardSetupError``.
    0.2's ``stop_of(guard, message, turn_id)`` and ``session=`` still work, with a ``DeprecationWarning``."""
    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    returned, guard, turn_id = _spelled("stop_of", returned, old, guard, turn_id, session)
    key, ended = _key(returned, guard, agent_id)
    return await guard.core.stop_of(key, turn_id if turn_id is not None else ended)


async def read_state(
    returned: ResultMessage | str, /, *old: Any, guard: Guarded | None = None, agent_id: str | None = None
) -> GuardState | None:
    """The guard's state (a copy) of the session a ``ResultMessage`` or a session id names, or of its sub-agent
    ``agent_id``; ``None`` if none. 0.2's ``read_state(guard, message)`` still works, with a ``DeprecationWarning``."""
    returned, guard, _ = _spelled("read_state", returned, old, guard, None, None)
    return await guard.store.load(_key(returned, guard, agent_id)[0])


def _key(returned: ResultMessage | str, guard: Guarded, agent_id: str | None) -> tuple[str, str | None]:
    """The store key of the session ``returned`` names (or of its sub-agent), and the turn a result seen ended."""
    session = returned.session_id if isinstance(returned, ResultMessage) else returned
    seen = guard.results.get(returned.uuid or "") if isinstance(returned, ResultMessage) else None
    key, ended = seen if seen is not None else (guard.core.conversation_id(session) or session, None)
    return (key, ended) if agent_id is None else (session_key(key, agent_id), None)


def _spelled(
    name: str, returned: Any, old: tuple[Any, ...], guard: Guarded | None, turn_id: str | None, session: Any
) -> tuple[ResultMessage | str, Guarded, str | None]:
    """0.3's arguments, from 0.2's ``name(guard, message[, turn_id])`` or ``name(guard=..., session=...)`` (with a
    ``DeprecationWarning``) or 0.3's; ``GuardSetupError`` for a message that is none, ``TypeError`` without a guard."""
    if session is not None or (guard is None and old and not isinstance(returned, ResultMessage | str)):
        warnings.warn(
            f"{name}(guard, message) is deprecated: use {name}(message, guard=guard)", DeprecationWarning, stacklevel=3
        )
        if session is None:
            guard, returned, old = returned, old[0], old[1:]
        else:
            guard, returned = guard or returned, session
        turn_id = old[0] if old and turn_id is None else turn_id
    elif old:
        raise TypeError(f"{name}() takes one positional argument, the ResultMessage (or a session id)")
    if not isinstance(returned, ResultMessage | str):
        raised = " (or the RepeatGuardStopped it raised)" if name == "stop_of" else ""
        got = type(returned).__name__
        raise GuardSetupError(f"{name} takes a ResultMessage of the query or a session id{raised}; got {got}")
    if guard is None:
        raise TypeError(f"{name}(message, guard=guard) needs the guard whose store holds the session")
    return returned, guard, turn_id
