"""The README blocks of the ADK adapter (its own README, in order; its section of the root README) run as
written, Gemini swapped for a scripted model at ADK's model seam (``BaseLlm``): no key here."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from readme_blocks import Blocks
from repeat_hooks_google_adk import RepeatGuardPlugin, StopReason, stop_of
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, STOPPED, Carrier, new_session, run_turn

BLOCKS = Blocks.owned_by(__file__)
GEMINI = {'model="gemini-2.5-flash"': "model=SCRIPTED"}
ROOT_SECTION = "Google ADK (`repeat-hooks-google-adk`)"


@BLOCKS.cover("Quick start", "Quick start [2]")
def test_the_readme_blocks_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the second block's SQLite file lands here
    scripted = ScriptedLlm(then=keep_calling("track_parcel", ARGS))

    namespace = BLOCKS.run("Quick start", "Quick start [2]", given={"SCRIPTED": scripted}, replace=GEMINI)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == STOPPED
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    assert type(namespace["runner"].session_service).__name__ == "DatabaseSessionService"


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(carrier: Carrier) -> None:
    agent = LlmAgent(
        name="parcel_tracker", model=ScriptedLlm(then=keep_calling("track_parcel", ARGS)), tools=[carrier.tool]
    )

    namespace = BLOCKS.run(ROOT_SECTION, given={"agent": agent})

    async def invocation() -> None:
        runner = namespace["runner"]
        session_id = await new_session(runner)
        turn = await run_turn(runner, session_id, "Keep checking FR-7731")
        stop = namespace["stop_of"](turn.final)
        assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
        assert turn.final_text == stop.message == STOPPED

    asyncio.run(invocation())
    assert carrier.calls == ["FR-7731"] * 2


@BLOCKS.cover("A shared store (`store=`)")
def test_the_store_block_keeps_the_counts_in_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, carrier: Carrier
) -> None:
    monkeypatch.chdir(tmp_path)  # guard.db lands here
    agent = LlmAgent(
        name="parcel_tracker", model=ScriptedLlm(then=keep_calling("track_parcel", ARGS)), tools=[carrier.tool]
    )
    namespace = BLOCKS.run(
        "A shared store (`store=`)",
        given={"agent": agent, "RepeatGuardPlugin": RepeatGuardPlugin, "App": App, "InMemoryRunner": InMemoryRunner},
    )

    async def invocation() -> None:
        runner = namespace["runner"]
        session_id = await new_session(runner)
        turn = await run_turn(runner, session_id, "Keep checking FR-7731")
        assert turn.final_text == STOPPED and stop_of(turn.final) is not None
        state = await SQLiteStore(tmp_path / "guard.db").load(f"parcels/u1/{session_id}")
        assert state is not None and state.turn.id == turn.invocation_id and state.turn.refusals == 3

    asyncio.run(invocation())
    assert carrier.calls == ["FR-7731"] * 2


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
