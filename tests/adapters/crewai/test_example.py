"""examples/crewai_parcel_tracker.py tells the seed-004 story offline on CrewAI's real agent loop, end to end."""

from __future__ import annotations

from support.examples import assert_seed_004_story, run_example


def test_the_crewai_parcel_tracker_example_runs_offline() -> None:
    done = run_example("crewai_parcel_tracker.py")  # no OPENAI_API_KEY in its environment

    assert_seed_004_story(done.stdout, refused="refused track_parcel", ended="after 5 model calls")
