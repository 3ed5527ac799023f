"""Shared pieces: a parcel carrier whose calls are counted, and a runner factory (no API key here)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner, Runner
from google.genai import types

APP = "parcels"
USER = "u1"
TRACKED = "FR-7731: in transit, hub Lyon"
ARGS = {"tracking_number": "FR-7731"}
REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
"""Seed 004's refusal (``count="per_turn", match="tool", max_calls=2``), word for word."""
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
"""Seed 004's stop after 3 refusals, word for word."""


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it."""

    calls: list[str] = field(default_factory=list)

    def track_parcel(self, tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        self.calls.append(tracking_number)
        return {"status": f"{tracking_number}: in transit, hub Lyon"}

    @property
    def tool(self) -> Callable[[str], dict[str, Any]]:
        def track_parcel(tracking_number: str) -> dict[str, Any]:
            """Where the parcel is now."""
            return self.track_parcel(tracking_number)

        return track_parcel


@pytest.fixture
def carrier() -> Iterator[Carrier]:
    yield Carrier()


def runner_for(agent: LlmAgent, *plugins: BasePlugin) -> Runner:
    return InMemoryRunner(app=App(name=APP, root_agent=agent, plugins=list(plugins)))


@dataclass
class Turn:
    """What the caller of one ``run_async`` saw."""

    events: list[Event]

    @property
    def final(self) -> Event:
        finals = [e for e in self.events if e.is_final_response()]
        assert finals, "no final response"
        return finals[-1]

    @property
    def final_text(self) -> str:
        content = self.final.content
        assert content is not None and content.parts
        return "".join(p.text or "" for p in content.parts)

    @property
    def tool_responses(self) -> list[Any]:
        """Every function response the turn produced, in order (what the model was handed)."""
        return [r.response for e in self.events for r in e.get_function_responses()]

    @property
    def invocation_id(self) -> str:
        return self.events[0].invocation_id


async def new_session(runner: Runner, user: str = USER) -> str:
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id=user)
    return session.id


async def run_turn(
    runner: Runner, session_id: str, message: str, *, user: str = USER, run_config: RunConfig | None = None
) -> Turn:
    content = types.Content(role="user", parts=[types.Part(text=message)])
    events = [
        event
        async for event in runner.run_async(
            user_id=user, session_id=session_id, new_message=content, run_config=run_config
        )
    ]
    return Turn(events)


_TESTS = str(Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # ``import services``, as tests/deploy does

from services import postgres_server  # noqa: E402

__all__ = ["postgres_server"]
