"""A testing aid: the real Claude Code CLI, headless (``claude -p --output-format stream-json``), in an isolated home
with the hook command installed by ``repeat-hooks install claude-code``, against the scripted model server
(``repeat_hooks.kit.fake_messages``, which the Claude Agent SDK adapter's tests share). Not for production::

    def answer(request: dict) -> Reply:                # the Messages API request the CLI sent
        if steps(request, PROMPT) < 6:
            return [tool_use("Bash", {"command": "make test", "description": "Run the tests"})]
        return "Done."

    with FakeMessagesAPI(answer) as api:
        home = Home(tmp_path)                           # HOME, CLAUDE_CONFIG_DIR, a project folder, the state
        home.install()                                  # repeat-hooks install claude-code --user
        run = home.claude(api, PROMPT)                  # the CLI's exit code, stream-json lines, stderr
    run.result["terminal_reason"], run.system_messages, tool_results(api)

The CLI is the one the Claude Agent SDK's wheel bundles (``claude_agent_sdk/_bundled/claude``), or ``$CLAUDE_CLI``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repeat_hooks.kit.fake_messages import MODEL, FakeMessagesAPI, offline_env

from .guard import settings_file


def claude_cli() -> Path:
    """The Claude Code CLI to run: ``$CLAUDE_CLI``, else the one bundled in the Claude Agent SDK's wheel."""
    named = os.environ.get("CLAUDE_CLI")
    if named:
        return Path(named)
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no Claude Code CLI: pip install claude-agent-sdk (it bundles one), or set CLAUDE_CLI")
    return Path(spec.origin).parent / "_bundled" / "claude"


@dataclass
class Run:
    """One headless run of the CLI: its exit code, its stream-json lines (parsed) and its stderr."""

    code: int
    lines: list[dict[str, Any]]
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        """The run's ``result`` line (``terminal_reason``, ``result``, ``is_error``...)."""
        found = [line for line in self.lines if line.get("type") == "result"]
        assert found, f"the CLI printed no result line (exit {self.code}): {self.stderr[-2000:]}"
        return found[-1]

    @property
    def system_messages(self) -> list[str]:
        """What hooks said to the user (``systemMessage``): stream-json's ``informational`` system lines."""
        return [
            str(line.get("content"))
            for line in self.lines
            if line.get("type") == "system" and line.get("subtype") == "informational"
        ]


class Home:
    """An isolated user: ``HOME`` (so the hook's settings and state live under it: ``~/.config/repeat-hooks``,
    ``~/.local/state/repeat-hooks``), ``CLAUDE_CONFIG_DIR`` (``~/.claude``, the user settings the hook is installed
    in, and the transcripts) and a ``project`` folder the CLI runs in."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.config = self.root / ".claude"
        self.project = self.root / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        self.config.mkdir(parents=True, exist_ok=True)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the hook command and of ``repeat-hooks``: this one with ``HOME`` and
        ``CLAUDE_CONFIG_DIR`` here and none of the variables that would point elsewhere; no resident hook server
        (``REPEAT_HOOKS_RESIDENT=off``) unless ``extra`` names its folder."""
        kept = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("XDG_", "REPEAT_HOOKS_", "CLAUDE", "ANTHROPIC"))
        }
        resident = {"REPEAT_HOOKS_RESIDENT": "off"}  # each hook call in its own process, unless a test starts one
        return {**kept, "HOME": str(self.root), "CLAUDE_CONFIG_DIR": str(self.config), **resident, **extra}

    @property
    def settings(self) -> Path:
        """Claude Code's user settings file in this home."""
        return settings_file("user", self.env())

    @property
    def user_settings(self) -> Path:
        """The hook command's user settings file in this home (``~/.config/repeat-hooks/settings.json``)."""
        return self.root / ".config" / "repeat-hooks" / "settings.json"

    def repeat_hooks(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """``repeat-hooks <args>`` (the console command of this environment) run in the project, in this home."""
        command = [sys.executable, "-m", "repeat_hooks", *args]
        return subprocess.run(
            command, cwd=self.project, env=self.env(**extra), capture_output=True, text=True, timeout=60, check=False
        )

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``repeat-hooks install claude-code`` (the user's settings, by default); asserts it succeeded."""
        done = self.repeat_hooks("install", "claude-code", *args)
        assert done.returncode == 0, done.stderr
        return done

    def claude(
        self,
        api: FakeMessagesAPI,
        prompt: str,
        *,
        tools: Sequence[str] = ("Bash", "Read", "Write", "Edit"),
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
    ) -> Run:
        """``claude -p <prompt> --output-format stream-json --verbose`` in the project, against ``api``, with only
        ``tools`` (allowed without asking)."""
        environ = {**self.env(**dict(env or {})), **offline_env(api, self.root), "CLAUDE_CONFIG_DIR": str(self.config)}
        command = [str(claude_cli()), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", MODEL]
        command += ["--tools", ",".join(tools), "--allowedTools", *tools]
        done = subprocess.run(
            command, cwd=self.project, env=environ, capture_output=True, text=True, timeout=timeout, check=False
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return Run(done.returncode, lines, done.stderr)


def tool_results(api: FakeMessagesAPI) -> list[tuple[bool, str]]:
    """Every tool result the model was handed, in order, once each: whether it is an error, and its text."""
    seen: dict[str, tuple[bool, str]] = {}
    for request in api.model_requests():
        for message in request.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    seen.setdefault(str(block.get("tool_use_id")), (bool(block.get("is_error")), _text(block)))
    return list(seen.values())


def _text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, Mapping))
