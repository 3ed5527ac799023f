"""Two OS processes serve alternate turns of one conversation through LlamaIndex's own persistence: the run's
``Context``, saved with ``Context.to_dict()`` as JSON and rebuilt with ``Context.from_dict()``. The guard's state is
plain JSON in the context's store (``STATE_KEY``), so it travels with it: each process picks up the turn count where
the other left it, and each turn counts its calls afresh. It holds digests and tool names, never an argument.

What LlamaIndex does not carry (workflows 2.26): the agent's memory, which ``to_dict`` skips
(``UnserializableKeyWarning``, workflows/context/state_store.py:231), so a run paused mid-turn (a tool waiting for a
human) cannot be resumed in another process without restoring the memory by hand; the guard's state does travel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from repeat_hooks_llama_index import STATE_KEY

from .conftest import STOPPED

WORKER = Path(__file__).with_name("context_worker.py")


def serve(context: Path, log: Path, message: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(WORKER), str(context), str(log), message],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_two_processes_serve_alternate_turns_with_exact_counts(tmp_path: Path) -> None:
    context, log = tmp_path / "context.json", tmp_path / "carrier.log"
    log.touch()

    turns = [serve(context, log, f"Keep checking FR-7731 ({n})") for n in range(3)]

    assert [turn["turn_before"] for turn in turns] == [0, 1, 2]
    assert [turn["turn_after"] for turn in turns] == [1, 2, 3]
    assert all(turn["final"] == STOPPED and turn["stop"] == "ignored_refusals" for turn in turns)
    assert [turn["model_calls"] for turn in turns] == [5, 5, 5]
    assert log.read_text().split() == ["FR-7731"] * 6  # 2 a turn, whichever process served it
    saved = json.loads(context.read_text())["state"]["state_data"]["_data"]
    guard = json.loads(saved[STATE_KEY])
    assert set(guard) == {"turn", "batch", "agents"} and set(guard["agents"]) == {"parcel_tracker"}
    assert "FR-7731" not in saved[STATE_KEY]  # digests and tool names only
