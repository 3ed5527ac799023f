"""examples/agent_framework_parcel_tracker.py tells the seed-004 story offline on Agent Framework's real loop, end to
end, and with --session keeps the conversation (and the guard's counts) as session.to_dict() JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.examples import assert_seed_004_story, run_example

from .conftest import SOURCE


@pytest.mark.parametrize("saved", [False, True], ids=["in_memory", "session_file"])
def test_the_agent_framework_parcel_tracker_example_runs_offline(
    saved: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")])))
    session = tmp_path / "parcels.json"

    done = run_example("agent_framework_parcel_tracker.py", *(["--session", str(session)] if saved else []))  # no key

    assert_seed_004_story(done.stdout, refused="refused track_parcel", ended="after 5 model calls")
    if saved:
        state = json.loads(
            json.loads(session.read_text())["state"]["repeat_hooks:parcel_tracker"]
        )  # the agent is named
        assert state["turn"]["number"] == 2
