"""The default policy replayed on the shared tau2-bench corpus, beside alternatives; then the same corpus with
a fresh request id (a UUID) added to every recorded result, as real tools and MCP servers stamp them.

Goals (issues 9 and 16): on the corpus, at most 5 successful trajectories with a refusal, 0 harmful refusals
in successful trajectories, at least 890 wasted calls prevented; with fresh ids, at least 800 prevented
(the volatile-token mask; ``{"mask_volatile": false}`` beside it shows what it saves).

    .venv/bin/python bench/replay_tau2.py [path/to/tau2.jsonl.gz]
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from pathlib import Path
from typing import Any

from repeat_hooks import Policy
from repeat_hooks.offline.cli import main, read_trajectories, table
from repeat_hooks.offline.replay import RecordedCall, Tally, Trajectory, replay

CORPUS = Path(__file__).resolve().parent / "corpora" / "tau2.jsonl.gz"
POLICIES = ("{}", '{"count": "per_turn"}', '{"max_cycle_period": null}', '{"max_calls": 3}')


def with_fresh_id(result: Any) -> Any:
    """``result`` stamped with a new request id, as a JSON field or a line of text."""
    if isinstance(result, dict):
        return {**result, "request_id": str(uuid.uuid4())}
    return f"{result}\nrequest_id: {uuid.uuid4()}"


def stamped(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` with every recorded result stamped with a fresh request id."""

    def call(recorded: RecordedCall) -> RecordedCall:
        return dataclasses.replace(recorded, result=with_fresh_id(recorded.result))

    turns = [[[call(c) for c in response] for response in turn] for turn in trajectory.turns]
    return dataclasses.replace(trajectory, turns=turns)


if __name__ == "__main__":
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS
    if not corpus.exists():
        sys.exit(f"no corpus at {corpus}: pass its path")
    print(f"{corpus.name}: the default ({{}}) and alternatives, side by side")
    argv = ["replay", str(corpus)]
    for policy in POLICIES:
        argv += ["--policy", policy]
    status = main(argv)
    print(f"\n{corpus.name}, every result stamped with a fresh request id (a UUID):")
    trajectories = [stamped(t) for t in read_trajectories(corpus)]
    labels = ["{}", '{"mask_volatile": false}']
    tallies = [replay(Policy(), trajectories, Tally()), replay(Policy(mask_volatile=False), trajectories, Tally())]
    print(table(labels, tallies))
    sys.exit(status)
