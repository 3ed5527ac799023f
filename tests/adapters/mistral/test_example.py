"""`make demo`: examples/parcel_tracker.py tells the seed-004 story offline, end to end."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "parcel_tracker.py"


def test_the_parcel_tracker_example_runs_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    monkeypatch.setattr("sys.argv", [str(EXAMPLE)])
    spec = importlib.util.spec_from_file_location("parcel_tracker_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    asyncio.run(example.main())

    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "model: scripted, offline",
        "--- turn 1",
        "carrier: tracked FR-7731",
        "carrier: tracked FR-7731",
        "loop breaker: refused track_parcel, call 3 of this turn",
        "loop breaker: refused track_parcel, call 4 of this turn",
        "loop breaker: refused track_parcel, call 5 of this turn",
        "loop breaker: ended the turn (ignored_refusals)",
        "agent (stopped: ignored_refusals): I stopped: I kept calling track_parcel, and its result would not "
        "change in this turn. Ask me again later.",
        "--- turn 2",
        "carrier: tracked FR-7731",
        "agent (answered): Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered.",
        "calls that reached the carrier: 3",
    ]
