"""What a ``DigestRecorder`` adds to a guarded tool call, as adapters pay it: side by side in one process.

The recorder runs in the hook call (on the event loop's thread in an async SDK) and writes there: per tool
call, a call line when ``pre_tool_call`` decides it and an outcome line when ``post_tool_call`` records it,
each a blocking ``write`` to the file (no ``fsync``). Both sides run the same workload, built the same way
before the clock starts (as ``overhead.py`` builds it): a fresh ``StopRepeatedCalls`` (``max_calls`` so large
that it refuses none) and ``CALLS`` fresh calls in turns of ``TURN`` (``pre_agent_turn`` every ``TURN``
calls), each call's arguments and result ``json.loads`` copies and its id new (``call_<n>``), so no object or
id is ever seen twice. Timed, per call: ``ToolCall(name, arguments, call_id=...)``, ``pre_tool_call`` then
``post_tool_call(call, result=...)``, in a conversation's scope. ``bare``: no observer; ``recorded``: a
recorder installed on a fresh temporary folder (rotating at its default 16 MB). Interleaved rounds
(``interleave.py``), wall-clock time (the writes' waiting counts), after a garbage collection; the figure is
the median of per-round ratios (their quartiles in brackets), so a noisy machine moves both sides alike.

    .venv/bin/python bench/recording_overhead.py
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from interleave import interleave, median_ratio

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.observe import scope
from repeat_hooks.offline.recording import DigestRecorder

NAME = "search"
CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "small": ({"tracking_number": "FR-7731"}, "in transit"),
    "typical": (
        {"query": "late hammock delivery", "order_id": "LK-640436", "limit": 10, "filters": {"status": ["late"]}},
        {"order_id": "LK-640436", "status": "late", "eta": "2026-12-04", "items": [{"sku": "H-1", "qty": 1}]},
    ),
}
CALLS = 1_000
TURN = 200
ROUNDS = 21
UNLIMITED = 10**9  # max_calls: counts every call, refuses none

Turns = list[list[tuple[Any, Any, str]]]  # per turn: (arguments, result, call id) of each call
_ids = itertools.count()


def workload(case: str) -> Turns:
    """``CALLS`` calls in turns of ``TURN``: fresh copies of the case's arguments and result, fresh call ids."""
    arguments, result = (json.dumps(value) for value in CASES[case])
    calls = [(json.loads(arguments), json.loads(result), f"call_{next(_ids)}") for _ in range(CALLS)]
    return [calls[start : start + TURN] for start in range(0, CALLS, TURN)]


def seconds(case: str, folder: Path | None) -> float:
    """Wall seconds of a fresh workload on a fresh guard, with a recorder installed on a fresh folder under
    ``folder`` around it (none for ``None``); the workload, the guard and the recorder are built untimed."""
    turns = workload(case)
    guard = StopRepeatedCalls(max_calls=UNLIMITED)
    pre_agent_turn, pre_tool_call, post_tool_call = guard.pre_agent_turn, guard.pre_tool_call, guard.post_tool_call
    where = Path(tempfile.mkdtemp(dir=folder)) if folder is not None else None
    recorder = DigestRecorder(where).install() if where is not None else None
    try:
        gc.collect()
        start = time.perf_counter()
        with scope(conversation_id="bench"):
            for turn in turns:
                pre_agent_turn()
                for arguments, result, call_id in turn:
                    call = ToolCall(NAME, arguments, call_id=call_id)
                    pre_tool_call(call)
                    post_tool_call(call, result=result)
        elapsed = time.perf_counter() - start
    finally:
        if recorder is not None:
            recorder.uninstall()
        if where is not None:
            shutil.rmtree(where)
    if guard.events:
        raise RuntimeError(f"expected no refusal, got {guard.events}")
    return elapsed


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="repeat-hooks-bench-"))
    try:
        print(
            f"a tool call (ToolCall + pre_tool_call + post_tool_call), DigestRecorder vs none: wall time, median "
            f"of {ROUNDS} interleaved rounds of {CALLS} calls (a fresh guard, fresh objects and ids each round; "
            f"turns of {TURN} calls)"
        )
        for case in CASES:
            times = interleave(
                {
                    "bare": functools.partial(seconds, case, None),
                    "recorded": functools.partial(seconds, case, folder),
                },
                ROUNDS,
            )
            ratio = median_ratio(times["recorded"], times["bare"])
            ratios = [over / base for over, base in zip(times["recorded"], times["bare"], strict=True)]
            low, _, high = statistics.quantiles(ratios, n=4)
            bare, recorded = (statistics.median(times[name]) / CALLS * 1e6 for name in ("bare", "recorded"))
            print(
                f"  {case:8s} ratio {ratio:.2f}x  [quartiles {low:.2f}-{high:.2f}]  (recorded {recorded:.1f} "
                f"us/call, bare {bare:.1f} us/call: +{recorded - bare:.1f} us for its 2 lines)"
            )
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
