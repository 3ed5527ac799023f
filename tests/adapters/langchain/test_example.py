"""examples/langchain_parcel_tracker.py tells the seed-004 story offline on the real create_agent, end to end."""

from __future__ import annotations

from support.examples import assert_seed_004_story, run_example


def test_the_langchain_parcel_tracker_example_runs_offline() -> None:
    done = run_example("langchain_parcel_tracker.py")  # no provider key: offline

    assert_seed_004_story(
        done.stdout, refused="refused track_parcel, call {call} of this turn", ended="after 5 model calls"
    )
