"""Helpers for the Claude Code adapter's tests: Claude Code's hook events as the CLI 2.1.332 writes them (``event``),
and the hook command run on one of them, in this process (``answer``) or as the CLI runs it (``command``)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repeat_hooks_claude_code import hook

SESSION = "b667f1d2-0793-4823-9f6a-e83b2e0b3d3b"
PROMPT_ID = "8a93d0f3-eb5f-4bda-bed6-506aa6409424"


def event(name: str, tool: str | None = None, tool_input: Any = None, **fields: Any) -> dict[str, Any]:
    """A hook event of session ``SESSION``, turn ``PROMPT_ID`` (fields as Claude Code 2.1.332 sends them)."""
    base: dict[str, Any] = {
        "session_id": SESSION,
        "transcript_path": f"/home/user/.claude/projects/-work/{SESSION}.jsonl",
        "cwd": "/work",
        "prompt_id": PROMPT_ID,
        "permission_mode": "default",
        "hook_event_name": name,
    }
    if tool is not None:
        base.update(tool_name=tool, tool_input=tool_input if tool_input is not None else {})
    return {**base, **fields}


@dataclass
class Answered:
    """The hook command's answer to one event: exit code, stdout (parsed JSON, or ``None`` for nothing), stderr."""

    code: int
    output: dict[str, Any] | None
    stderr: str

    @property
    def denied(self) -> bool:
        specific = (self.output or {}).get("hookSpecificOutput") or {}
        return specific.get("permissionDecision") == "deny"

    @property
    def reason(self) -> str:
        return str(((self.output or {}).get("hookSpecificOutput") or {}).get("permissionDecisionReason"))

    @property
    def ends(self) -> bool:
        return (self.output or {}).get("continue") is False


def answer(given: Mapping[str, Any] | bytes, home: Path, **env: str) -> Answered:
    """The hook's answer to ``given`` (an event, or raw stdin bytes), in this process, with ``HOME`` at ``home``."""
    raw = given if isinstance(given, bytes) else json.dumps(given).encode()
    out, err = io.StringIO(), io.StringIO()
    code = hook(stdin=io.BytesIO(raw), stdout=out, stderr=err, environ={"HOME": str(home), **env})
    text = out.getvalue()
    return Answered(code, json.loads(text) if text.strip() else None, err.getvalue())


def command(given: Mapping[str, Any] | bytes, home: Path, *args: str, **env: str) -> Answered:
    """``repeat-hooks hook claude-code`` (or ``repeat-hooks <args>``) run as the CLI runs it: a process of its own."""
    raw = given if isinstance(given, bytes) else json.dumps(given).encode()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "repeat-hooks"), *(args or ("hook", "claude-code"))],
        input=raw,
        capture_output=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "REPEAT_HOOKS_RESIDENT": "off", **env},
        timeout=60,
        check=False,
    )
    text = done.stdout.decode()
    return Answered(done.returncode, json.loads(text) if text.strip() else None, done.stderr.decode())
