"""The README's Python runs as written, block after block in one namespace (a reader's session), with a
scripted model and a carrier standing in for the reader's own, and with the test extra's packages hidden:
the blocks need nothing more than ``pip install repeat-hooks-langchain``."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_parcels import ARGS, Carrier
from repeat_hooks_langchain import Policy, RepeatGuardMiddleware, TokenPrices
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling

README = Path(__file__).resolve().parents[3] / "adapters" / "langchain" / "README.md"
TEST_EXTRA = (
    "langchain_mcp_adapters",
    "langgraph.checkpoint.postgres",
    "langgraph.checkpoint.sqlite",
    "psycopg",
    "psycopg_pool",
)
"""Modules of the adapter's ``test`` extra (``adapters/langchain/pyproject.toml``): none may be imported."""


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_every_python_block_runs_as_written_with_the_adapter_alone(
    carrier: Carrier, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in TEST_EXTRA:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    namespace: dict[str, Any] = {"model": model, "track_parcel": carrier.tool}
    quick_start, review = python_blocks()  # a new block needs its own checks below

    exec(compile(quick_start, str(README), "exec"), namespace)

    stop = namespace["stop_of"](namespace["result"])
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert stop is not None and stop.message.startswith("I stopped")
    assert namespace["result"]["messages"][-1].content == stop.message

    exec(compile(review, str(README), "exec"), namespace)

    stop = namespace["stop_of"](namespace["result"])
    assert carrier.calls == ["FR-7731"] * 4  # 2 approved and run; the refused calls were never shown
    assert stop is not None and stop.message.startswith("I stopped")
    assert not namespace["result"].get("__interrupt__")


def test_the_spellings_the_readme_gives_are_the_same_guard() -> None:
    assert RepeatGuardMiddleware(Policy(max_calls=2, max_refusals=3)).policy == (
        RepeatGuardMiddleware(max_calls=2, max_refusals=3).policy
    )
    guard = RepeatGuardMiddleware(max_cost_usd=0.50, cost=TokenPrices(2.0, 8.0))
    assert guard.policy.max_cost_usd == 0.50
