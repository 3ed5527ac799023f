"""What the coding CLIs' hook commands cost per tool call: the whole process, side by side with a bare Python hook.

Each command runs in a fresh subprocess with its CLI's pre-tool event on stdin (Claude Code's and Codex's
``PreToolUse``, Gemini CLI's ``BeforeTool``: a shell call, a fresh command or call id each round, so every round is
decided and written in the store on disk), timed by
the wall clock, interleaved with the bare hook (``interleave.py``), ``RUNS`` rounds after a warm-up. Printed: each
side's median and quartiles in ms, and the median of per-round ratios. Target (issue 29): at most 2x the bare hook.
Twice: with the resident hook server (``repeat_hooks.kit.resident``, the default: the first call starts it, in a
socket folder of the bench's own, stopped at the end: start-up, the client's imports, the event handed over a Unix
socket, the server's settings, transaction and answer) and with ``REPEAT_HOOKS_RESIDENT=off`` (a process per call:
start-up, pydantic and the core's models, settings, the transaction, the answer).

    .venv/bin/python bench/coding_cli_hooks.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from interleave import interleave, median_ratio

RUNS = 31
SCRIPT = os.path.join(os.path.dirname(sys.executable), "repeat-hooks")
BARE = "import json, sys; event = json.load(sys.stdin); print(json.dumps({'decision': 'allow'}))"


def claude_code(number: int) -> bytes:
    """A ``PreToolUse`` event as Claude Code 2.1.332 sends it, with a fresh ``tool_use_id``."""
    return json.dumps(
        {
            "session_id": "b667f1d2-0793-4823-9f6a-e83b2e0b3d3b",
            "transcript_path": "/home/user/.claude/projects/-work/b667f1d2.jsonl",
            "cwd": "/work",
            "prompt_id": "8a93d0f3-eb5f-4bda-bed6-506aa6409424",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": f"pytest -q tests/test_{number % 7}.py", "description": "Run the tests"},
            "tool_use_id": f"toolu_{number:08d}",
        }
    ).encode()


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
    done = subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    return seconds


def main() -> None:
    from repeat_hooks.kit.sandbox import resident_folder

    home = tempfile.mkdtemp(prefix="repeat-hooks-bench-")
    with resident_folder() as sockets:
        for mode in (str(sockets), "off"):
            env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REPEAT_HOOKS_RESIDENT": mode}
            measure(env, "one process per call" if mode == "off" else "with the resident server")


def measure(env: dict[str, str], how: str) -> None:
    counter = iter(range(10**9))
    events: dict[str, Callable[[int], bytes]] = {"claude-code": claude_code, "gemini-cli": gemini, "codex": codex}
    samples = {
        f"repeat-hooks hook {cli}": (lambda cli=cli, make=make: timed([SCRIPT, "hook", cli], make(next(counter)), env))
        for cli, make in events.items()
    }
    samples["bare Python hook"] = lambda: timed([sys.executable, "-c", BARE], codex(next(counter)), env)
    figures = interleave(samples, RUNS, warmup=2)
    print(f"coding CLIs' hook processes, {how}, {RUNS} interleaved rounds ({sys.version.split()[0]}):")
    for name, seconds in figures.items():
        q1, median, q3 = statistics.quantiles([s * 1000 for s in seconds], n=4)
        print(f"  {name:32s} median {median:6.1f} ms  [{q1:.1f} - {q3:.1f}]")
    for cli in events:
        ratio = median_ratio(figures[f"repeat-hooks hook {cli}"], figures["bare Python hook"])
        print(f"  {cli}: ratio (median of per-round ratios) {ratio:.2f}x  (target: at most 2x)")


if __name__ == "__main__":
    main()
