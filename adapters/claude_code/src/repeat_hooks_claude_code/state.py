"""Where the guard's state lives: one ``GuardState`` per Claude Code session (its ``session_id``), and one per
sub-agent of it (``session_key``), in the hook command's SQLite file (``repeat_hooks.kit.command``: every hook
process of every session on this machine shares it); ``stop_of`` reads how the guard ended a turn, for a script
that ran ``claude -p`` and holds its stream-json ``result`` (Claude Code says only ``terminal_reason:
"hook_stopped"``, which any hook's stop gives)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repeat_hooks import Stop
from repeat_hooks.kit.command import session_stop


def session_key(session_id: str, agent_id: str | None = None) -> str:
    """The store key of a session's state (its id), or of its sub-agent's (``<session>/<agent>``)."""
    return session_id if agent_id is None else f"{session_id}/{agent_id}"


def stop_of(
    returned: Mapping[str, Any] | str | BaseException | None,
    /,
    *,
    turn_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    project: str | None = None,
) -> Stop | None:
    """How the guard ended a turn (``Stop.reason``, ``Stop.message``), or ``None`` if it did not: of the session
    a stream-json ``result`` line names (parsed: its ``session_id``), or a session id; its latest turn, or turn
    ``turn_id`` (a ``prompt_id``) while the state keeps its stop. Read from the state file the hook command uses
    with ``environ`` (default: this process's) and ``project``'s settings. A ``RepeatGuardStopped``: its stop."""
    return session_stop(
        returned,
        key="session_id",
        output="a stream-json result of `claude -p`",
        turn_id=turn_id,
        environ=environ,
        project=project,
    )
