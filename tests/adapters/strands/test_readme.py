"""The adapter README's Python blocks run as written, in order (the quick start's model is a scripted one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "adapters" / "strands" / "README.md"


def test_the_readme_blocks_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)  # the second block's sessions directory lands here
    namespace: dict[str, object] = {"__name__": "readme"}

    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling track_parcel")
    assert printed[-1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[-1]
    assert (tmp_path / "sessions" / "session_customer-42").is_dir()
