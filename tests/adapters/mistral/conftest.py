"""Shared pieces for the Mistral adapter tests: the carrier tool, the agent, the turn runner.

Every test drives the SDK's real agent loop offline: the model is ``repeat_hooks_mistral.testing.
ScriptedModel`` at the SDK's provider seam, nothing of the SDK is mocked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_TESTS = str(Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # ``import services``

os.environ.pop("MISTRAL_API_KEY", None)  # offline: no key reaches the SDK

from mistralai.agents import agents  # noqa: E402
from services import hung_redis  # noqa: E402, F401  (a fixture: a Redis that accepts and never answers)


@dataclass
class Carrier:
    """The fake carrier: records every call that reached it; ``fail`` makes it raise."""

    calls: list[str] = field(default_factory=list)
    fail: bool = False


CARRIER = Carrier()


@agents.tool
def track_parcel(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan of a parcel."""
    CARRIER.calls.append(tracking_number)
    if CARRIER.fail:
        raise RuntimeError("carrier unreachable")
    return {"tracking_number": tracking_number, "status": "in transit", "last_scan": "Lyon hub, 06:12"}


@pytest.fixture
def carrier() -> Iterator[Carrier]:
    """The carrier, reset for this test."""
    CARRIER.calls.clear()
    CARRIER.fail = False
    yield CARRIER
    CARRIER.calls.clear()
    CARRIER.fail = False


def make_agent(
    model: Any,
    *hooks: agents.Hook,
    tools: Sequence[Any] = (track_parcel,),
    builtins: Any = None,
    max_iterations: int = 20,
    mcps: dict[str, Any] | None = None,
) -> agents.Agent:
    """The parcel tracker with ``model`` and ``hooks``; ``tools`` (``track_parcel``) and ``mcps`` (none) as its
    tools, and no builtin unless ``builtins`` says so."""
    return agents.Agent(
        model=model.name,
        completion=model.completion(),
        name="parcel-tracker",
        instructions="You track parcels with track_parcel.",
        builtins=builtins if builtins is not None else agents.Builtins.none(),
        max_iterations=max_iterations,  # a broken guard cannot loop forever
        harness=agents.Harness(tools=list(tools), hooks=list(hooks), mcps=mcps),
    )


@pytest.fixture
def agent_for() -> Any:
    """``make_agent`` as a fixture."""
    return make_agent
