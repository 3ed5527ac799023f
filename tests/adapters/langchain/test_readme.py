"""The README's Python runs as written, with a scripted model and a carrier standing in for the reader's own."""

from __future__ import annotations

import re
from pathlib import Path

from langchain_parcels import ARGS, Carrier
from repeat_hooks_langchain import Policy, RepeatGuardMiddleware, TokenPrices
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling

README = Path(__file__).resolve().parents[3] / "adapters" / "langchain" / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_quick_start_runs_and_stops_the_loop(carrier: Carrier) -> None:
    (quick_start,) = python_blocks()
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    namespace = {"model": model, "track_parcel": carrier.tool}

    exec(compile(quick_start, str(README), "exec"), namespace)

    stop = namespace["stop_of"](namespace["result"])  # type: ignore[operator]
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert stop is not None and stop.message.startswith("I stopped")
    assert namespace["result"]["messages"][-1].content == stop.message  # type: ignore[index]


def test_the_spellings_the_readme_gives_are_the_same_guard() -> None:
    assert RepeatGuardMiddleware(Policy(max_calls=2, max_refusals=3)).policy == (
        RepeatGuardMiddleware(max_calls=2, max_refusals=3).policy
    )
    guard = RepeatGuardMiddleware(max_cost_usd=0.50, cost=TokenPrices(2.0, 8.0))
    assert guard.policy.max_cost_usd == 0.50
