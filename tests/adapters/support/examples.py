"""Each adapter's offline example tells seed 004's story: two calls of ``track_parcel`` run, the next three
are refused, the turn ends (``ignored_refusals``), and the next turn starts afresh and answers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
OFFLINE_ENV = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"}
"""The example's whole environment: no provider key (nor cloud credentials), so it runs on its scripted model
(a ``PYTHONPATH`` the tests run under is kept: a source tree not installed is what the example runs then)."""


def run_example(
    name: str, *args: str, python: Sequence[str] = (), code: int = 0, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<name>`` with ``args`` in a fresh interpreter (``python``: its own options, such as
    ``-W error``) in ``OFFLINE_ENV``; fails, showing its stderr, unless it exits with ``code``."""
    done = subprocess.run(
        [sys.executable, *python, str(EXAMPLES / name), *args],
        env={**OFFLINE_ENV, **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == code, done.stderr[-3000:]
    return done


def assert_seed_004_story(
    stdout: str, *, refused: str, ended: str, tool: str = "track_parcel", answered: bool = True
) -> None:
    """``stdout`` tells the story: the model is the scripted one, the carrier was reached 3 times in all, the
    loop breaker refused 3 calls (``refused``, a line after ``loop breaker: ``, with ``{call}`` standing for
    the call's number in the turn, 3 to 5, if the example says it) and ended the turn (``loop breaker: ended
    the turn (ignored_refusals) <ended>``), the caller got the stop message naming ``tool``, and (``answered``)
    the second turn's answer."""
    lines = stdout.splitlines()
    assert lines[0] == "model: scripted, offline"
    assert lines.count("carrier: tracked FR-7731") == 3
    assert [line for line in lines if line.startswith("loop breaker:")] == [
        *(f"loop breaker: {refused.format(call=call)}" for call in (3, 4, 5)),
        f"loop breaker: ended the turn (ignored_refusals) {ended}",
    ]
    assert f"agent (stopped: ignored_refusals): I stopped: I kept calling {tool}" in stdout
    if answered:
        assert "agent (answered): Parcel FR-7731 is still in transit" in stdout  # the next turn started afresh
    assert lines[-1] == "calls that reached the carrier: 3"
