"""Shared pieces: a parcel carrier whose calls are counted (a real CrewAI tool), seed 004's texts, and factories of
crews and agents whose scripted model keeps asking for the same call. Every guard a test attaches is detached after
it (CrewAI's hook registries are process-global: a guard left behind would act on the next test's crew)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from crewai import Agent, Crew, Task
from crewai.hooks import clear_all_global_hooks
from crewai.hooks.dispatch import InterceptionPoint, get_hooks
from crewai.tools import BaseTool
from pydantic import BaseModel
from repeat_hooks_crewai import RepeatGuard
from repeat_hooks_crewai.testing import ScriptedLLM, keep_calling

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


class TrackArgs(BaseModel):
    tracking_number: str


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it; ``fail`` makes every call raise."""

    calls: list[str] = field(default_factory=list)
    fail: bool = False

    @property
    def tool(self) -> BaseTool:
        carrier = self

        class TrackParcel(BaseTool):
            name: str = "track_parcel"
            description: str = "Where the parcel is now."
            args_schema: type[BaseModel] = TrackArgs

            def _run(self, tracking_number: str) -> str:
                carrier.calls.append(tracking_number)
                if carrier.fail:
                    raise TimeoutError(f"carrier timeout for {tracking_number}")
                return f"{tracking_number}: in transit, hub Lyon"

        return TrackParcel()


@pytest.fixture
def carrier() -> Carrier:
    return Carrier()


@pytest.fixture(autouse=True)
def no_hooks_left() -> Iterator[None]:
    """Each test starts and ends with CrewAI's registries empty (a test that leaves a guard attached fails)."""
    clear_all_global_hooks()
    yield
    left = [hook for point in InterceptionPoint for hook in get_hooks(point)]
    clear_all_global_hooks()
    assert left == [], f"hooks left registered: {left}"


def looping_llm(parallel: int = 1) -> ScriptedLLM:
    """A model that asks for ``track_parcel(FR-7731)`` in every response."""
    return ScriptedLLM(model="scripted", then=keep_calling("track_parcel", ARGS, parallel))


def tracker(carrier: Carrier, llm: ScriptedLLM | None = None, role: str = "tracker", **options: Any) -> Agent:
    """An agent with the carrier's tool (CrewAI's cache off unless ``cache=True``: it is opt-in, agent/core.py:553)."""
    options.setdefault("cache", False)
    return Agent(
        role=role,
        goal="Tell the user where the parcel is.",
        backstory="A parcel desk.",
        llm=llm if llm is not None else looping_llm(),
        tools=[carrier.tool],
        verbose=False,
        **options,
    )


def crew_of(*agents: Agent, cache: bool = False, **options: Any) -> Crew:
    """A sequential crew with one task per agent, in order (``{message}``: the kickoff's input)."""
    tasks = [Task(description="{message}", expected_output="An answer.", agent=agent) for agent in agents]
    return Crew(agents=list(agents), tasks=tasks, cache=cache, verbose=False, **options)


def guarded(target: Any, policy: Policy = SEED_004, **options: Any) -> RepeatGuard:
    return RepeatGuard(policy, **options).attach(target)


def llm_of(agent: Agent) -> ScriptedLLM:
    llm = agent.llm
    assert isinstance(llm, ScriptedLLM)
    return llm
