"""What the Claude Code hook command costs per tool call: the whole process, side by side with a bare Python hook.

Claude Code spawns its hook command for every tool call (``PreToolUse``; ``PostToolUse`` after it, the same again),
so what matters is the wall time of one process, from spawn to exit. Three commands, each run in a fresh subprocess
with a ``PreToolUse`` event on stdin (a ``Bash`` call, a fresh ``tool_use_id`` each round, so every round is decided
and written), timed by the wall clock:

- ``repeat-hooks hook claude-code`` with its resident server running (as every call after a session's first finds
  it: ``repeat_hooks.kit.resident``): start-up, the client's imports, the event handed to the server over its socket,
  which reads the settings, runs the SQLite transaction (read, decide, write) and answers;
- the same with ``REPEAT_HOOKS_RESIDENT=off``, the whole hook in its own process: start-up, imports (pydantic and
  the core's models), settings, the transaction, the answer;
- a bare Python hook, the floor any Python hook pays (interpreter start-up): ``python -c`` reading the event from
  stdin with ``json`` and printing a JSON answer.

They run interleaved (``interleave.py``: alternating which goes first), ``RUNS`` rounds after a warm-up (which writes
any missing bytecode and creates the store). Printed: each side's median and quartiles in ms, and the median of
per-round ratios. Then the hook path's top import costs (``-X importtime``, cumulative, the modules that cost the most
under ``repeat_hooks`` and outside it). Target (issue 29): at most 2x the bare hook.

    .venv/bin/python bench/claude_code_hook.py
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
from pathlib import Path

from interleave import interleave, median_ratio

from repeat_hooks.kit import resident

RUNS = 41
SCRIPT = Path(sys.executable).parent / "repeat-hooks"
BARE = (
    "import json, sys; event = json.load(sys.stdin); "
    "print(json.dumps({'hookSpecificOutput': {'hookEventName': event['hook_event_name']}}))"
)


def event(number: int) -> bytes:
    """A ``PreToolUse`` event of one session (its turn's ``prompt_id``), with a fresh ``tool_use_id``."""
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


def timed(command: list[str], stdin: bytes, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    home = tempfile.mkdtemp(prefix="repeat-hooks-bench-")
    sockets = tempfile.mkdtemp(prefix="rh-bench-", dir="/tmp")  # short: a socket's path is at most ~100 bytes
    os.chmod(sockets, 0o700)
    env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REPEAT_HOOKS_RESIDENT": "off"}
    warm = {**env, "REPEAT_HOOKS_RESIDENT": sockets}
    counter = iter(range(10**9))
    hook = [str(SCRIPT), "hook", "claude-code"]
    timed(hook, event(next(counter)), warm)  # starts the resident server, for the "resident" side
    path = resident.address(warm)
    deadline = time.monotonic() + 30
    while path is None or resident.status(path) is None:
        if time.monotonic() > deadline:
            raise SystemExit("the resident server did not start")
        time.sleep(0.05)
    samples = {
        "resident (server running)": lambda: timed(hook, event(next(counter)), warm),
        "own process (resident off)": lambda: timed(hook, event(next(counter)), env),
        "bare Python hook": lambda: timed([sys.executable, "-c", BARE], event(next(counter)), env),
    }
    try:
        figures = interleave(samples, RUNS, warmup=2)
    finally:
        found = resident.status(path)
        if found is not None:
            os.kill(int(found["pid"]), signal.SIGTERM)
    print(f"Claude Code hook process, wall time, {RUNS} interleaved rounds ({sys.version.split()[0]}):")
    for name, seconds in figures.items():
        q1, median, q3 = statistics.quantiles([s * 1000 for s in seconds], n=4)
        print(f"  {name:32s} median {median:6.1f} ms  [{q1:.1f} - {q3:.1f}]")
    for name in ("resident (server running)", "own process (resident off)"):
        ratio = median_ratio(figures[name], figures["bare Python hook"])
        print(f"  {name} / bare hook (median of per-round ratios): {ratio:.2f}x  (target: at most 2x)")
    state = Path(home) / ".local" / "state" / "repeat-hooks" / "hooks.sqlite3"
    print(f"  the store: {state} ({state.stat().st_size // 1024} KiB)")

    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(SCRIPT), "hook", "claude-code"],
        input=event(next(counter)),
        capture_output=True,
        env=env,
        check=True,
    )
    rows = []
    for line in done.stderr.decode().splitlines():
        if line.startswith("import time:") and "|" in line:
            _, self_us, total_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
            if total_us.isdigit():
                rows.append((int(total_us), int(self_us), name))
    shown = ("repeat_hooks", "pydantic", "repeat_hooks.decision", "repeat_hooks.state", "repeat_hooks.policy")
    shown += ("repeat_hooks.observe", "repeat_hooks.hook", "repeat_hooks._moved", "logging", "repeat_hooks.kit.core")
    shown += ("repeat_hooks_claude_code.guard", "repeat_hooks.kit.command", "repeat_hooks.stores.sqlite")
    top = [row for row in rows if row[2] in shown]
    print("Top import costs on the hook path (-X importtime, cumulative ms, each with what it imports first):")
    for total_us, _, name in sorted(top, reverse=True):
        print(f"  {name:40s} {total_us / 1000:6.1f}")
    print("  the largest self times:")
    for _, self_us, name in sorted(rows, key=lambda row: row[1], reverse=True)[:10]:
        print(f"  {name:40s} {self_us / 1000:6.1f}")


if __name__ == "__main__":
    main()
