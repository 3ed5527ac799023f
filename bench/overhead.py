"""The cost of ``pre_tool_call`` against its floor, measured side by side in one process.

The floor is what any argument-aware guard must do: ``json.dumps(arguments, sort_keys=True)`` and a
dict increment. Both run interleaved (``interleave.py``: alternating which goes first), many rounds; the
figure is the median of per-round ratios, so a noisy machine moves both sides alike. Target: at most 1.5x
on typical arguments.

    .venv/bin/python bench/overhead.py
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from interleave import interleave, median_ratio

from repeat_hooks import StopRepeatedCalls, ToolCall

CASES: dict[str, dict[str, Any]] = {
    "small": {"tracking_number": "FR-7731"},
    "typical": {
        "query": "late hammock delivery",
        "order_id": "LK-640436",
        "limit": 10,
        "filters": {"status": ["open", "late"]},
    },
    "large": {"items": [{"sku": f"SKU-{i}", "quantity": i, "notes": "x" * 40} for i in range(50)]},
}
CALLS = 2_000
ROUNDS = 31


def floor(arguments: dict[str, Any]) -> Callable[[], None]:
    counts: dict[str, int] = {}

    def run() -> None:
        for _ in range(CALLS):
            key = "search\x00" + json.dumps(arguments, sort_keys=True)
            counts[key] = counts.get(key, 0) + 1

    return run


def guard(arguments: dict[str, Any]) -> Callable[[], None]:
    g = StopRepeatedCalls(max_calls=10**9)  # counts every call, refuses none
    call = ToolCall("search", arguments)

    def run() -> None:
        pre_tool_call = g.pre_tool_call
        for _ in range(CALLS):
            pre_tool_call(call)

    return run


def seconds(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    print(f"pre_tool_call vs floor (json.dumps sort_keys + dict increment), {CALLS} calls x {ROUNDS} rounds")
    for name, arguments in CASES.items():
        base, ours = floor(arguments), guard(arguments)
        times = interleave(
            {"floor": functools.partial(seconds, base), "guard": functools.partial(seconds, ours)}, ROUNDS
        )
        ratio = median_ratio(times["guard"], times["floor"])
        micros = statistics.median(times["guard"]) / CALLS * 1e6
        print(f"  {name:8s} ratio {ratio:.2f}x  (guard {micros:.2f} us/call, floor {micros / ratio:.2f} us/call)")


if __name__ == "__main__":
    main()
