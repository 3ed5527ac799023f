"""What the Gemini CLI and Codex hook commands cost per tool call: the whole process, side by side with a bare Python
hook (``claude_code_hook.py`` does the same for Claude Code, with the import breakdown).

Each command runs in a fresh subprocess with its CLI's pre-tool event on stdin (Gemini CLI's ``BeforeTool``, Codex's
``PreToolUse``: a shell call, a fresh command or call id each round, so every round is decided and written), timed by
the wall clock, interleaved with the bare hook (``interleave.py``), ``RUNS`` rounds after a warm-up. Printed: each
side's median and quartiles in ms, and the median of per-round ratios. Target (issue 29): at most 2x the bare hook.
Twice: with the resident hook server (``repeat_hooks.kit.resident``, the default: the first call starts it, in a
socket folder of the bench's own, stopped at the end) and with ``REPEAT_HOOKS_RESIDENT=off`` (a process per call).

    .venv/bin/python bench/coding_cli_hooks.py
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from interleave import interleave, median_ratio

RUNS = 31
SCRIPT = os.path.join(os.path.dirname(sys.executable), "repeat-hooks")
BARE = "import json, sys; event = json.load(sys.stdin); print(json.dumps({'decision': 'allow'}))"


def gemini(number: int) -> bytes:
    """A ``BeforeTool`` event as Gemini CLI 0.61.0 sends it (no call id: the command differs each round)."""
    return json.dumps(
        {
            "session_id": "2b761e7e-685f-4c58-92fd-9f41d1b7f753",
            "transcript_path": "/home/user/.gemini/tmp/project/chats/session-2b761e7e.jsonl",
            "cwd": "/work",
            "hook_event_name": "BeforeTool",
            "timestamp": "2026-12-01T20:10:43.128Z",
            "tool_name": "run_shell_command",
            "tool_input": {"command": f"pytest -q tests/test_{number}.py", "description": "Run the tests"},
        }
    ).encode()


def codex(number: int) -> bytes:
    """A ``PreToolUse`` event as Codex 0.169.0 sends it, with a fresh ``tool_use_id``."""
    return json.dumps(
        {
            "session_id": "01a23341-6903-7b91-ba04-f74cda2ebd59",
            "turn_id": "01a23341-6928-7813-9c21-1ede6484b96c",
            "transcript_path": "/home/user/.codex/sessions/rollout-01a23341.jsonl",
            "cwd": "/work",
            "hook_event_name": "PreToolUse",
            "model": "gpt-5.1-codex",
            "permission_mode": "bypassPermissions",
            "tool_name": "Bash",
            "tool_input": {"command": f"pytest -q tests/test_{number % 7}.py"},
            "tool_use_id": f"call_{number:08d}",
        }
    ).encode()


def timed(command: list[str], stdin: bytes, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    from repeat_hooks.kit import resident

    home = tempfile.mkdtemp(prefix="repeat-hooks-bench-")
    for mode in (os.path.join(home, "run"), "off"):
        env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), resident.RESIDENT_ENV: mode}
        try:
            measure(env, "one process per call" if mode == "off" else "with the resident server")
        finally:
            for socket in Path(mode).glob("*.sock") if mode != "off" else ():
                info = resident.status(socket)
                if info and isinstance(info.get("pid"), int):
                    os.kill(info["pid"], signal.SIGTERM)  # a server this bench started, in its own folder


def measure(env: dict[str, str], how: str) -> None:
    counter = iter(range(10**9))
    events: dict[str, Callable[[int], bytes]] = {"gemini-cli": gemini, "codex": codex}
    samples = {
        f"repeat-hooks hook {cli}": (lambda cli=cli, make=make: timed([SCRIPT, "hook", cli], make(next(counter)), env))
        for cli, make in events.items()
    }
    samples["bare Python hook"] = lambda: timed([sys.executable, "-c", BARE], codex(next(counter)), env)
    figures = interleave(samples, RUNS, warmup=2)
    print(f"Gemini CLI and Codex hook processes, {how}, {RUNS} interleaved rounds ({sys.version.split()[0]}):")
    for name, seconds in figures.items():
        q1, median, q3 = statistics.quantiles([s * 1000 for s in seconds], n=4)
        print(f"  {name:32s} median {median:6.1f} ms  [{q1:.1f} - {q3:.1f}]")
    for cli in events:
        ratio = median_ratio(figures[f"repeat-hooks hook {cli}"], figures["bare Python hook"])
        print(f"  {cli}: ratio (median of per-round ratios) {ratio:.2f}x  (target: at most 2x)")


if __name__ == "__main__":
    main()
