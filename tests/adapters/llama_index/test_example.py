"""examples/llama_index_parcel_tracker.py tells the seed-004 story offline on LlamaIndex's real agent loop, end to
end; with --context, the conversation's Context is saved as JSON and a second run goes on from it."""

from __future__ import annotations

import json
from pathlib import Path

from support.examples import assert_seed_004_story, run_example


def test_the_llama_index_parcel_tracker_example_runs_offline(tmp_path: Path) -> None:
    done = run_example("llama_index_parcel_tracker.py", python=["-W", "ignore"])  # no key

    assert_seed_004_story(done.stdout, refused="refused track_parcel", ended="after 5 model calls")


def test_the_saved_context_carries_the_guards_state_to_the_next_process(tmp_path: Path) -> None:
    saved = tmp_path / "parcels.json"
    run_example("llama_index_parcel_tracker.py", "--context", str(saved), python=["-W", "ignore"])

    again = run_example("llama_index_parcel_tracker.py", "--context", str(saved), python=["-W", "ignore"])

    assert "loop breaker: ended the turn (ignored_refusals) after 5 model calls" in again.stdout
    state = json.loads(json.loads(saved.read_text())["state"]["state_data"]["_data"]["repeat_hooks"])
    assert json.loads(state["agents"]["parcel_tracker"])["turn"]["number"] == 4  # two turns in each process
