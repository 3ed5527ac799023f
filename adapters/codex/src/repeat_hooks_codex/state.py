"""Where the guard's state lives: one ``GuardState`` per Codex session (its ``session_id``, the ``thread_id`` of
``codex exec --json``), in the hook command's SQLite file (``repeat_hooks.kit.command``: every hook process of every
session on this machine shares it); ``stop_of`` reads when the guard would have ended a turn (Codex lets no hook end
one: from then on every call of the turn is refused), for a script that ran ``codex exec``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repeat_hooks import Stop
from repeat_hooks.kit.command import session_stop


def stop_of(
    returned: Mapping[str, Any] | str | BaseException | None,
    /,
    *,
    environ: Mapping[str, str] | None = None,
    project: str | None = None,
) -> Stop | None:
    """How the guard ended the latest turn of a session (``Stop.reason``, ``Stop.message``), or ``None`` if it did
    not: the session a ``--json`` line names (parsed: its ``thread_id``, as ``thread.started`` has it), or a
    session id; read from the state file the hook command uses with ``environ`` (default: this process's) and
    ``project``'s settings. A ``RepeatGuardStopped``: its stop."""
    return session_stop(
        returned, key="thread_id", output="a --json line of `codex exec`", environ=environ, project=project
    )
