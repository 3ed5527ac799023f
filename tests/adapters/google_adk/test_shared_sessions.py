"""Two Runner OS processes share one session through a ``DatabaseSessionService`` (SQLite, Postgres).

The guard keeps no counters in the process: each invocation reads them from the session and writes
them back with its events. So two processes can serve alternate invocations of one session, and a
process killed mid-invocation leaves the counts of everything it persisted to the process that
resumes the invocation (ADK's resumability).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.workers import WorkerProcess, worker_pair

from .conftest import STOPPED

WORKER = Path(__file__).with_name("session_worker.py")


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    server = request.getfixturevalue("postgres_server")
    return str(server.url).replace("postgresql://", "postgresql+asyncpg://", 1)


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[tuple[WorkerProcess, WorkerProcess, Path]]:
    carrier_log = tmp_path / "carrier.log"
    carrier_log.touch()

    def argv(name: str) -> list[str]:
        return [sys.executable, str(WORKER), "--name", name, "--db", db_url, "--carrier-log", str(carrier_log)]

    with worker_pair(argv, tmp_path) as (first, second):
        yield first, second, carrier_log


def carrier_calls(log: Path) -> list[str]:
    return [line.split(" ")[0] for line in log.read_text().splitlines()]


def test_two_processes_serve_alternate_invocations_with_exact_counts(
    workers: tuple[WorkerProcess, WorkerProcess, Path],
) -> None:
    a, b, carrier_log = workers
    session = a.ask(op="create")["session"]

    answers = [worker.ask(op="run", session=session, message="Keep checking FR-7731") for worker in (a, b, a, b)]

    for answer in answers:
        # Each invocation is one turn: 2 calls reached the carrier, 3 refusals, the stop, no 6th model call.
        assert answer["finals"] == [STOPPED]
        assert answer["stop"] == "ignored_refusals"
        assert answer["model_calls"] == 5
    assert carrier_calls(carrier_log) == ["a", "a", "b", "b", "a", "a", "b", "b"]
    # Both processes read and wrote the one state in the database: 4 turns, each stopped once.
    state = b.ask(op="state", session=session)["state"]
    assert state["turn"]["number"] == 4
    assert state["turn"]["id"] == answers[-1]["invocation"]
    stops = [e for e in state["events"] if e["kind"] == "stop"]
    assert [e["turn_id"] for e in stops] == [answer["invocation"] for answer in answers]
    assert sum(e["kind"] == "refusal" for e in state["events"]) == 12


def test_a_process_killed_mid_invocation_loses_no_count(workers: tuple[WorkerProcess, WorkerProcess, Path]) -> None:
    a, b, carrier_log = workers
    session = a.ask(op="create")["session"]
    assert a.ask(op="hang_at_model_call", n=3) == {"ok": True}

    # Process a: 2 calls reach the carrier, then it is killed inside its 3rd model call.
    a.send(op="run", session=session, message="Keep checking FR-7731")
    assert a.read() == {"hanging": 3}
    a.kill()
    assert carrier_calls(carrier_log) == ["a", "a"]
    persisted = b.ask(op="state", session=session)["state"]
    assert persisted["turn"]["responses"] == 2  # the 3rd model call's count went down with the process
    invocation = persisted["turn"]["id"]

    # Process b resumes the invocation: the same turn, so the very next call is refused.
    answer = b.ask(op="resume", session=session, invocation=invocation)

    assert carrier_calls(carrier_log) == ["a", "a"]
    assert answer["invocation"] == invocation
    assert answer["model_calls"] == 3  # 3 refused calls, then the stop instead of a 4th
    assert answer["finals"] == [STOPPED]
    assert answer["stop"] == "ignored_refusals"
    state = b.ask(op="state", session=session)["state"]
    turn = state["turn"]
    assert turn["number"] == 1 and turn["responses"] == 5 and turn["refusals"] == 3
