"""The default policy replayed on the shared tau2-bench corpus, beside the earlier per-turn default.

Goals (issue 9): at most 5 successful trajectories with a refusal, 0 harmful refusals in successful
trajectories, at least 890 wasted calls prevented.

    .venv/bin/python bench/replay_tau2.py [path/to/tau2.jsonl.gz]
"""

from __future__ import annotations

import sys
from pathlib import Path

from repeat_hooks.cli import main

CORPUS = Path(__file__).resolve().parent / "corpora" / "tau2.jsonl.gz"
POLICIES = ("{}", '{"count": "per_turn"}', '{"max_cycle_period": null}', '{"max_calls": 3}')


if __name__ == "__main__":
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS
    if not corpus.exists():
        sys.exit(f"no corpus at {corpus}: pass its path")
    print(f"{corpus.name}: the default ({{}}) and alternatives, side by side")
    argv = ["replay", str(corpus)]
    for policy in POLICIES:
        argv += ["--policy", policy]
    sys.exit(main(argv))
