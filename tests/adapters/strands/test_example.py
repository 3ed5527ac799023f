"""examples/strands_parcel_tracker.py tells the seed-004 story offline on Strands' real agent loop, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "strands_parcel_tracker.py"


@pytest.mark.parametrize("sessions", [False, True], ids=["in_memory", "file_sessions"])
def test_the_strands_parcel_tracker_example_runs_offline(sessions: bool, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}  # no AWS credentials: offline
    argv = [sys.executable, str(EXAMPLE)]
    if sessions:
        argv += ["--sessions", str(tmp_path)]
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
    if sessions:
        saved = json.loads((tmp_path / "session_parcels" / "agents" / "agent_default" / "agent.json").read_text())
        assert json.loads(saved["state"]["repeat_hooks"])["turn"]["number"] == 2
