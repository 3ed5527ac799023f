"""A testing aid: the real Codex CLI (0.169.0, from npm), headless (``codex exec --json``), in an isolated
``CODEX_HOME`` with the hook command installed by ``repeat-hooks install codex``, against the scripted Responses API
(``repeat_hooks.kit.fake_models.FakeResponsesAPI``, as ``[model_providers.fake]``). Not for production::

    def answer(request: dict, step: int) -> Reply:      # the request the CLI sent; responses with calls so far
        return [call("exec_command", {"cmd": "make test"})] if step < 6 else "Done."

    with FakeResponsesAPI(answer) as api:
        home = Home(tmp_path)                           # HOME, CODEX_HOME (config.toml), a git project, the state
        home.install()                                  # repeat-hooks install codex --user
        run = home.codex(api, PROMPT)                   # the CLI's exit code, --json lines, stderr
    run.code, tool_outputs(api)

Hooks run only with ``--dangerously-bypass-hook-trust`` here (a user trusts them once instead). The CLI is
``.cache/node_cli``'s native binary (``make node-clis``), or ``$CODEX_CLI``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repeat_hooks.kit import sandbox
from repeat_hooks.kit.fake_models import FakeResponsesAPI, node_cli, responses_outputs

from .guard import settings_file

MODEL = "gpt-5.1-codex"
"""The model the CLI asks for (the scripted API answers any)."""


def codex_cli() -> Path:
    """The Codex CLI: ``$CODEX_CLI``, else ``.cache/node_cli``'s native binary (``make node-clis``)."""
    named = os.environ.get("CODEX_CLI")
    if named:
        return Path(named)
    return node_cli("@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex")


class Run(sandbox.Run):
    """One headless run of the CLI: its exit code, its ``--json`` lines (parsed) and its stderr."""

    @property
    def thread_id(self) -> str:
        """The session's id (``thread.started``), the hooks' ``session_id``."""
        return str(next(line["thread_id"] for line in self.lines if line.get("type") == "thread.started"))

    def items(self, kind: str) -> list[dict[str, Any]]:
        """The completed items of one type (``command_execution``, ``agent_message``, ``error``)."""
        return [
            line["item"]
            for line in self.lines
            if line.get("type") == "item.completed" and line.get("item", {}).get("type") == kind
        ]


class Home(sandbox.Home):
    """An isolated user (``repeat_hooks.kit.sandbox.Home``) with ``CODEX_HOME`` here (``~/.codex``: the ``config.toml``
    naming the scripted API, and ``hooks.json``), the project a git repository."""

    cli = "codex"
    prefixes = ("CODEX", "OPENAI")

    def __init__(self, root: str | Path, *, resident: Path | None = None) -> None:
        super().__init__(root, resident=resident)
        self.codex_home = self.root / ".codex"
        self.codex_home.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(self.project)], check=True, timeout=30)

    def own(self) -> dict[str, str]:
        return {"CODEX_HOME": str(self.codex_home)}

    @property
    def settings(self) -> Path:
        """Codex's user hooks file in this home (``$CODEX_HOME/hooks.json``)."""
        return settings_file("user", self.env())

    def codex(
        self,
        api: FakeResponsesAPI,
        prompt: str,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        trusted: bool = False,
    ) -> Run:
        """``codex exec --json <prompt>`` in the project, against ``api``, hooks run without asking for trust;
        ``trusted``: the project trusted in ``config.toml`` (Codex reads a project's ``.codex/`` only then)."""
        trust = f'\n[projects."{self.project}"]\ntrust_level = "trusted"\n' if trusted else ""
        (self.codex_home / "config.toml").write_text(
            f'model = "{MODEL}"\nmodel_provider = "fake"\napproval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n\n[model_providers.fake]\nname = "fake"\n'
            f'base_url = "{api.base_url}/v1"\nwire_api = "responses"\nenv_key = "FAKE_API_KEY"\n{trust}'
        )
        environ = {**self.env(**dict(env or {})), "FAKE_API_KEY": "offline-dummy-key"}
        command = [str(codex_cli()), "exec", "--json", "--skip-git-repo-check", "--disable", "plugins"]
        command += ["--dangerously-bypass-hook-trust", prompt]
        return Run(*self.run(command, environ, timeout))


def tool_outputs(api: FakeResponsesAPI) -> list[str]:
    """Every call's output the model was handed in the last model call's turn, in order."""
    requests = api.model_requests()
    return responses_outputs(requests[-1]) if requests else []
