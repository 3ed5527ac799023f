"""Shared pieces: a parcel carrier whose calls are counted, seed 004's texts, and a guarded-agent factory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from repeat_hooks_strands import RepeatGuardHooks
from repeat_hooks_strands.testing import ScriptedModel, keep_calling
from strands import Agent, tool
from strands.tools.decorator import DecoratedFunctionTool

from repeat_hooks import Policy

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
    def tool(self) -> DecoratedFunctionTool[..., Any]:
        @tool
        def track_parcel(tracking_number: str) -> dict[str, Any]:
            """Where the parcel is now."""
            self.calls.append(tracking_number)
            return {"status": f"{tracking_number}: in transit, hub Lyon"}

        return track_parcel


@pytest.fixture
def carrier() -> Carrier:
    return Carrier()


def looping_agent(carrier: Carrier, guard: RepeatGuardHooks | None = None, **agent_options: Any) -> Agent:
    """An agent whose scripted model asks for ``track_parcel(FR-7731)`` in every response, guarded by
    ``guard`` (seed 004's policy by default)."""
    return Agent(
        model=ScriptedModel(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        hooks=[guard if guard is not None else RepeatGuardHooks(SEED_004)],
        callback_handler=None,
        **agent_options,
    )


def model_of(agent: Agent) -> ScriptedModel:
    model = agent.model
    assert isinstance(model, ScriptedModel)
    return model
