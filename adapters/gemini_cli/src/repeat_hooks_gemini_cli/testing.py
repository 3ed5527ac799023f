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
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass
class Run:
    """One headless run of the CLI: its exit code, its stream-json lines (parsed) and its stderr."""

    code: int
    lines: list[dict[str, Any]]
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        """The run's ``result`` line (``status``, ``stats``), if it printed one."""
        found = [line for line in self.lines if line.get("type") == "result"]
        return found[-1] if found else {}

    @property
    def session_id(self) -> str:
        """The session's id, from the ``init`` line."""
        return str(next(line["session_id"] for line in self.lines if line.get("type") == "init"))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """The stream-json lines of one ``type`` (``tool_use``, ``tool_result``, ``error``, ``message``...)."""
        return [line for line in self.lines if line.get("type") == kind]


class Home:
    """An isolated user: ``HOME`` and ``GEMINI_CLI_HOME`` (so Gemini CLI's settings, and the hook's, live under it:
    ``~/.gemini``, ``~/.config/repeat-hooks``, ``~/.local/state/repeat-hooks``), empty system settings, and a
    ``project`` folder the CLI runs in (trusted)."""

    def __init__(self, root: str | Path, settings: Mapping[str, Any] = USERS_SETTINGS) -> None:
        self.root = Path(root)
        self.project = self.root / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        self.system = self.root / "system-settings.json"
        self.system.write_text("{}\n")
        self.settings.parent.mkdir(parents=True, exist_ok=True)
        if settings:
            self.settings.write_text(json.dumps(settings, indent=2) + "\n")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the CLI, the hook command and ``repeat-hooks``: this one with the home here, none of
        the variables that would point elsewhere, and no resident hook server (``REPEAT_HOOKS_RESIDENT=off``: each
        hook call in its own process) unless ``extra`` names its folder."""
        kept = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("XDG_", "REPEAT_HOOKS_", "GEMINI", "GOOGLE"))
        }
        home = str(self.root)
        isolated = {"HOME": home, "GEMINI_CLI_HOME": home, "TMPDIR": str(self.root), "REPEAT_HOOKS_RESIDENT": "off"}
        return {**kept, **isolated, **extra}

    @property
    def settings(self) -> Path:
        """Gemini CLI's user settings file in this home."""
        return settings_file("user", {"HOME": str(self.root)})

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
        """``repeat-hooks install gemini-cli`` (the user's settings, by default); asserts it succeeded."""
        done = self.repeat_hooks("install", "gemini-cli", *args)
        assert done.returncode == 0, done.stderr
        return done

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
        done = subprocess.run(
            command,
            cwd=self.project,
            env=environ,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return Run(done.returncode, lines, done.stderr)


def function_responses(api: FakeGeminiAPI) -> list[dict[str, Any]]:
    """Every call's response the model was handed in the turn, in order (``{"output": ...}`` for a call that ran,
    ``{"error": ...}`` for one refused): those of the model call that was handed the most (a call the CLI makes
    after its loop detection starts a turn of its own)."""
    return max((gemini_responses(request) for request in api.model_requests()), key=len, default=[])
