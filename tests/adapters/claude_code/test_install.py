"""``repeat-hooks install|uninstall claude-code``: the hook entries merged into Claude Code's settings file beside the
user's own hooks, idempotently, and removed exactly, leaving the file as it was, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_claude_code import ENTRIES
from repeat_hooks_claude_code.testing import Home

from repeat_hooks.kit.install import is_ours

USERS: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "permissions": {"allow": ["Bash(make test)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit.sh"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}],
    },
    "env": {"CI": "1", "GREETING": "héllo"},
}


def written(document: object, indent: int = 2) -> str:
    """JSON as Claude Code writes its settings (``JSON.stringify(value, null, 2)``, no escapes), with a newline."""
    return json.dumps(document, indent=indent, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("indent", [2, 4])
def test_install_then_uninstall_leaves_the_users_file_byte_identical(tmp_path: Path, indent: int) -> None:
    home = Home(tmp_path)
    before = written(USERS, indent)
    home.settings.write_text(before, encoding="utf-8")
    said = home.install().stdout
    assert said == f"{home.settings}: updated\n"
    after = home.settings.read_text(encoding="utf-8")
    assert after.startswith("{\n" + " " * indent + '"model"') and after.endswith("}\n")
    document = json.loads(after)
    assert {key: value for key, value in document.items() if key != "hooks"} == {
        key: value for key, value in USERS.items() if key != "hooks"
    }
    pre = document["hooks"]["PreToolUse"]
    assert pre[0] == USERS["hooks"]["PreToolUse"][0]  # the user's own first, as they were
    assert pre[1]["matcher"] == "*" and pre[1]["hooks"][0]["command"].endswith("repeat-hooks hook claude-code")
    stop = document["hooks"]["Stop"]
    assert stop[0] == USERS["hooks"]["Stop"][0] and stop[1]["hooks"][0]["command"] == pre[1]["hooks"][0]["command"]
    assert "matcher" not in stop[1]  # every answer
    theirs = ("PreToolUse", "Stop")
    assert list(document["hooks"]) == [*theirs, *(e.event for e in ENTRIES if e.event not in theirs)]
    again = home.install()
    assert again.stdout == f"{home.settings}: nothing to change\n" and home.settings.read_text() == after
    removed = home.repeat_hooks("uninstall", "claude-code")
    assert removed.returncode == 0 and home.settings.read_text(encoding="utf-8") == before


def test_a_file_without_hooks_or_no_file_at_all(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.install()
    assert set(json.loads(home.settings.read_text())["hooks"]) == {entry.event for entry in ENTRIES}
    home.repeat_hooks("uninstall", "claude-code")
    assert home.settings.read_text() == "{}\n"
    plain = '{\n  "model": "opus"\n}'  # no trailing newline: none after uninstall either
    home.settings.write_text(plain)
    home.install()
    home.repeat_hooks("uninstall", "claude-code")
    assert home.settings.read_text() == plain


def test_uninstall_keeps_a_users_hook_beside_ours_in_one_group(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.install()
    document = json.loads(home.settings.read_text())
    document["hooks"]["PreToolUse"][0]["hooks"].append({"type": "command", "command": "./mine.sh"})
    home.settings.write_text(written(document))
    home.repeat_hooks("uninstall", "claude-code")
    assert json.loads(home.settings.read_text()) == {
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "./mine.sh"}]}]}
    }


def test_dry_run_prints_the_change_and_writes_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path)
    before = written(USERS)
    home.settings.write_text(before)
    done = home.repeat_hooks("install", "claude-code", "--dry-run")
    assert done.returncode == 0 and home.settings.read_text() == before
    assert done.stdout.startswith(f"--- {home.settings}\n+++ {home.settings} (after)\n")
    assert '+            "command": ' in done.stdout and "repeat-hooks hook claude-code" in done.stdout
    assert not [line for line in done.stdout.splitlines() if line.startswith("-") and not line.startswith("---")]


def test_a_dry_run_cut_short_ends_quietly(tmp_path: Path) -> None:
    """``repeat-hooks install claude-code --dry-run | head -1``: status 0, nothing on stderr (no "Broken pipe")."""
    home = Home(tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: the first write fails, every time
    try:
        done = subprocess.run(
            [sys.executable, "-m", "repeat_hooks", "install", "claude-code", "--dry-run"],
            cwd=home.project, env=home.env(), stdout=write, stderr=subprocess.PIPE, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, b"")
    assert not home.settings.exists()


def test_the_project_scope_writes_the_projects_settings(tmp_path: Path) -> None:
    home = Home(tmp_path)
    done = home.repeat_hooks("install", "claude-code", "--project")
    project = (
        home.project / ".claude" / "settings.local.json"
    )  # the project's personal file: the path is this machine's
    assert done.returncode == 0 and project.exists() and not home.settings.exists()
    home.repeat_hooks("uninstall", "claude-code", "--project")
    assert project.read_text() == "{}\n"


def test_the_project_scope_is_the_checkouts_root_and_says_when_git_would_commit_the_file(tmp_path: Path) -> None:
    home = Home(tmp_path)
    subprocess.run(["git", "init", "-q", str(home.project)], check=True)
    folder = home.project / "pkg"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "repeat_hooks", "install", "claude-code", "--project"],
        cwd=folder, env=home.env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    written = home.project / ".claude" / "settings.local.json"  # where Claude Code started in the checkout reads it
    assert done.returncode == 0 and written.exists() and not (folder / ".claude").exists()
    assert done.stderr == (
        f"repeat-hooks install: {written}: names this machine's interpreter and git does not ignore it: add it to "
        ".gitignore\n"
    )
    (home.project / ".gitignore").write_text(".claude/settings.local.json\n")
    home.repeat_hooks("uninstall", "claude-code", "--project")
    again = home.repeat_hooks("install", "claude-code", "--project")
    assert again.returncode == 0 and again.stderr == ""


def test_install_refuses_settings_it_could_not_use(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.user_settings.parent.mkdir(parents=True)
    home.user_settings.write_text('{"read_olny": ["Grep"]}')
    done = home.repeat_hooks("install", "claude-code")
    assert done.returncode == 2 and not home.settings.exists()
    assert "unknown setting 'read_olny' (did you mean read_only?)" in done.stderr
    home.user_settings.write_text("{}")
    home.settings.write_text("[1]")
    done = home.repeat_hooks("install", "claude-code")
    assert done.returncode == 2 and "holds a JSON array, not an object of settings" in done.stderr
    assert home.settings.read_text() == "[1]"


@pytest.mark.parametrize(
    ("command", "ours"),
    [
        ("/home/me/.venv/bin/repeat-hooks hook claude-code", True),
        ("'/opt/my tools/bin/repeat-hooks' hook claude-code", True),
        ("repeat-hooks hook claude-code", False),  # a team's shared settings, on each one's PATH: theirs
        ("/usr/bin/python3 -m repeat_hooks hook claude-code", True),
        ("echo repeat-hooks hook claude-code finished >> ~/log", False),  # a user's hook naming it
        ("REPEAT_HOOKS_STATE=/srv/x nice repeat-hooks hook claude-code", False),  # a wrapper of the user's own
        ("repeat-hooks hook codex", False),
        ("~/bin/audit.sh hook claude-code", False),
        ("python3 my_repeat_hooks.py", False),
        ("echo 'unbalanced", False),
    ],
)
def test_ours_is_recognised_by_its_command(command: str, ours: bool) -> None:
    assert is_ours(command, "claude-code") is ours
