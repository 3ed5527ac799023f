"""examples/adk_parcel_tracker.py tells the seed-004 story offline on the real Runner, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "adk_parcel_tracker.py"


@pytest.mark.parametrize("db", [None, "sqlite"])
def test_the_adk_parcel_tracker_example_runs_offline(db: str | None, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}  # no GOOGLE_API_KEY: offline
    argv = [sys.executable, str(EXAMPLE)]
    if db:
        argv += ["--db", f"sqlite+aiosqlite:///{tmp_path / 'parcels.db'}"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model: scripted, offline"
    assert lines.count("carrier: tracked FR-7731") == 3
    assert [line for line in lines if line.startswith("loop breaker:")] == [
        "loop breaker: refused track_parcel",
        "loop breaker: refused track_parcel",
        "loop breaker: refused track_parcel",
        "loop breaker: ended the turn (ignored_refusals) after 5 model calls",
    ]
    assert "agent (stopped: ignored_refusals): I stopped: I kept calling track_parcel" in done.stdout
    assert "agent (answered): Parcel FR-7731 is still in transit" in done.stdout
    assert lines[-1] == "calls that reached the carrier: 3"
