"""The README blocks of the CrewAI adapter (its own README, in order; its section of the root README once
``tests/readme_blocks.py`` maps it here) run as written, the model a scripted one (no key here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from readme_blocks import Blocks
from repeat_hooks_crewai import StopReason
from repeat_hooks_crewai.testing import ScriptedLLM, keep_calling

from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, Carrier

ROOT_SECTION = "CrewAI (`repeat-hooks-crewai`)"
FLOW = "How it maps to CrewAI"
STORE = "A shared store: `store=`"

BLOCKS = Blocks.owned_by(__file__)


@BLOCKS.cover("Quick start", FLOW, STORE)
def test_the_readme_blocks_run_in_order(
    carrier: Carrier, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # flows.db and guard.db land here
    given = {
        "llm": ScriptedLLM(model="scripted", then=keep_calling("track_parcel", ARGS)),
        "track_parcel": carrier.tool,
    }

    namespace = BLOCKS.run("Quick start", FLOW, STORE, given=given)

    printed = capsys.readouterr().out.splitlines()  # CrewAI's flow prints its own panels in between
    assert printed[0].startswith("I stopped: I kept calling track_parcel")  # max_calls=2, 3 refusals
    assert printed[1].startswith("message='I stopped") and "IGNORED_REFUSALS" in printed[1]
    assert [line for line in printed if line.startswith("ignored_refusals ")] == [
        f"ignored_refusals {namespace['desk'].state.id}"
    ]  # the flow's stop, and its id
    assert (tmp_path / "flows.db").exists()
    assert namespace["desk"].state.repeat_hooks["parcel tracker"].startswith("{")
    state = asyncio.run(SQLiteStore(tmp_path / "guard.db").load("repeat_hooks:customer-42/parcel tracker"))
    assert state is not None and state.turn.id == "request-7" and state.turn.stop is not None
    assert state.turn.stop.reason is StopReason.IGNORED_REFUSALS
    assert carrier.calls == ["FR-7731"] * 6  # two calls in each of the three kickoffs


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(carrier: Carrier) -> None:
    llm = ScriptedLLM(model="scripted", then=keep_calling("track_parcel", ARGS))

    namespace = BLOCKS.run(ROOT_SECTION, given={"llm": llm, "track_parcel": carrier.tool})

    assert carrier.calls == ["FR-7731"] * 2
    stop = namespace["stop_of"](namespace["crew"])
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
