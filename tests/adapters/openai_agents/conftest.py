"""Shared pieces: a parcel carrier whose calls are counted, and tracing off (no API key here)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from agents import FunctionTool, function_tool, set_tracing_disabled

set_tracing_disabled(True)


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it."""

    calls: list[str] = field(default_factory=list)
    tool: FunctionTool = field(init=False)

    def __post_init__(self) -> None:
        @function_tool
        def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            self.calls.append(tracking_number)
            return f"{tracking_number}: in transit, hub Lyon"

        self.tool = track_parcel


@pytest.fixture
def carrier() -> Iterator[Carrier]:
    yield Carrier()
