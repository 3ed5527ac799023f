"""What a ``DigestRecorder`` adds to a guarded tool call, measured side by side in one process.

The recorder runs in the hook call (on the event loop's thread in an async SDK) and writes there: per tool
call, a call line when ``pre_tool_call`` decides it and an outcome line when ``post_tool_call`` records it,
each a blocking ``write`` + ``flush`` to the file (no ``fsync``). Both sides run the same calls, in a
conversation's scope: ``pre_tool_call`` then ``post_tool_call``, the guard deciding afresh each time (it
refuses none). ``bare``: no observer; ``recorded``: a recorder installed on a temporary folder (rotating at
its default 16 MB). Interleaved rounds (``interleave.py``), wall-clock time (the writes' waiting counts); the
figure is the median of per-round ratios, so a noisy machine moves both sides alike.

    .venv/bin/python bench/recording_overhead.py
"""

from __future__ import annotations

import functools
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interleave import interleave, median_ratio

from repeat_hooks import StopRepeatedCalls, ToolCall
from repeat_hooks.observe import scope
from repeat_hooks.offline.recording import DigestRecorder

CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "small": ({"tracking_number": "FR-7731"}, "in transit"),
    "typical": (
        {"query": "late hammock delivery", "order_id": "LK-640436", "limit": 10, "filters": {"status": ["late"]}},
        {"order_id": "LK-640436", "status": "late", "eta": "2026-12-04", "items": [{"sku": "H-1", "qty": 1}]},
    ),
}
CALLS = 1_000
ROUNDS = 21


def calls(arguments: dict[str, Any], result: Any) -> Callable[[], None]:
    """``CALLS`` guarded tool calls, decided and recorded, in one conversation's turn."""
    guard = StopRepeatedCalls(max_calls=10**9)  # counts every call, refuses none
    call = ToolCall("search", arguments)

    def run() -> None:
        with scope(conversation_id="bench"):
            guard.pre_agent_turn()
            for _ in range(CALLS):
                guard.pre_tool_call(call)
                guard.post_tool_call(call, result=result)

    return run


def seconds(run: Callable[[], None], folder: Path | None) -> float:
    """Wall seconds of ``run``, with a recorder on ``folder`` installed around it (none for ``None``)."""
    recorder = DigestRecorder(folder).install() if folder is not None else None
    try:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    finally:
        if recorder is not None:
            recorder.uninstall()


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="repeat-hooks-bench-"))
    try:
        print(f"a tool call (pre_tool_call + post_tool_call), DigestRecorder vs none: {CALLS} calls x {ROUNDS}")
        for name, (arguments, result) in CASES.items():
            run = calls(arguments, result)
            times = interleave(
                {
                    "bare": functools.partial(seconds, run, None),
                    "recorded": functools.partial(seconds, run, folder / name),
                },
                ROUNDS,
            )
            ratio = median_ratio(times["recorded"], times["bare"])
            bare = statistics.median(times["bare"]) / CALLS * 1e6
            recorded = statistics.median(times["recorded"]) / CALLS * 1e6
            print(
                f"  {name:8s} ratio {ratio:.2f}x  (recorded {recorded:.1f} us/call, bare {bare:.1f} us/call: "
                f"+{recorded - bare:.1f} us for its 2 lines)"
            )
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
