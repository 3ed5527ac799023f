"""The README blocks of the Strands adapter (its own README, in order; its section of the root README) run as
written, the model a scripted one (no key here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from readme_blocks import Blocks
from repeat_hooks_strands import StopReason
from repeat_hooks_strands.testing import ScriptedModel, keep_calling

from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, STOPPED, Carrier

BLOCKS = Blocks.owned_by(__file__)
ROOT_SECTION = "Strands Agents (`repeat-hooks-strands`)"
STORE = "A shared store: `store=`"


@BLOCKS.cover("Quick start", "Quick start [2]", STORE)
def test_the_readme_blocks_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the second block's sessions directory and the third's store land here

    namespace = BLOCKS.run("Quick start", "Quick start [2]", STORE)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling track_parcel")
    stops = [line for line in printed if line.startswith("message='I stopped")]
    assert len(stops) == 2 and all("reason=<StopReason.IGNORED_REFUSALS" in line for line in stops)  # both blocks
    assert (tmp_path / "sessions" / "session_customer-42").is_dir()
    state = asyncio.run(SQLiteStore(tmp_path / "guard.db").load("repeat_hooks:customer-42/default/Strands Agents"))
    assert state is not None and state.turn.id == "request-7" and state.turn.refusals == 3
    assert namespace["agent"].state.get("repeat_hooks") is None


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(
    carrier: Carrier, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))

    namespace = BLOCKS.run(ROOT_SECTION, given={"model": model, "track_parcel": carrier.tool})

    assert carrier.calls == ["FR-7731"] * 2
    stop = namespace["stop_of"](namespace["agent"])
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    printed = capsys.readouterr().out.splitlines()  # Strands' default callback handler prints too
    assert STOPPED in printed and printed[-1].startswith("message='I stopped")


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
