"""Where the guard's state lives: one ``GuardState`` per Gemini CLI session (its ``session_id``, also
``$GEMINI_SESSION_ID`` in the hook's environment), in the hook command's SQLite file (``repeat_hooks.kit.command``:
every hook process of every session on this machine shares it); ``stop_of`` reads how the guard ended a turn, for a
script that ran ``gemini -p`` (the CLI exits 0 whoever stopped it)."""

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
    not: the session a stream-json line names (parsed: its ``session_id``, as the ``init`` line has it), or a
    session id; read from the state file the hook command uses with ``environ`` (default: this process's) and
    ``project``'s settings. A ``RepeatGuardStopped``: its stop."""
    return session_stop(
        returned, key="session_id", output="a stream-json line of `gemini -p`", environ=environ, project=project
    )
