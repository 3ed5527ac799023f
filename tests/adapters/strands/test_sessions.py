"""Two OS processes share one conversation through a ``FileSessionManager`` directory.

The guard keeps no counters in the process: each hook reads them from ``agent.state`` and writes them back,
and Strands' session manager saves the agent with every message (the guard has it save a tool batch's counts
before the batch runs too). So two processes can serve alternate turns of one conversation, and a process
killed mid-turn leaves its counts to the process that finishes the turn (``agent()`` with no new input).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import STOPPED

WORKER = Path(__file__).with_name("session_worker.py")
ANSWER_TIMEOUT = 60.0


class WorkerProcess:
    """A ``session_worker.py`` process: JSON commands in, JSON answers out."""

    def __init__(self, name: str, storage: Path, carrier_log: Path, log: Path) -> None:
        self.name = name
        self.stderr = log.open("wb")
        argv = [
            sys.executable,
            str(WORKER),
            *("--name", name, "--storage", str(storage), "--carrier-log", str(carrier_log)),
        ]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, start_new_session=True
        )
        self.log = log

    def ready(self) -> None:
        assert self.read() == {"ready": self.name}

    def read(self) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            if not selector.select(ANSWER_TIMEOUT):
                pytest.fail(f"worker {self.name} did not answer:\n{self.log.read_text()[-3000:]}", pytrace=False)
        line = stdout.readline()
        if not line:
            pytest.fail(f"worker {self.name} exited:\n{self.log.read_text()[-3000:]}", pytrace=False)
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            pytest.fail(f"worker {self.name}: {answer['error']}\n{self.log.read_text()[-3000:]}", pytrace=False)
        return answer

    def send(self, **command: Any) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write((json.dumps(command) + "\n").encode())
        stdin.flush()

    def ask(self, **command: Any) -> dict[str, Any]:
        self.send(**command)
        return self.read()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last write."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.stderr.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[WorkerProcess, WorkerProcess, Path]]:
    carrier_log = tmp_path / "carrier.log"
    carrier_log.touch()
    storage = tmp_path / "sessions"
    first = WorkerProcess("a", storage, carrier_log, tmp_path / "a.log")
    try:
        second = WorkerProcess("b", storage, carrier_log, tmp_path / "b.log")
    except BaseException:
        first.kill()
        first.close()
        raise
    try:
        first.ready()  # both start at once: importing Strands takes a while
        second.ready()
        yield first, second, carrier_log
    finally:
        for worker in (first, second):
            worker.kill()
            worker.close()


def carrier_calls(log: Path) -> list[str]:
    return log.read_text().split()


def test_two_processes_serve_alternate_turns_with_exact_counts(
    workers: tuple[WorkerProcess, WorkerProcess, Path],
) -> None:
    a, b, carrier_log = workers

    answers = [worker.ask(op="run", session="s1", message="Keep checking FR-7731") for worker in (a, b, a, b)]

    for answer in answers:
        # Each turn: 2 calls reached the carrier, 3 were refused, then the stop instead of a 6th model call.
        assert answer["final"] == STOPPED
        assert answer["stop"] == "ignored_refusals"
        assert answer["model_calls"] == 5
    assert carrier_calls(carrier_log) == ["a", "a", "b", "b", "a", "a", "b", "b"]
    # Both processes read and wrote the one state in the session: 4 turns, each stopped once.
    state = b.ask(op="state", session="s1")["state"]
    assert state["turn"]["number"] == 4 and state["turn"]["id"] == answers[-1]["turn"]
    stops = [event for event in state["events"] if event["kind"] == "stop"]
    assert [event["turn_id"] for event in stops] == [answer["turn"] for answer in answers]
    assert sum(event["kind"] == "refusal" for event in state["events"]) == 12


def killed_mid_turn(a: WorkerProcess, b: WorkerProcess, at: str, n: int) -> dict[str, Any]:
    """Process ``a`` starts a turn and is killed (SIGKILL) inside its ``n``-th model call or tool run; the
    guard state the session holds then, as process ``b`` reads it."""
    assert a.ask(op="hang", at=at, n=n) == {"ok": True}
    a.send(op="run", session="s1", message="Keep checking FR-7731")
    assert a.read() == {"hanging": at}
    a.kill()
    state: dict[str, Any] = b.ask(op="state", session="s1")["state"]
    return state


def test_a_process_killed_at_a_model_call_loses_no_count(workers: tuple[WorkerProcess, WorkerProcess, Path]) -> None:
    a, b, carrier_log = workers

    # Process a: 2 calls reach the carrier, then it is killed inside its 3rd model call.
    persisted = killed_mid_turn(a, b, "model", 3)
    assert carrier_calls(carrier_log) == ["a", "a"]
    assert list(persisted["turn"]["counts"].values()) == [2]

    # Process b finishes the turn: the same turn, so the very next call is refused.
    answer = b.ask(op="resume", session="s1")

    assert carrier_calls(carrier_log) == ["a", "a"]
    assert answer["turn"] == persisted["turn"]["id"]
    assert answer["model_calls"] == 3  # 3 refused calls, then the stop instead of a 4th
    assert (answer["final"], answer["stop"]) == (STOPPED, "ignored_refusals")


def test_a_process_killed_inside_a_tool_call_had_saved_its_count(
    workers: tuple[WorkerProcess, WorkerProcess, Path],
) -> None:
    a, b, carrier_log = workers

    # Process a is killed while its 2nd call runs: the count of that call was saved before it ran.
    persisted = killed_mid_turn(a, b, "tool", 2)
    assert list(persisted["turn"]["counts"].values()) == [2]

    # Strands runs the interrupted call again when the turn is finished (the last message asks for it):
    # the guard knows that call by its id and counts it once; the next new call is refused.
    answer = b.ask(op="resume", session="s1")

    assert carrier_calls(carrier_log) == ["a", "a", "b"]
    assert answer["turn"] == persisted["turn"]["id"]
    assert (answer["final"], answer["stop"]) == (STOPPED, "ignored_refusals")
    state = b.ask(op="state", session="s1")["state"]
    assert list(state["turn"]["counts"].values()) == [5] and state["turn"]["refusals"] == 3
