"""Where the guard's state lives: one ``GuardState`` per Claude Code session, and one per sub-agent of it, in the
guard's ``StateStore``.

The key is the session id (``ResultMessage.session_id``, the hooks' ``session_id``): a session resumed with
``ClaudeAgentOptions(resume=session_id)`` keeps its id, so it goes on with its state, in any process that
shares the store (``repeat_hooks.stores.redis.RedisStore``). ``fork_session=True`` gives the fork a new id, and so a
state of its own, from scratch. A sub-agent (the ``Agent`` tool) has its own state under
``<session id>/<agent id>`` (its ``agent_id``, which the SDK's ``TaskStartedMessage`` gives as ``task_id``):
the store bounds these as it bounds sessions (``MemoryStore``'s least recently used go first, a
``RedisStore``'s expire). ``stop_of`` is the one way to read how the guard ended a turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from claude_agent_sdk import ResultMessage

from repeat_hooks import GuardState, Stop

if TYPE_CHECKING:
    from .guard import RepeatGuardHooks


def session_key(session_id: str, agent_id: str | None = None) -> str:
    """The store key of a session's state (its session id, as Claude Code gives it), or of its sub-agent
    ``agent_id``'s (``<session id>/<agent id>``)."""
    return session_id if agent_id is None else f"{session_id}/{agent_id}"


async def read_state(
    guard: RepeatGuardHooks, session: ResultMessage | str, *, agent_id: str | None = None
) -> GuardState | None:
    """The guard's state of a session (its id, or the ``ResultMessage`` of one of its turns), or of its
    sub-agent ``agent_id``; ``None`` if the store has none. A copy, for reading."""
    session_id = session.session_id if isinstance(session, ResultMessage) else session
    return await guard.store.load(session_key(session_id, agent_id))


async def stop_of(
    guard: RepeatGuardHooks, session: ResultMessage | str, turn_id: str | None = None, *, agent_id: str | None = None
) -> Stop | None:
    """How ``guard`` ended a turn of ``session`` (``Stop.reason``, ``Stop.message``), or ``None`` if it did not.

    ``session``: a turn's ``ResultMessage`` (that turn's stop), or a session id. Without ``turn_id``: for a
    ``ResultMessage`` that this process's guard saw, the turn it ended, else the session's latest turn; with
    ``turn_id`` (a ``prompt_id``), that turn. An earlier turn's stop is read while it is among the last 64
    events the state keeps. When the guard ended a turn, its ``ResultMessage`` has
    ``terminal_reason == "hook_stopped"`` and its ``result`` is ``stop.message``.

    ``agent_id``: how it ended that sub-agent of the session instead (its run is its one turn); the parent's
    ``ResultMessage`` is never a sub-agent's stop.
    """
    if agent_id is None and turn_id is None and isinstance(session, ResultMessage) and session.uuid is not None:
        turn_id = guard.result_turns.get(session.uuid)
    state = await read_state(guard, session, agent_id=agent_id)
    if state is None:
        return None
    return state.turn.stop if turn_id is None else state.stop_of(turn_id)
