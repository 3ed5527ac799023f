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
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from repeat_hooks.kit import sandbox
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


class Run(sandbox.Run):
    """One headless run of the CLI: its exit code, its stream-json lines (parsed) and its stderr."""

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


class Home(sandbox.Home):
    """An isolated user (``repeat_hooks.kit.sandbox.Home``) with ``CLAUDE_CONFIG_DIR`` here too (``~/.claude``: the user
    settings the hook is installed in, and the transcripts)."""

    cli = "claude-code"
    prefixes = ("CLAUDE", "ANTHROPIC")

    def __init__(self, root: str | Path, *, resident: Path | None = None) -> None:
        super().__init__(root, resident=resident)
        self.config = self.root / ".claude"
        self.config.mkdir(parents=True, exist_ok=True)

    def own(self) -> dict[str, str]:
        return {"CLAUDE_CONFIG_DIR": str(self.config)}

    @property
    def settings(self) -> Path:
        """Claude Code's user settings file in this home."""
        return settings_file("user", self.env())

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
        environ = {**self.env(**dict(env or {})), **offline_env(api, self.root), **self.own()}
        command = [str(claude_cli()), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", MODEL]
        command += ["--tools", ",".join(tools), "--allowedTools", *tools]
        return Run(*self.run(command, environ, timeout))


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
