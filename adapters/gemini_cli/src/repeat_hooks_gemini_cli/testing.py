"""A testing aid: the real Gemini CLI (0.61.0, from npm), headless (``gemini -p --output-format stream-json``), in an
isolated home with the hook command installed by ``repeat-hooks install gemini-cli``, against the scripted Gemini
API (``repeat_hooks.kit.fake_models.FakeGeminiAPI``). Not for production::

    def answer(request: dict, step: int) -> Reply:      # the request the CLI sent; responses with calls so far
        test = call("run_shell_command", {"command": "make test", "description": "Run the tests"})
        return [test] if step < 6 else "Done."

    with FakeGeminiAPI(answer) as api:
        home = Home(tmp_path)                           # HOME, GEMINI_CLI_HOME, a project folder, the state
        home.install()                                  # repeat-hooks install gemini-cli --user
        run = home.gemini(api, PROMPT)                  # the CLI's exit code, stream-json lines, stderr
    run.code, run.stderr, function_responses(api)

The CLI is ``.cache/node_cli``'s (``make node-clis``), or ``$GEMINI_CLI`` (its ``bundle/gemini.js``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repeat_hooks.kit import sandbox
from repeat_hooks.kit.fake_models import FakeGeminiAPI, gemini_responses, node_cli

from .guard import settings_file

MODEL = "gemini-2.5-flash"
"""The model the CLI asks for (the scripted API answers any)."""
USERS_SETTINGS: Mapping[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}
"""What the isolated user's settings hold before install: an API key's auth, and no traffic but the model's."""


def gemini_cli() -> Path:
    """The Gemini CLI's entry script: ``$GEMINI_CLI``, else ``.cache/node_cli``'s (``make node-clis``)."""
    named = os.environ.get("GEMINI_CLI")
    return Path(named) if named else node_cli("@google", "gemini-cli", "bundle", "gemini.js")


class Run(sandbox.Run):
    """One headless run of the CLI: its exit code, its stream-json lines (parsed) and its stderr."""

    @property
    def result(self) -> dict[str, Any]:
        """The run's ``result`` line (``status``, ``stats``), if it printed one."""
        found = [line for line in self.lines if line.get("type") == "result"]
        return found[-1] if found else {}

    @property
    def session_id(self) -> str:
        """The session's id, from the ``init`` line."""
        return str(next(line["session_id"] for line in self.lines if line.get("type") == "init"))


class Home(sandbox.Home):
    """An isolated user (``repeat_hooks.kit.sandbox.Home``) whose ``HOME`` is Gemini CLI's too (``GEMINI_CLI_HOME``:
    ``~/.gemini``), with empty system settings, the project folder trusted."""

    cli = "gemini-cli"
    prefixes = ("GEMINI", "GOOGLE")

    def __init__(
        self, root: str | Path, settings: Mapping[str, Any] = USERS_SETTINGS, *, resident: Path | None = None
    ) -> None:
        super().__init__(root, resident=resident)
        self.system = self.root / "system-settings.json"
        self.system.write_text("{}\n")
        self.settings.parent.mkdir(parents=True, exist_ok=True)
        if settings:
            self.settings.write_text(json.dumps(settings, indent=2) + "\n")

    def own(self) -> dict[str, str]:
        return {"GEMINI_CLI_HOME": str(self.root), "TMPDIR": str(self.root)}

    @property
    def settings(self) -> Path:
        """Gemini CLI's user settings file in this home."""
        return settings_file("user", {"HOME": str(self.root)})

    def gemini(
        self, api: FakeGeminiAPI, prompt: str, *, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> Run:
        """``gemini -p <prompt> --output-format stream-json --approval-mode yolo`` in the project, against ``api``."""
        offline = {
            "GEMINI_API_KEY": "offline-dummy-key",
            "GOOGLE_GEMINI_BASE_URL": api.base_url,
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(self.system),
            "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": str(self.system),
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "NO_BROWSER": "1",
            "TERM": "dumb",
        }
        environ = {**self.env(**dict(env or {})), **offline}
        command = ["node", str(gemini_cli()), "-p", prompt, "--output-format", "stream-json", "-m", MODEL]
        command += ["--approval-mode", "yolo"]
        return Run(*self.run(command, environ, timeout))


def function_responses(api: FakeGeminiAPI) -> list[dict[str, Any]]:
    """Every call's response the model was handed in the turn, in order (``{"output": ...}`` for a call that ran,
    ``{"error": ...}`` for one refused): those of the model call that was handed the most (a call the CLI makes
    after its loop detection starts a turn of its own)."""
    return max((gemini_responses(request) for request in api.model_requests()), key=len, default=[])
