"""The adapter README's Python blocks run as written (the model swapped for a scripted one: no key here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "adapters" / "google_adk" / "README.md"
GEMINI = 'model="gemini-2.5-flash"'
SCRIPTED = (
    "model=__import__('repeat_hooks_google_adk.testing', fromlist=['x']).ScriptedLlm("
    "then=__import__('repeat_hooks_google_adk.testing', fromlist=['x']).keep_calling("
    "'track_parcel', {'tracking_number': 'FR-7731'}))"
)


def test_the_readme_blocks_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 2 and GEMINI in blocks[0]
    monkeypatch.chdir(tmp_path)  # the second block's SQLite file lands here
    namespace: dict[str, object] = {"__name__": "readme"}

    for block in blocks:
        exec(compile(block.replace(GEMINI, SCRIPTED), str(README), "exec"), namespace)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
