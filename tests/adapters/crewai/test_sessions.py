"""The guard's state in CrewAI's own persistence: a guarded ``Flow`` whose state is saved by
``@persist(SQLiteFlowPersistence)`` carries the guard's states (``flow.state.repeat_hooks``, JSON by role); a second
process restoring the flow by its id goes on with them. Each process is ``flow_worker.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import STOPPED

WORKER = Path(__file__).with_name("flow_worker.py")


def turn(db: Path, flow_id: str, message: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(WORKER), str(db), flow_id, message],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_a_persisted_flow_carries_the_guards_state_to_another_process(tmp_path: Path) -> None:
    db = tmp_path / "flows.db"

    first = turn(db, "", "Keep checking FR-7731")
    second = turn(db, first["flow_id"], "And now?")

    assert first["answer"] == second["answer"] == STOPPED and first["stop"] == second["stop"] == "ignored_refusals"
    assert first["calls"] == second["calls"] == ["FR-7731"] * 2  # each turn counts afresh
    assert second["flow_id"] == first["flow_id"]
    assert first["state"]["turn"]["number"] == 1
    restored = second["state"]
    assert restored["turn"]["number"] == 2 and restored["turn"]["id"] != first["state"]["turn"]["id"]
    assert [event["kind"] for event in restored["events"]] == ["refusal"] * 3 + ["stop"] + ["refusal"] * 3 + ["stop"]
    assert "FR-7731" not in json.dumps(restored)  # the guard keeps digests of arguments and results, not values
