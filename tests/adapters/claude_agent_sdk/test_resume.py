"""A session resumed in a fresh Python process goes on with its guard state, when the store is shared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).resolve().parent / "cas_resume_worker.py"


def worker(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.services
def test_a_second_process_resumes_the_session_with_its_counts(redis_server: Any, tmp_path: Path) -> None:
    first = worker(redis_server.url, str(tmp_path), "first")
    # Turn 1 ran track_parcel twice before the guard stopped it; turn 2 ran it once, then the app deferred the
    # 2nd call (the guard had counted it: the 2nd of 2 allowed in that turn).
    assert first["stop_one"] == "ignored_refusals" and first["deferred"] == "tool_deferred"
    assert first["runs"] == 2 + 1

    second = worker(redis_server.url, str(tmp_path), "second", first["session"], first["turn_one"])
    # The approved call, delivered again in this process, is the one the guard already counted: it runs (a
    # second count would make it the 3rd of 2, refused); the new turn counts afresh and runs once more.
    assert second["runs"] == 2
    assert second["result"] == "done"
    # What the other process recorded holds: how turn 1 ended, and the turns so far (1 and 2 there; here,
    # the prompt Claude Code sends itself after the approved call, "Continue from where you left off.", then ours).
    assert second["stop_one"] == "ignored_refusals"
    assert second["turn_number"] == 4
    # And the model read turn 1's refusals in the history Claude Code resumed.
    assert second["refusals_seen"] >= 3
