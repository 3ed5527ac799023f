"""Shared pieces: the adapter's source on the path (until its distribution is installed), a parcel carrier whose
calls are counted, seed 004's texts, and a guarded-agent factory."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).resolve().parents[3] / "adapters" / "agent_framework" / "src"
try:
    import repeat_hooks_agent_framework  # noqa: F401
except ImportError:  # not installed in this environment: run from the source tree
    sys.path.insert(0, str(SOURCE))

from agent_framework import Agent, FunctionTool, tool  # noqa: E402
from repeat_hooks_agent_framework import RepeatGuardMiddleware  # noqa: E402
from repeat_hooks_agent_framework.testing import ScriptedClient, keep_calling  # noqa: E402

from repeat_hooks import Policy  # noqa: E402

ARGS = {"tracking_number": "FR-7731"}
SEED_004 = Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)
"""Seed 004: per tool, 2 calls a turn; the 3rd is refused; after 3 refusals the turn ends."""
REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
"""Seed 004's refusal, word for word."""
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
"""Seed 004's stop after 3 refusals, word for word."""


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it."""

    calls: list[str] = field(default_factory=list)

    @property
    def tool(self) -> FunctionTool:
        def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            self.calls.append(tracking_number)
            return f"{tracking_number}: in transit, hub Lyon"

        return tool(track_parcel)


@pytest.fixture
def carrier() -> Carrier:
    return Carrier()


def looping_agent(carrier: Carrier, guard: RepeatGuardMiddleware | None = None, **options: Any) -> Agent[Any]:
    """An agent whose scripted model asks for ``track_parcel(FR-7731)`` in every response, guarded by ``guard``
    (seed 004's policy by default)."""
    return Agent(
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        middleware=[guard if guard is not None else RepeatGuardMiddleware(SEED_004)],
        **options,
    )


def client_of(agent: Agent[Any]) -> ScriptedClient:
    client = agent.client
    assert isinstance(client, ScriptedClient)
    return client
