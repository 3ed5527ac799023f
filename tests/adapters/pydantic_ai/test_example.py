"""examples/pydantic_ai_parcel_tracker.py tells the seed-004 story offline on the real agent graph, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pydantic_ai_parcel_tracker.py"


def test_the_pydantic_ai_parcel_tracker_example_runs_offline() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}  # no provider key: offline
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model: scripted, offline"
    assert lines.count("carrier: tracked FR-7731") == 3
    assert [line for line in lines if line.startswith("loop breaker:")] == [
        "loop breaker: refused track_parcel (repeat)",
        "loop breaker: refused track_parcel (repeat)",
        "loop breaker: refused track_parcel (repeat)",
        "loop breaker: ended the turn (ignored_refusals) after 5 model calls",
    ]
    assert "agent (stopped: ignored_refusals): I stopped: I kept calling track_parcel" in done.stdout
    assert "agent (answered): Parcel FR-7731 is still in transit" in done.stdout
    assert lines[-1] == "calls that reached the carrier: 3"
    assert done.stderr == ""


def test_live_mode_without_a_key_says_what_is_missing() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--live"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert "--live needs OPENAI_API_KEY or ANTHROPIC_API_KEY" in done.stderr
