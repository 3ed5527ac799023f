"""Mistral deployed workers: two stock ``agents run-worker`` processes, one killed mid-turn, exact counts.

Real processes only: a Temporal dev server and a ``redis-server`` (``tests/services.py``), the
Workflows API stand-in (rc11 has no self-hosted mode), and two ``agents run-worker`` processes serving
the parcel tracker of ``examples/deploy`` with the Mistral adapter's guard (seed 004's policy:
``match="tool", max_calls=2, max_refusals=3``) keeping its counters in a ``RedisStore``. The model is
scripted and decides from the conversation it receives, wherever it runs.

The turn is arranged so that the failure lands mid-turn: the model call that follows the 2nd carrier
result holds on its first attempt (``PARCEL_HOLD_SECONDS``) after writing a ``hold`` line with its
worker's PID; the test SIGKILLs that worker. Temporal retries the model call on the other worker when
its heartbeat times out (15 s in rc11), which then runs the rest of the turn against the counters the
dead one stored. On top of that, every ``pre_tool_call`` loses its first reply (``mistral_workers/
redelivery.py``), so each guard decision is delivered twice by Temporal and must count once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from services import REQUIRE_SERVICES, RedisServer, TemporalServer, missing_service

try:
    import mistralai.agents  # noqa: F401
    import redis  # noqa: F401
    from repeat_hooks_mistral import events_of, read_state, stop_of
except ImportError as error:  # pragma: no cover - depends on what is installed
    if os.environ.get(REQUIRE_SERVICES) == "1":
        raise
    pytest.skip(f"needs repeat-hooks-mistral and repeat-hooks[redis]: {error}", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "deploy"
WORKER_APP = Path(__file__).resolve().parent / "mistral_workers"
for directory in (EXAMPLE, EXAMPLE / "parcel_worker", WORKER_APP):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

import processes  # noqa: E402
import sessions  # noqa: E402

pytestmark = pytest.mark.services

TASK_QUEUE = "parcel-deploy-test"
"""The deployment name the workers serve (it is their Temporal task queue)."""
AGENT_NAME = "parcel-tracker"
HOLD_SECONDS = 60.0
"""How long the model call to be killed holds; the kill comes within a second of the hold starting."""
REFUSAL_START = "Refused: you already called track_parcel 2 times"


@dataclass
class Deployment:
    """The running deployment: two workers, and the files where the workers and the stand-in report."""

    temporal: TemporalServer
    workers: list[processes.Process]
    events: Path
    """Events the workers posted to the Workflows API stand-in (turn started / terminated)."""
    witness: Path
    """One line per carrier call, model call and ``pre_tool_call``, with the worker's PID (``parcel_app.witness``)."""
    guard: Any
    """``RedeliveredParcelGuard``, the workers' hook class, imported here to read its store."""
    app: ModuleType
    """``parcel_app``: the texts the turns use."""

    def lines(self, event: str, workflow_id: str) -> list[dict[str, Any]]:
        return [
            line
            for line in sessions.read_jsonl(self.witness)
            if line["event"] == event and line.get("workflow_id") == workflow_id
        ]


def import_worker_app(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ModuleType]:
    """Import the workers' app here, configured as the workers are: from the environment."""
    monkeypatch.setenv("REPEAT_HOOKS_REDIS_URL", redis_url)
    for name in ("redelivery", "parcel_app"):  # a module imported earlier read another URL
        sys.modules.pop(name, None)
    redelivery = importlib.import_module("redelivery")
    return redelivery.RedeliveredParcelGuard, importlib.import_module("parcel_app")


@pytest.fixture
def deployment(
    tmp_path: Path, redis_server: RedisServer, temporal_server: TemporalServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    """The stand-in and two ``agents run-worker`` processes, stopped by PID when the test ends (even on failure)."""
    if processes.beside_python("agents") is None:
        missing_service("the `agents` CLI (mistralai-agents) was not found")
    guard, app = import_worker_app(redis_server.url, monkeypatch)
    events, witness = tmp_path / "events.jsonl", tmp_path / "witness.jsonl"
    with processes.Processes(tmp_path) as running:
        try:
            standin = processes.start_standin(running, temporal_server.address, events)
            extra = {
                "REPEAT_HOOKS_REDIS_URL": redis_server.url,
                "PARCEL_WITNESS_LOG": str(witness),
                "PARCEL_HOLD_SECONDS": str(HOLD_SECONDS),
            }
            env = processes.worker_environment(
                temporal_address=temporal_server.address,
                workflows_api_url=standin,
                deployment_name=TASK_QUEUE,
                extra=extra,
            )
            workers = processes.start_workers(running, WORKER_APP, env, count=2)
            yield Deployment(temporal_server, workers, events, witness, guard, app)
        finally:
            for process in running.started:  # shown by pytest only when the test fails
                print(f"--- {process.name} (pid {process.pid}) log tail:\n{processes.log_tail(process.log, 25)}")


async def test_a_worker_killed_mid_turn_leaves_the_counts_exact(deployment: Deployment) -> None:
    began = time.monotonic()
    app, guard = deployment.app, deployment.guard
    client = await sessions.connect(deployment.temporal.address)
    pids = [worker.pid for worker in deployment.workers]
    # two workers importing rc11 take long on a loaded machine
    await sessions.wait_for_workers(client, TASK_QUEUE, pids, timeout=150)
    ready = time.monotonic()

    session = await sessions.start_session(client, AGENT_NAME, TASK_QUEUE, app.FIRST_TURN)
    workflow = session.workflow_id
    try:
        turn_1 = await sessions.wait_for_turn_start(deployment.events, session.id, timeout=30)

        # -- mid-turn: the model call after the 2nd carrier result holds; kill its worker -----------------
        def held() -> dict[str, Any] | None:
            return next(iter(deployment.lines("hold", workflow)), None)

        hold = await sessions.wait_for("the model call after the 2nd carrier call to hold", held, timeout=30)
        (victim,) = [worker for worker in deployment.workers if worker.pid == hold["pid"]]
        (survivor,) = [worker for worker in deployment.workers if worker is not victim]
        assert len(deployment.lines("carrier", workflow)) == 2, "the kill must come after exactly 2 carrier calls"
        processes.Processes.kill(victim)
        killed = time.monotonic()

        # -- the survivor finishes the same turn --------------------------------------------------------
        end_1 = await sessions.wait_for_turn_end(deployment.events, session.id, turn_1, timeout=60)
        stop = await stop_of(session.id, guard=guard)
        state_1 = await read_state(session.id, guard=guard)
        turn_1_done = time.monotonic()

        # -- turn 2: a fresh count ----------------------------------------------------------------------
        verdict = await asyncio.wait_for(sessions.send_message(session, app.SECOND_TURN, "turn-2"), timeout=30)
        assert verdict.accepted, verdict
        turn_2 = verdict.turn_id
        assert turn_2 is not None and turn_2 != turn_1, "the second message must start a new turn"
        end_2 = await sessions.wait_for_turn_end(deployment.events, session.id, turn_2, timeout=30)
        state_2 = await read_state(session.id, guard=guard)
        stop_2 = await stop_of(session.id, guard=guard)
        events = await events_of(session.id, guard=guard)
        output = await asyncio.wait_for(sessions.stop_session(session), timeout=30)
    finally:
        with contextlib.suppress(Exception):  # leave nothing running on the shared Temporal server
            await asyncio.wait_for(session.handle.terminate("test over"), timeout=10)
        await guard.store.aclose()
    ended = time.monotonic()

    carrier = deployment.lines("carrier", workflow)
    models = deployment.lines("model", workflow)
    decisions = deployment.lines("pre_tool_call", workflow)
    stops = deployment.lines("pre_llm_call", workflow)
    models_1 = [line for line in models if line["turn_id"] == turn_1]
    models_2 = [line for line in models if line["turn_id"] == turn_2]
    decisions_1 = [line for line in decisions if line["turn_id"] == turn_1]
    turn_2_began = min(line["time"] for line in models_2)
    carrier_1 = [line for line in carrier if line["time"] < turn_2_began]
    carrier_2 = [line for line in carrier if line["time"] >= turn_2_began]

    # Turn 1, across the kill: exactly 2 calls reached the carrier (both before the kill); turn 2: 1.
    assert len(carrier_1) == 2, carrier
    assert all(line["time"] <= hold["time"] for line in carrier_1)
    assert len(carrier_2) == 1 and carrier_2[0]["pid"] == survivor.pid, carrier

    # The held model call was retried on the survivor, which ran the rest of the turn.
    held_call = [line for line in models_1 if line["activity_id"] == hold["activity_id"]]
    assert [(line["pid"], line["attempt"]) for line in held_call] == [(victim.pid, 1), (survivor.pid, 2)]
    after_kill = [line for line in models_1 + decisions_1 if line["time"] > hold["time"]]
    assert after_kill and all(line["pid"] == survivor.pid for line in after_kill)

    # Every guard decision was delivered twice (reply lost, then retried) and counted once:
    # 5 tool calls in turn 1 -> run, run, refuse, refuse, refuse.
    by_activity: dict[str, list[dict[str, Any]]] = {}
    for line in decisions_1:
        by_activity.setdefault(line["activity_id"], []).append(line)
    assert len(by_activity) == 5, decisions_1
    for deliveries in by_activity.values():
        assert [line["attempt"] for line in deliveries] == [1, 2], deliveries
        assert len({line["decision"] for line in deliveries}) == 1, f"a redelivery changed the decision: {deliveries}"
    final = [deliveries[-1]["decision"] for deliveries in by_activity.values()]
    assert final == ["PreToolCallHookContinue"] * 2 + ["PreToolCallHookSkip"] * 3
    # ... and so was the decision that ended the turn (the stop is recorded once, see the events below).
    assert [(line["turn_id"], line["decision"], line["attempt"]) for line in stops] == [
        (turn_1, "PreLlmCallHookSkip", 1),
        (turn_1, "PreLlmCallHookSkip", 2),
    ]
    assert all(line["pid"] == survivor.pid for line in stops)

    # The refusals reached the model: its model calls in turn 1 saw 0..4 tool results, the last two
    # of them refusals; the 3rd refusal is in the conversation turn 2 was sent.
    distinct_1 = {line["activity_id"]: line for line in models_1}  # the held call counts once
    seen = sorted(len(line["tool_results"]) for line in distinct_1.values())
    assert seen == [0, 1, 2, 3, 4], seen
    last_1 = max(distinct_1.values(), key=lambda line: len(line["tool_results"]))
    assert [m.startswith(REFUSAL_START) for m in last_1["tool_results"]] == [False, False, True, True]
    first_2 = min(models_2, key=lambda line: len(line["tool_results"]))
    history = first_2["conversation_tool_messages"]
    assert [m.startswith(REFUSAL_START) for m in history] == [False, False, True, True, True], history

    # The turn ended (completed, with no text: rc11 drops a hook's stop message) and the adapter's
    # stop_of says why.
    assert end_1.outcome == "completed" and end_1.text == ""
    assert stop is not None and stop.reason == "ignored_refusals", stop
    assert state_1 is not None and state_1.turn.id == turn_1 and state_1.turn.refusals == 3

    # Turn 2 started a fresh count: one carrier call, the model's own answer, no stop.
    assert end_2.outcome == "completed" and end_2.text == app.ANSWER
    assert state_2 is not None and state_2.turn.id == turn_2
    assert list(state_2.turn.counts.values()) == [1] and state_2.turn.refusals == 0 and state_2.turn.stop is None
    assert stop_2 is None
    assert [(event.kind, event.turn_id) for event in events] == [("refusal", turn_1)] * 3 + [("stop", turn_1)]
    assert output.final_message == app.ANSWER

    timings = {
        "workers ready": ready - began,
        "kill -> turn 1 end": turn_1_done - killed,
        "session": ended - ready,
    }
    print("timings:", {name: f"{seconds:.1f} s" for name, seconds in timings.items()})
