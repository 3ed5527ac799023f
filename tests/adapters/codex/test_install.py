"""``repeat-hooks install|uninstall codex``: the hook entries merged into Codex's ``hooks.json`` beside the user's
own hooks, idempotently, and removed exactly, leaving the file as it was, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repeat_hooks_codex import ENTRIES
from repeat_hooks_codex.testing import Home

USERS: dict[str, Any] = {
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit.sh", "timeout": 5}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    }
}


def test_install_then_uninstall_leaves_the_users_file_byte_identical(tmp_path: Path) -> None:
    home = Home(tmp_path)
    before = json.dumps(USERS, indent=2) + "\n"
    home.settings.write_text(before)
    assert home.install().stdout == f"{home.settings}: updated\n"
    document = json.loads(home.settings.read_text())
    assert document["hooks"]["PreToolUse"][0] == USERS["hooks"]["PreToolUse"][0]
    ours = document["hooks"]["PreToolUse"][1]["hooks"][0]
    assert ours["command"].endswith("repeat-hooks hook codex") and ours["timeout"] == 30  # seconds
    assert set(document) == {"hooks"}  # nothing else in hooks.json
    assert set(document["hooks"]) == {"PreToolUse", "Stop", *(entry.event for entry in ENTRIES)}
    assert "PreModelRequest" in document["hooks"]  # the response boundary: without it no refusal ends the turn
    after = home.settings.read_text()
    assert home.install().stdout == f"{home.settings}: nothing to change\n" and home.settings.read_text() == after
    assert home.repeat_hooks("uninstall", "codex").returncode == 0 and home.settings.read_text() == before


def test_no_file_at_all_and_the_project_scope(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.install()
    home.repeat_hooks("uninstall", "codex")
    assert home.settings.read_text() == "{}\n"
    assert home.repeat_hooks("install", "codex", "--project").returncode == 0
    assert (home.project / ".codex" / "hooks.json").exists()


def test_a_setting_codex_cannot_feed_is_left_out_and_said_and_the_guard_stays_on(tmp_path: Path) -> None:
    # One settings file serves every CLI: warn works for Claude Code and Gemini CLI, not for Codex, whose guard runs
    # without it (it never turns the guard off: Codex would show that nowhere).
    home = Home(tmp_path)
    home.user_settings.parent.mkdir(parents=True)
    home.user_settings.write_text('{"warn": true, "max_calls": 1}')
    done = home.install()
    assert done.stderr == (
        "repeat-hooks install: note: codex's guard leaves out warn (it hands the model no note after a result)\n"
    )
    event = {"session_id": "s1", "turn_id": "t1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": "/tmp"}
    answers = []
    for number in range(2):
        given = json.dumps({**event, "tool_input": {"command": "ls"}, "tool_use_id": f"call_{number}"})
        ran = home.repeat_hooks("hook", "codex", event=given)
        answers.append((ran.returncode, ran.stdout))
    assert answers[0] == (0, "") and answers[1][0] == 0 and '"permissionDecision":"deny"' in answers[1][1]
