"""examples/langchain_parcel_tracker.py tells the seed-004 story offline on the real create_agent, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_parcel_tracker.py"


def test_the_langchain_parcel_tracker_example_runs_offline() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}  # no provider key: offline
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model: scripted, offline"
    assert lines.count("carrier: tracked FR-7731") == 3
    assert [line for line in lines if line.startswith("loop breaker:")] == [
        "loop breaker: refused track_parcel, call 3 of this turn",
        "loop breaker: refused track_parcel, call 4 of this turn",
        "loop breaker: refused track_parcel, call 5 of this turn",
        "loop breaker: ended the turn (ignored_refusals) after 5 model calls",
    ]
    assert "agent (stopped: ignored_refusals): I stopped: I kept calling track_parcel" in done.stdout
    assert "agent (answered): Parcel FR-7731 is still in transit" in done.stdout  # turn 2 started fresh
    assert lines[-1] == "calls that reached the carrier: 3"
