"""The README blocks of the LlamaIndex adapter run as written, in order (the model a scripted one: no key here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import readme_blocks
from repeat_hooks_llama_index import StopReason, read_state
from repeat_hooks_llama_index.testing import Script, keep_calling

from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, STOPPED, Carrier

BLOCKS = readme_blocks.Blocks.owned_by(__file__)
BLOCK_NAMES = (
    "Quick start",
    "Where the state lives: the run's `Context`",
    "A shared store: `store=`",
    "`AgentWorkflow` and handoffs",
)


@BLOCKS.cover(*BLOCK_NAMES)
def test_the_readme_blocks_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the store's file lands here

    namespace = BLOCKS.run(*BLOCK_NAMES)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == STOPPED
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    state = asyncio.run(read_state(namespace["ctx"], "Agent"))
    assert state.turn.number == 2  # the restored Context went on: its second turn
    stored = asyncio.run(SQLiteStore(tmp_path / "guard.db").load("customer-42/Agent"))
    assert stored is not None and stored.turn.id == "request-7" and stored.turn.refusals == 3
    stop = namespace["stop_of"](namespace["output"])  # the store's run: the default policy, the same script
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert set(namespace["workflow"].agents) == {"router", "specialist"}


ROOT_SECTION = "LlamaIndex (`repeat-hooks-llama-index`)"


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(
    carrier: Carrier, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = Script(then=keep_calling("track_parcel", ARGS)).llm()

    namespace = BLOCKS.run(ROOT_SECTION, given={"llm": llm, "track_parcel": carrier.tool})

    assert carrier.calls == ["FR-7731"] * 2
    stop = namespace["stop_of"](namespace["output"])
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == STOPPED and printed[1].startswith("message='I stopped")


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
