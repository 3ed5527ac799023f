"""Shared pieces of the pydantic-ai tests: a parcel carrier whose calls are counted, and an agent builder."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, Tool
from repeat_hooks_pydantic_ai import RepeatGuard
from repeat_hooks_pydantic_ai.testing import Script, ScriptedModel

from repeat_hooks import Policy

SEED_004 = Policy(match="tool", max_calls=2, max_refusals=3)
"""The seed-004 story: per tool, 2 calls a turn; refused from the 3rd; 3 refusals end the turn."""


def status(parcel_id: str) -> str:
    """What the carrier answers for a parcel (always the same: the model has no reason to ask again)."""
    return f"{parcel_id}: in transit, hub Lyon"


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it."""

    calls: list[str] = field(default_factory=list)

    async def track_parcel(self, parcel_id: str) -> str:
        """Where the parcel is now."""
        await asyncio.sleep(0)  # a real await: concurrent runs and parallel calls interleave here
        self.calls.append(parcel_id)
        return status(parcel_id)

    @property
    def tool(self) -> Tool[Any]:
        return Tool(self.track_parcel, name="track_parcel")


def guarded(
    script: Script, carrier: Carrier, policy: Policy = SEED_004, *, tools: Sequence[Tool[Any]] = (), **kwargs: Any
) -> tuple[Agent[None, Any], ScriptedModel]:
    """An agent on a scripted model with the carrier's tool (and ``tools``) and a ``RepeatGuard(policy)``."""
    model = ScriptedModel(script)
    guard = kwargs.pop("guard", None) or RepeatGuard(policy)
    agent: Agent[None, Any] = Agent(model, tools=[carrier.tool, *tools], capabilities=[guard], **kwargs)
    return agent, model
