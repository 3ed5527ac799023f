"""The adapter README's Python blocks run as written, in order (the quick start's model is a scripted one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "adapters" / "pydantic_ai" / "README.md"


def test_the_readme_blocks_run_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 5  # quick start, on_stop="raise", approvals, spec, Temporal
    namespace: dict[str, object] = {"__name__": "readme"}

    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)

    printed = capsys.readouterr().out.splitlines()
    # Quick start: the seed-004 story with the default policy's count (the same result twice, then refused).
    assert printed[0].startswith("I stopped: I kept calling track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    assert printed[2].startswith("[('track_parcel', Refusal(") and printed[2].count("('track_parcel'") == 3
    # on_stop="raise"
    assert printed[3] == "ignored_refusals"
    # Approvals: asked once, run once.
    assert printed[4:6] == ["['A-1']", "ignored_refusals"]
    assert namespace["refunds"] == ["A-1"]
    # The spec and the Temporal agent were built.
    agent = namespace["agent"]
    assert type(agent).__name__ == "Agent"
    assert len(printed) == 6
