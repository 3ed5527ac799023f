"""Two OS processes share one conversation through a ``FileSessionManager`` directory.

The guard keeps no counters in the process: each hook reads them from ``agent.state`` and writes them back,
and Strands' session manager saves the agent with every message (the guard has it save a tool batch's counts
before the batch runs too). So two processes can serve alternate turns of one conversation, and a process
killed mid-turn leaves its counts to the process that finishes the turn (``agent()`` with no new input).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.workers import WorkerProcess, worker_pair

from .conftest import STOPPED

WORKER = Path(__file__).with_name("session_worker.py")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[WorkerProcess, WorkerProcess, Path]]:
    carrier_log = tmp_path / "carrier.log"
    carrier_log.touch()
    storage = tmp_path / "sessions"

    def argv(name: str) -> list[str]:
        return [
            sys.executable,
            str(WORKER),
            *("--name", name, "--storage", str(storage), "--carrier-log", str(carrier_log)),
        ]

    with worker_pair(argv, tmp_path) as (first, second):  # both start at once: importing Strands takes a while
        yield first, second, carrier_log


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
