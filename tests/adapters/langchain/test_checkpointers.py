"""The counts follow the thread through real checkpointers: SQLite across a restart, PostgreSQL across
OS processes serving alternate turns (one killed mid-turn), and an approval resumed in a fresh process."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_parcels import ARGS, REFUSAL, STOPPED, USER, Carrier, parcel_agent, thread
from langgraph.checkpoint.sqlite import SqliteSaver
from repeat_hooks_langchain import guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling
from services import PostgresServer

WORKER = Path(__file__).with_name("langchain_worker.py")
PROCESS_TIMEOUT = 120


def serve(saver: str, calls_file: Path, *args: str, thread_id: str = "parcel-thread") -> dict[str, Any]:
    """Run one worker process to its end; its JSON report."""
    argv = [sys.executable, str(WORKER), "--saver", saver, "--thread", thread_id, "--calls-file", str(calls_file)]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=PROCESS_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_sqlite_keeps_the_counts_across_a_restart(tmp_path: Path) -> None:
    database = tmp_path / "checkpoints.sqlite"
    carrier = Carrier()
    first_model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    with sqlite3.connect(database, check_same_thread=False) as connection:
        first = parcel_agent(first_model, carrier, checkpointer=SqliteSaver(connection)).invoke(USER, thread("t1"))
    assert first["messages"][-1].content == STOPPED

    # "Restart": a new connection, a new agent and a new middleware object on the same file.
    second_model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    with sqlite3.connect(database, check_same_thread=False) as connection:
        agent = parcel_agent(second_model, carrier, checkpointer=SqliteSaver(connection))
        saved = guard_state_of(agent.get_state(thread("t1")).values)
        assert (saved.turn.number, saved.turn.refusals, saved.turn.model_calls) == (1, 3, 5)
        second = agent.invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731"] * 4
    state = guard_state_of(second)
    assert (state.turn.number, state.turn.refusals, state.turn.model_calls) == (2, 3, 5)
    assert second_model.tool_results(3) == [REFUSAL]


@pytest.mark.services
def test_postgres_two_processes_alternate_turns_and_one_killed_mid_turn_loses_no_count(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    saver = f"postgres:{postgres_server.url}"
    calls = tmp_path / "calls.txt"

    # Process A serves turn 1, process B turn 2: each turn, 2 calls reach the tool, then 3 refusals.
    turn_1 = serve(saver, calls, "--say", "Keep checking FR-7731")
    turn_2 = serve(saver, calls, "--say", "Check again")
    assert (turn_1["last"], turn_2["last"]) == (STOPPED, STOPPED)
    assert lines(calls) == 4
    assert [turn_1["guard"]["turn"]["number"], turn_2["guard"]["turn"]["number"]] == [1, 2]
    assert turn_2["tool_results"][-3:] == [REFUSAL] * 3

    # Process C starts turn 3 and is killed (SIGKILL) inside the 2nd tool call of the turn.
    argv = [sys.executable, str(WORKER), "--saver", saver, "--thread", "parcel-thread", "--calls-file", str(calls)]
    doomed = subprocess.Popen(
        [*argv, "--say", "And again", "--hang-at", "6"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    marker = calls.with_suffix(".hanging")
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while not marker.exists() and doomed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), doomed.stderr.read().decode()[-3000:] if doomed.stderr else ""
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(30)
    assert lines(calls) == 6

    # Process D resumes the thread from the checkpoint (input None): the interrupted call runs again (the
    # tool is at-least-once), but the guard counts it once: the turn ends exactly as an unbroken turn does.
    resumed = serve(saver, calls, "--hang-at", "0")
    assert resumed["last"] == STOPPED
    assert lines(calls) == 7
    guard = resumed["guard"]
    assert (guard["turn"]["number"], guard["turn"]["refusals"], guard["turn"]["model_calls"]) == (3, 3, 5)
    assert list(guard["turn"]["counts"].values()) == [5]
    assert guard["turn"]["stop"]["reason"] == "ignored_refusals"
    assert resumed["model_calls_here"] == 3  # 2 model calls ran in the killed process, 3 here: 5, not 2 + 5

    # Process A again: turn 4 is fresh.
    turn_4 = serve(saver, calls, "--say", "One more time")
    assert (turn_4["last"], turn_4["guard"]["turn"]["number"], lines(calls)) == (STOPPED, 4, 9)


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_an_approval_resumed_in_a_fresh_process_keeps_the_counts(mode: str, tmp_path: Path) -> None:
    saver = f"sqlite:{tmp_path / 'checkpoints.sqlite'}"
    calls = tmp_path / "calls.txt"
    approval = ("--scenario", "approval", "--mode", mode)

    # Process 1: the 1st call is approved and runs; the 2nd waits for approval when the process exits.
    paused = serve(saver, calls, *approval, "--say", "Keep checking FR-7731", "--approvals", "1")
    assert paused["interrupted"] and lines(calls) == 1
    assert paused["guard"]["turn"]["number"] == 1

    # Process 2 (fresh): approves what it is asked. The 2nd call runs; the 3rd is refused by the guard (the
    # count of 2 survived the interrupt and the process change) and nobody is asked about it; no new turn.
    finished = serve(saver, calls, *approval)
    assert not finished["interrupted"]
    assert lines(calls) == 2
    assert finished["approvals_here"] == 1
    assert finished["tool_results"] == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL]
    assert finished["last"] == "Still in transit."
    guard = finished["guard"]
    assert (guard["turn"]["number"], guard["turn"]["refusals"], guard["turn"]["model_calls"]) == (1, 1, 4)
    assert guard["turn"]["stop"] is None


def test_stop_is_readable_from_the_checkpointed_state(tmp_path: Path) -> None:
    carrier = Carrier()
    with sqlite3.connect(tmp_path / "c.sqlite", check_same_thread=False) as connection:
        agent = parcel_agent(
            ScriptedChatModel(then=keep_calling("track_parcel", ARGS)), carrier, checkpointer=SqliteSaver(connection)
        )
        agent.invoke(USER, thread("t1"))
        stop = stop_of(agent.get_state(thread("t1")).values)
    assert stop is not None and stop.message == STOPPED
