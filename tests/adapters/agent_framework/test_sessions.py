"""Two OS processes share one conversation through Agent Framework's own persistence: ``session.to_dict()`` saved
as JSON after each run, ``AgentSession.from_dict`` before the next. The guard keeps no counters in the process: its
state is JSON text in ``session.state``, so it travels with the conversation's history, and a human's approval
answered by the other process continues the same turn."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.workers import WorkerProcess, worker_pair

from .conftest import STOPPED

WORKER = Path(__file__).with_name("session_worker.py")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[WorkerProcess, WorkerProcess, Path]]:
    carrier_log = tmp_path / "carrier.log"
    carrier_log.touch()

    def argv(name: str) -> list[str]:
        return [
            sys.executable,
            str(WORKER),
            "--name",
            name,
            "--folder",
            str(tmp_path),
            "--carrier-log",
            str(carrier_log),
        ]

    with worker_pair(argv, tmp_path) as (first, second):
        yield first, second, carrier_log


def test_two_processes_serve_alternate_turns_with_exact_counts(
    workers: tuple[WorkerProcess, WorkerProcess, Path],
) -> None:
    a, b, carrier_log = workers

    answers = [worker.ask(op="run", session="s1", message="Keep checking FR-7731") for worker in (a, b, a, b)]

    for number, answer in enumerate(answers, start=1):
        # Each turn: 2 calls reached the carrier, 3 were refused, then the stop instead of a 6th model call.
        assert (answer["final"], answer["stop"], answer["model_calls"]) == (STOPPED, "ignored_refusals", 5)
        assert answer["number"] == number  # the turn count went on in the other process
    assert carrier_log.read_text().split("\n")[:-1] == [f"{w} track_parcel" for w in "aabbaabb"]
    assert len({answer["turn"] for answer in answers}) == 4


def test_an_approval_answered_in_the_other_process_continues_the_turn(
    workers: tuple[WorkerProcess, WorkerProcess, Path],
) -> None:
    a, b, carrier_log = workers

    paused = a.ask(op="run", session="s2", message="Refund order 7731", reply="refund")
    resumed = b.ask(op="approve", session="s2", reply="refund")

    assert (paused["final"], paused["asked"]) == ("", 1)
    assert resumed["turn"] == paused["turn"] and resumed["number"] == 1
    assert carrier_log.read_text() == "b refund_order\n"  # approved once; its repeats refused, never asked about
    assert resumed["asked"] == 0 and resumed["stop"] == "ignored_refusals"
