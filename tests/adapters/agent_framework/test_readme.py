"""The README blocks of the Agent Framework adapter (its own README, in order; its section of the root README) run as
written, the model a scripted chat client (no key here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from readme_blocks import ROOT, Blocks
from repeat_hooks_agent_framework import StopReason
from repeat_hooks_agent_framework.testing import ScriptedClient, keep_calling

from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, STOPPED, Carrier

ROOT_SECTION = "Microsoft Agent Framework (`repeat-hooks-agent-framework`)"
STORE = "A shared store: `store=`"
BLOCKS = Blocks.owned_by(__file__)


@BLOCKS.cover("Quick start", "Quick start [2]", STORE)
def test_the_readme_blocks_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the third block's store lands here

    namespace = BLOCKS.run("Quick start", "Quick start [2]", STORE)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == STOPPED
    stops = [line for line in printed if line.startswith("message='I stopped")]
    assert len(stops) == 3 and all("reason=<StopReason.IGNORED_REFUSALS" in line for line in stops)
    assert namespace["session"].state["repeat_hooks"]  # the restored session, its second turn counted in it
    state = asyncio.run(SQLiteStore(tmp_path / "guard.db").load("repeat_hooks:customer-42/tracker"))
    assert state is not None and state.turn.id == "request-7" and state.turn.refusals == 3


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_client(
    carrier: Carrier, capsys: pytest.CaptureFixture[str]
) -> None:
    client = ScriptedClient(then=keep_calling("track_parcel", ARGS))

    namespace = BLOCKS.run(ROOT_SECTION, given={"client": client, "track_parcel": carrier.tool})

    assert carrier.calls == ["FR-7731"] * 2
    stop = namespace["stop_of"](namespace["response"])
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert capsys.readouterr().out.splitlines()[0] == STOPPED


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
    assert (ROOT / "adapters/agent_framework/README.md").exists()
