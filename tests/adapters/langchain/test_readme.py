"""The README's Python runs as written, block after block in one namespace (a reader's session), with a
scripted model and a carrier standing in for the reader's own, and with the test extra's packages hidden:
the blocks need nothing more than ``pip install repeat-hooks-langchain``. So does the root README's section."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_parcels import ARGS, Carrier
from langgraph.checkpoint.memory import InMemorySaver
from readme_blocks import Blocks
from repeat_hooks_langchain import Policy, RepeatGuardMiddleware, TokenPrices
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling

BLOCKS = Blocks.owned_by(__file__)
QUICK_START, REVIEW = "repeat-hooks-langchain", "With a human reviewer (`HumanInTheLoopMiddleware`)"
STORE = "Several processes: `store=`"
ROOT_SECTION = "LangChain v1 (`repeat-hooks-langchain`)"
TEST_EXTRA = (
    "langchain_mcp_adapters",
    "langgraph.checkpoint.postgres",
    "langgraph.checkpoint.sqlite",
    "psycopg",
    "psycopg_pool",
)
"""Modules of the adapter's ``test`` extra (``adapters/langchain/pyproject.toml``): none may be imported."""


@BLOCKS.cover(QUICK_START, STORE, REVIEW)
def test_every_python_block_runs_as_written_with_the_adapter_alone(
    carrier: Carrier, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in TEST_EXTRA:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    namespace = BLOCKS.run(QUICK_START, given={"model": model, "track_parcel": carrier.tool})

    stop = namespace["stop_of"](namespace["result"])
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert stop is not None and stop.message.startswith("I stopped")
    assert namespace["result"]["messages"][-1].content == stop.message

    namespace["request_id"] = uuid.uuid4()
    database = str(tmp_path / "guard-states.db")
    BLOCKS.run(STORE, namespace=namespace, replace={'"guard-states.db"': repr(database)})

    stop = namespace["stop_of"](namespace["result"])
    assert carrier.calls == ["FR-7731"] * 4 and "repeat_guard" not in namespace["result"]
    assert stop is not None and stop.message.startswith("I stopped")
    saved = asyncio.run(namespace["store"].load("customer-44"))
    assert saved is not None and saved.turn.stop == stop

    carrier.calls.clear()
    BLOCKS.run(REVIEW, namespace=namespace)

    stop = namespace["stop_of"](namespace["result"])
    assert carrier.calls == ["FR-7731"] * 2  # 2 approved and run; the refused calls were never shown
    assert stop is not None and stop.message.startswith("I stopped")
    assert not namespace["result"].get("__interrupt__")


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    given: dict[str, Any] = {"model": model, "track_parcel": carrier.tool, "checkpointer": InMemorySaver()}

    namespace = BLOCKS.run(ROOT_SECTION, given=given)

    stop = namespace["stop_of"](namespace["result"])
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert stop is not None and namespace["result"]["messages"][-1].content == stop.message


def test_the_spellings_the_readme_gives_are_the_same_guard() -> None:
    assert RepeatGuardMiddleware(Policy(max_calls=2, max_refusals=3)).policy == (
        RepeatGuardMiddleware(max_calls=2, max_refusals=3).policy
    )
    guard = RepeatGuardMiddleware(max_cost_usd=0.50, cost=TokenPrices(2.0, 8.0))
    assert guard.policy.max_cost_usd == 0.50


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
