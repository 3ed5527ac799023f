"""examples/claude_agent_sdk_parcel_tracker.py tells the seed-004 story offline on the real CLI, and the CLI
talks to nothing but the scripted model on loopback: the run happens in a network namespace that has only
``lo`` (when this runs as root with ``unshare`` and ``ip``), under ``strace``, and every connection the run
opens (the CLI's and Python's) must go to 127.0.0.1 or a Unix socket."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from services import missing_service  # type: ignore[import-not-found]
from support.examples import EXAMPLES, assert_seed_004_story

EXAMPLE = EXAMPLES / "claude_agent_sdk_parcel_tracker.py"


@dataclass
class Run:
    stdout: str
    trace: Path | None
    """strace's log of the run's network calls, when strace is here."""
    isolated: bool
    """The run had a network namespace of its own, with only ``lo``."""


def _can_isolate() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    trace = tmp_path_factory.mktemp("strace") / "network.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONIOENCODING": "utf-8", "HOME": str(trace.parent)}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")  # a work tree put first on the path, as the run's own
    argv = [sys.executable, str(EXAMPLE)]  # no ANTHROPIC_API_KEY: offline
    traced = shutil.which("strace") is not None
    if traced:
        argv = ["strace", "-f", "-qq", "-e", "trace=network", "-e", "signal=none", "-o", str(trace), *argv]
    isolated = _can_isolate()
    if isolated:
        argv = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return Run(done.stdout, trace if traced else None, isolated)


def test_the_example_tells_the_seed_004_story(run: Run) -> None:
    assert_seed_004_story(
        run.stdout,
        refused="refused track_parcel",
        ended="at model response 6, before its call ran",
        tool="mcp__parcels__track_parcel",
    )


_CONNECT = re.compile(r"\bconnect\((\d+), \{sa_family=(AF_\w+)(.*?)\}")
_SEND_TO = re.compile(r"\b(?:sendto|sendmsg)\(\d+, .*?\{sa_family=(AF_INET6?)(.*?)\}")


def test_nothing_leaves_loopback(run: Run) -> None:
    if run.trace is None:
        missing_service("strace not found (apt-get install strace): the example ran, but its traffic was not traced")
    assert run.trace is not None
    log = run.trace.read_text()
    connects = _CONNECT.findall(log)
    inet = [(family, rest) for _, family, rest in connects if family in ("AF_INET", "AF_INET6")]
    assert inet, "the trace shows no TCP connection at all: was the CLI traced?"
    outside = [
        (family, rest)
        for family, rest in inet
        if '"127.0.0.1"' not in rest and 'inet_pton(AF_INET, "127.' not in rest and "::1" not in rest
    ]
    assert outside == [], f"connections outside loopback: {outside}"
    assert {family for _, family, _ in connects} <= {"AF_INET", "AF_INET6", "AF_UNIX", "AF_UNSPEC"}
    datagrams = [(family, rest) for family, rest in _SEND_TO.findall(log) if "127.0.0.1" not in rest]
    assert datagrams == [], f"datagrams outside loopback (DNS?): {datagrams}"
    if not run.isolated:
        missing_service("no network namespace (needs root, unshare and ip): traced, but not isolated")
