"""examples/pydantic_ai_parcel_tracker.py tells the seed-004 story offline on the real agent graph, end to end."""

from __future__ import annotations

from support.examples import assert_seed_004_story, run_example


def test_the_pydantic_ai_parcel_tracker_example_runs_offline() -> None:
    done = run_example("pydantic_ai_parcel_tracker.py", python=["-W", "error::DeprecationWarning"])  # offline

    assert_seed_004_story(done.stdout, refused="refused track_parcel (repeat)", ended="after 5 model calls")
    assert done.stderr == ""


def test_live_mode_without_a_key_says_what_is_missing() -> None:
    done = run_example("pydantic_ai_parcel_tracker.py", "--live", code=2)

    assert "--live needs OPENAI_API_KEY or ANTHROPIC_API_KEY" in done.stderr
