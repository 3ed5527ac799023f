"""examples/adk_parcel_tracker.py tells the seed-004 story offline on the real Runner, end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.examples import assert_seed_004_story, run_example


@pytest.mark.parametrize("db", [None, "sqlite"])
def test_the_adk_parcel_tracker_example_runs_offline(db: str | None, tmp_path: Path) -> None:
    args = ["--db", f"sqlite+aiosqlite:///{tmp_path / 'parcels.db'}"] if db else []
    done = run_example("adk_parcel_tracker.py", *args)  # no GOOGLE_API_KEY: offline

    assert_seed_004_story(done.stdout, refused="refused track_parcel", ended="after 5 model calls")
