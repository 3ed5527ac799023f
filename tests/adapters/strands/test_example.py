"""examples/strands_parcel_tracker.py tells the seed-004 story offline on Strands' real agent loop, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.examples import assert_seed_004_story, run_example


@pytest.mark.parametrize("sessions", [False, True], ids=["in_memory", "file_sessions"])
def test_the_strands_parcel_tracker_example_runs_offline(sessions: bool, tmp_path: Path) -> None:
    done = run_example("strands_parcel_tracker.py", *(["--sessions", str(tmp_path)] if sessions else []))  # no AWS

    assert_seed_004_story(done.stdout, refused="refused track_parcel", ended="after 5 model calls")
    if sessions:
        saved = json.loads((tmp_path / "session_parcels" / "agents" / "agent_default" / "agent.json").read_text())
        assert json.loads(saved["state"]["repeat_hooks"])["turn"]["number"] == 2
