"""``repeat-hooks install|uninstall gemini-cli``: the hook entries merged into Gemini CLI's settings beside the
user's own hooks, with ``hooksConfig.enabled`` (which Gemini CLI needs to run any hook), and removed exactly:
the file as it was, byte for byte, ``hooksConfig`` included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_gemini_cli import ENTRIES
from repeat_hooks_gemini_cli.testing import Home

from repeat_hooks.kit.install import SET_KEY

USERS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "model": {"name": "gemini-2.5-pro"},
    "hooks": {
        "BeforeTool": [{"matcher": "write_file|replace", "hooks": [{"type": "command", "command": "./audit.sh"}]}],
        "SessionEnd": [{"hooks": [{"type": "command", "name": "notify", "command": "notify-send done"}]}],
    },
    "ui": {"theme": "Default", "greeting": "héllo"},
}


def written(document: object) -> str:
    """JSON as Gemini CLI writes its settings: 2-space indent, no escapes, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("hooks_config", [None, {"enabled": True}, {"enabled": False, "disabled": ["notify"]}])
def test_install_then_uninstall_leaves_the_users_file_byte_identical(
    tmp_path: Path, hooks_config: dict[str, Any] | None
) -> None:
    users = {**USERS, **({"hooksConfig": hooks_config} if hooks_config is not None else {})}
    home = Home(tmp_path, settings={})
    before = written(users)
    home.settings.write_text(before, encoding="utf-8")
    assert home.install().stdout == f"{home.settings}: updated\n"
    document = json.loads(home.settings.read_text(encoding="utf-8"))
    assert document["hooksConfig"]["enabled"] is True  # else Gemini CLI runs no hook
    assert {k: v for k, v in document["hooksConfig"].items() if k != "enabled"} == {
        k: v for k, v in (hooks_config or {}).items() if k != "enabled"
    }
    pre = document["hooks"]["BeforeTool"]
    assert pre[0] == USERS["hooks"]["BeforeTool"][0]  # the user's own first, as they were
    ours = pre[1]["hooks"][0]
    assert pre[1]["matcher"] == "*" and ours["command"].endswith("repeat-hooks hook gemini-cli")
    assert (ours["name"], ours["timeout"]) == ("repeat-hooks", 30_000)  # milliseconds
    assert set(document["hooks"]) == {"BeforeTool", "SessionEnd", *(entry.event for entry in ENTRIES)}
    noted = [c for groups in document["hooks"].values() for g in groups for h in g["hooks"] for c in h.get(SET_KEY, [])]
    expected = {None: [["hooksConfig"], ["hooksConfig.enabled"]], True: [], False: [["hooksConfig.enabled", False]]}
    assert [c for c in noted if c[0].startswith("hooksConfig")] == expected[(hooks_config or {}).get("enabled")]
    after = home.settings.read_text()
    assert home.install().stdout == f"{home.settings}: nothing to change\n" and home.settings.read_text() == after
    removed = home.repeat_hooks("uninstall", "gemini-cli")
    assert removed.returncode == 0 and home.settings.read_text(encoding="utf-8") == before


def test_no_file_at_all_and_a_hooks_config_the_user_added_since(tmp_path: Path) -> None:
    home = Home(tmp_path, settings={})
    home.install()
    document = json.loads(home.settings.read_text())
    assert document["hooksConfig"] == {"enabled": True}
    document["hooksConfig"]["disabled"] = ["someone-elses"]  # the user's, after install
    home.settings.write_text(written(document))
    home.repeat_hooks("uninstall", "gemini-cli")
    assert json.loads(home.settings.read_text()) == {"hooksConfig": {"disabled": ["someone-elses"]}}


def test_install_says_when_the_settings_tell_gemini_cli_to_skip_the_guards_hooks(tmp_path: Path) -> None:
    home = Home(tmp_path, settings={})
    home.settings.write_text(written({"hooksConfig": {"disabled": ["repeat-hooks"]}}))
    done = home.install()
    assert done.stderr == (
        f"repeat-hooks install: note: {home.settings} lists repeat-hooks in hooksConfig.disabled: gemini-cli runs "
        "none of the guard's hooks until you remove it from there\n"
    )
    home.settings.write_text(written({"hooksConfig": {"disabled": ["someone-elses"]}}))
    assert home.install().stderr == ""


def test_dry_run_prints_the_change_and_writes_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path, settings={})
    before = written(USERS)
    home.settings.write_text(before)
    done = home.repeat_hooks("install", "gemini-cli", "--dry-run")
    assert done.returncode == 0 and home.settings.read_text() == before
    assert '+    "enabled": true' in done.stdout and "repeat-hooks hook gemini-cli" in done.stdout


def test_the_project_scope_writes_the_projects_settings(tmp_path: Path) -> None:
    home = Home(tmp_path, settings={})
    done = home.repeat_hooks("install", "gemini-cli", "--project")
    project = home.project / ".gemini" / "settings.json"
    assert done.returncode == 0 and project.exists() and not home.settings.exists()
    home.repeat_hooks("uninstall", "gemini-cli", "--project")
    assert project.read_text() == "{}\n"
