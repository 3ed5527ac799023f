"""The README blocks of the pydantic-ai adapter (its own README, in order, as one reader's session; and its
section of the root README) run as written, the model a scripted one (no key here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pai_parcels import Carrier
from readme_blocks import Blocks
from repeat_hooks_pydantic_ai import StopReason
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling

BLOCKS = Blocks.owned_by(__file__)
QUICK_START, RAISE, APPROVALS, SPEC = "Quick start", "How it works", "How it works [2]", "How it works [3]"
TEMPORAL = "Durable execution (Temporal)"
STORE = "Where the state lives: `store=`"
ROOT_SECTION = "pydantic-ai (`repeat-hooks-pydantic-ai`)"


@BLOCKS.cover(QUICK_START, RAISE, APPROVALS, SPEC, TEMPORAL)
def test_the_readme_blocks_run_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = BLOCKS.run(QUICK_START, RAISE, APPROVALS, SPEC, TEMPORAL)

    printed = capsys.readouterr().out.splitlines()
    # Quick start: the seed-004 story with the default policy's count (the same result twice, then refused).
    assert printed[0].startswith("I stopped: I kept calling track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    assert printed[2].startswith("[('track_parcel', Refusal(") and printed[2].count("('track_parcel'") == 3
    # on_stop="raise"
    assert printed[3] == "ignored_refusals"
    # Approvals: asked once, run once.
    assert printed[4:6] == ["['A-1']", "ignored_refusals"]
    assert namespace["refunds"] == ["A-1"]
    # The spec and the Temporal agent were built.
    agent = namespace["agent"]
    assert type(agent).__name__ == "Agent"
    assert len(printed) == 6


@BLOCKS.cover(STORE)
def test_the_store_block_keeps_the_counts_in_the_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    database = tmp_path / "states.db"
    namespace = BLOCKS.run(QUICK_START, STORE, replace={'"guard-states.db"': repr(str(database))})

    assert capsys.readouterr().out.splitlines()[-1] == "ignored_refusals"
    saved = asyncio.run(namespace["guard"].core.store.load("conv-42"))
    assert saved is not None and saved.turn.id == "request-7" and saved.turn.refusals == 3
    assert database.exists()


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(carrier: Carrier) -> None:
    model = ScriptedModel(keep_calling("track_parcel", {"parcel_id": "FR-7731"}))

    namespace = BLOCKS.run(ROOT_SECTION, given={"model": model, "track_parcel": carrier.tool})

    assert carrier.calls == ["FR-7731"] * 2
    result = namespace["result"]
    stop = namespace["stop_of"](result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and result.output == stop.message
    assert [tool for tool, _ in namespace["refusals_of"](result)] == ["track_parcel"] * 3


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
