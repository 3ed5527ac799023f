"""examples/openai_parcel_tracker.py tells the seed-004 story offline on the real Runner, end to end."""

from __future__ import annotations

from support.examples import assert_seed_004_story, run_example


def test_the_openai_parcel_tracker_example_runs_offline() -> None:
    done = run_example("openai_parcel_tracker.py")  # no OPENAI_API_KEY: offline

    assert_seed_004_story(
        done.stdout, refused="refused track_parcel, call {call} of this turn", ended="after 5 model calls"
    )
