"""Two invocations of one session at once: what ADK guarantees, and what the guard does then."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.errors import StaleSessionError
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, InMemorySessionService
from repeat_hooks_google_adk import RepeatGuardPlugin, read_state
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks import Policy

from .conftest import APP, ARGS, STOPPED, USER, Turn, run_turn


def overlapping_runner(service: BaseSessionService, calls: list[str]) -> tuple[Runner, ScriptedLlm]:
    async def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        await asyncio.sleep(0.005)  # the two invocations interleave here
        return {"status": "in transit"}

    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel])
    plugin = RepeatGuardPlugin(Policy(match="tool", max_calls=2, max_refusals=3))
    return Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]), session_service=service), model


async def test_a_database_session_lets_one_overlapping_invocation_through(tmp_path: Path) -> None:
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}")
    calls: list[str] = []
    runner, _ = overlapping_runner(service, calls)
    session = await service.create_session(app_name=APP, user_id=USER)

    results = await asyncio.gather(
        run_turn(runner, session.id, "Keep checking FR-7731"),
        run_turn(runner, session.id, "Keep checking FR-7731"),
        return_exceptions=True,
    )

    # ADK's optimistic check: the invocation that appends to a session changed since it loaded it fails
    # with StaleSessionError. The other one is guarded as if it ran alone.
    winners = [r for r in results if isinstance(r, Turn)]
    losers = [r for r in results if isinstance(r, StaleSessionError)]
    assert len(winners) == 1 and len(losers) == 1
    assert winners[0].final_text == STOPPED
    assert calls == ["FR-7731"] * 2
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    state = read_state(stored)
    assert state.turn.id == winners[0].invocation_id
    assert state.turn.responses == 5 and state.turn.refusals == 3


async def test_an_in_memory_session_runs_both_each_counted_on_its_own() -> None:
    service = InMemorySessionService()
    calls: list[str] = []
    runner, model = overlapping_runner(service, calls)
    session = await service.create_session(app_name=APP, user_id=USER)

    first, second = await asyncio.gather(
        run_turn(runner, session.id, "Keep checking FR-7731"),
        run_turn(runner, session.id, "Keep checking FR-7731"),
    )

    # No optimistic check: both run, each on its own copy of the session, each stopped exactly.
    assert first.final_text == second.final_text == STOPPED
    assert calls == ["FR-7731"] * 4
    assert model.calls == 10
    # The stored guard state is the one written last: one of the two turns.
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    assert read_state(stored).turn.id in {first.invocation_id, second.invocation_id}
