"""The adapter README's quick start runs as written, Claude swapped for the scripted fake Messages API (the
CLI reads ANTHROPIC_BASE_URL from the environment; no key, no network here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cas_parcels import keep_calling
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, offline_env

README = Path(__file__).resolve().parents[3] / "adapters" / "claude_agent_sdk" / "README.md"


def test_the_quick_start_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    with FakeMessagesAPI(keep_calling()) as api:
        for name, value in offline_env(api, tmp_path).items():
            monkeypatch.setenv(name, value)
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling mcp__parcels__track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    assert len(api.model_requests()) == 6
