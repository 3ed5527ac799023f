"""What the Temporal deployment tests share (``test_openai_temporal.py``, ``test_pydantic_ai_temporal.py``).

Each SDK's package (``openai_temporal/``, ``pydantic_ai_temporal/``) holds its workflow, its scripted model, its
tool activity, its report types and a ``Deployment`` (in its ``worker`` module) saying how its workers run and
how a client talks to them. This module holds the rest, written once:

- for the worker processes: the parcels and their status, the kill point (``KillAt``), the JSON-lines ledger
  every process appends to (``append``, ``Ledger``), ``checkpoint`` (log an activity attempt; block there,
  heartbeating, if it is the kill point), and ``serve`` (the worker's command line, signals, standby gate);
- for the test (whose module names its ``DEPLOYMENT``): worker processes (``Workers``; the ``workers``
  fixture), starting and finishing a workflow (``Deployment.start``, ``finish``), the uninterrupted run every
  interrupted run must equal (the ``uninterrupted`` fixture), the kill of a worker mid-turn (``kill_mid_turn``) and
  what a takeover must leave unchanged (``assert_takeover``), and the replay with a skewed guard
  (``assert_skewed_replay_fails``).

The ledger is one JSON-lines file that every process appends to (``O_APPEND``, one ``write`` per line,
fsynced): what reached the tool, what each model call received, and where a worker blocked so the test
could kill it. It survives the processes that wrote it. "Reached the tool" counts distinct calls (activity
ids) that started in some worker: a killed call reaches it twice (attempt 1 in A, attempt 2 in B).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import pytest
from pydantic import BaseModel
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.plugin import SimplePlugin
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import NondeterminismError

from repeat_hooks import Stop

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # ``import services`` in the worker processes too

from services import REQUIRE_SERVICES, TemporalServer, log_tail, spawn, stop_pid  # noqa: E402

DEPLOY = Path(__file__).resolve().parent
"""``tests/deploy``: the workers' working directory (``python -m <package>.worker`` puts it on ``sys.path``)."""

# -- the scenario's parts both SDKs use ------------------------------------------------------------

PROMPTS = ("Where are my parcels PX-42 and PX-7?", "Any news on PX-42?")
"""The user's messages: one turn each, in one conversation (one workflow)."""
STUCK_PARCEL = "PX-42"
OTHER_PARCEL = "PX-7"
BLOCK_SECONDS = 60.0
"""How long a worker blocks at the kill point waiting to be killed before it fails the call (harness bug)."""

KillPoint = Literal["tool", "model"]


def tracking_status(parcel_id: str) -> str:
    """What ``track_parcel`` answers (always the same: the model has no reason to ask again)."""
    return f"Parcel {parcel_id}: in transit, hub Lyon, delivery expected tomorrow."


@dataclass(frozen=True)
class KillAt:
    """Where the first worker blocks (first attempt only) so the test can SIGKILL it mid-turn.

    ``tool:N``: inside the N-th distinct ``track_parcel`` call of the workflow; ``model:N``: inside the N-th
    distinct model call. Parsed from the worker's ``--kill-at``.
    """

    where: KillPoint
    number: int

    @classmethod
    def parse(cls, text: str | None) -> KillAt | None:
        if not text:
            return None
        where, _, number = text.partition(":")
        if where not in ("tool", "model") or not number.isdigit():
            raise ValueError(f"--kill-at must be tool:N or model:N, not {text!r}")
        return cls(where, int(number))  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.where}:{self.number}"


# -- the ledger ------------------------------------------------------------------------------------


def append(ledger: Path, record: dict[str, Any]) -> None:
    """Append one JSON line to ``ledger`` atomically (one ``write`` with ``O_APPEND``) and fsync it."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(ledger: Path) -> list[dict[str, Any]]:
    """Every record in ``ledger`` (a torn last line from a killed process is skipped)."""
    try:
        lines = ledger.read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


@dataclass(frozen=True)
class Ledger:
    """What one workflow's processes wrote: per activity id, the attempts that reached the tool or the model."""

    records: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, ledger: Path, workflow_id: str) -> Ledger:
        return cls(tuple(r for r in read(ledger) if r.get("workflow_id") == workflow_id))

    def _attempts(self, kind: str) -> dict[str, list[dict[str, Any]]]:
        calls: dict[str, list[dict[str, Any]]] = {}
        for record in self.records:
            if record["kind"] == kind:
                calls.setdefault(record["activity_id"], []).append(record)
        return calls

    @property
    def tool_calls(self) -> dict[str, list[dict[str, Any]]]:
        """``track_parcel`` calls that reached the tool, by activity id: each one's attempts, in order."""
        return self._attempts("tool")

    @property
    def model_calls(self) -> dict[str, list[dict[str, Any]]]:
        """Model calls that reached the model, by activity id: each one's attempts, in order."""
        return self._attempts("model")

    @property
    def tool_arguments(self) -> list[str]:
        """The parcel of each distinct call that reached the tool, in the order they first arrived."""
        return [attempts[0]["parcel_id"] for attempts in self.tool_calls.values()]

    def received_by_step(self) -> dict[int, list[str]]:
        """The tool results and refusals each model call was sent (``received``), by its step."""
        return {attempts[-1]["step"]: attempts[-1]["received"] for attempts in self.model_calls.values()}

    @property
    def blocked(self) -> list[dict[str, Any]]:
        """Where a worker blocked to be killed."""
        return [r for r in self.records if r["kind"] == "blocked"]

    def pids(self) -> set[int]:
        """The worker processes that ran this workflow's activities."""
        return {int(r["pid"]) for r in self.records}


async def checkpoint(ledger: Path, kill_at: KillAt | None, kind: KillPoint, fields: dict[str, Any]) -> None:
    """Log that this activity attempt reached the tool or the model; block there if it is the kill point.

    Runs inside the activity (``activity.info()``). At the kill point (first attempt only) it logs a
    ``blocked`` line and waits, heartbeating, to be SIGKILLed; after ``BLOCK_SECONDS`` it fails the attempt
    (a harness bug: the test sees the extra attempt and fails).
    """
    info = activity.info()
    record = {
        "kind": kind,
        "workflow_id": info.workflow_id,
        "activity_id": info.activity_id,
        "attempt": info.attempt,
        "pid": os.getpid(),
        **fields,
    }
    append(ledger, record)
    if kill_at is None or kill_at.where != kind or info.attempt != 1:
        return
    loaded = Ledger.load(ledger, info.workflow_id or "")
    if len(loaded.tool_calls if kind == "tool" else loaded.model_calls) != kill_at.number:
        return
    append(ledger, {**record, "kind": "blocked", "at": str(kill_at)})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BLOCK_SECONDS
    while loop.time() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"harness: blocked at {kill_at} for {BLOCK_SECONDS} s and was not killed")


# -- a worker process ------------------------------------------------------------------------------

STICKY_TIMEOUT = timedelta(seconds=1)
"""How long a workflow task waits on a worker's sticky queue before any worker may take it (the default,
10 s, would make the surviving worker wait that long for the dead worker's workflow)."""
WAIT_FOR_SECONDS = 60.0
"""How long a standby worker (``--wait-for``) waits for its gate before it gives up."""


def sandbox(*modules: str) -> SandboxedWorkflowRunner:
    """The workflow sandbox, passing through the guard (one copy per process instead of one per workflow run),
    this module, and ``modules``; each SDK's plugin adds its own modules."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("repeat_hooks", "temporal_harness", *modules)
    )


WorkerSetup = Callable[[Path, KillAt | None], tuple[Sequence[SimplePlugin], dict[str, Any]]]
"""Given the ledger and the kill point: the client's plugins and the ``Worker`` options (task queue,
workflows, activities, runner) of one SDK's worker."""


async def serve(prog: str, description: str | None, setup: WorkerSetup, argv: list[str] | None = None) -> int:
    """A worker process: ``python -m <package>.worker --address HOST:PORT --ledger FILE [...]``.

    Writes its PID to ``--ready`` once it polls; shuts down cleanly on SIGTERM/SIGINT. ``--wait-for FILE``
    makes it boot (imports, connection) but start polling only once FILE exists: a standby worker.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--address", required=True, help="Temporal frontend, HOST:PORT")
    parser.add_argument("--ledger", required=True, type=Path, help="JSON-lines file the activities append to")
    parser.add_argument("--kill-at", default=None, help="tool:N or model:N: block there (first attempt) to be killed")
    parser.add_argument("--ready", type=Path, default=None, help="file to write this PID to once polling")
    parser.add_argument("--wait-for", type=Path, default=None, help="start polling only once this file exists")
    args = parser.parse_args(argv)
    kill_at = KillAt.parse(args.kill_at)  # a bad kill point fails at once

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    plugins, options = setup(args.ledger, kill_at)
    worker = Worker(
        await Client.connect(args.address, plugins=list(plugins)),
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        # A replay that diverges fails the workflow at once (instead of retrying the task forever).
        workflow_failure_exception_types=[NondeterminismError],
        graceful_shutdown_timeout=timedelta(seconds=2),
        **options,
    )
    if args.wait_for is not None:
        deadline = loop.time() + WAIT_FOR_SECONDS
        while not args.wait_for.exists():
            if stop.is_set() or loop.time() > deadline:
                return 3
            await asyncio.sleep(0.05)
    async with worker:
        if args.ready is not None:
            args.ready.write_text(str(os.getpid()))
        await stop.wait()
    return 0


# -- the test side ---------------------------------------------------------------------------------


def require(*modules: str, needs: str) -> None:
    """Skip the test module when an SDK it drives is not installed, like a missing server binary (a failure
    under ``REPEAT_HOOKS_REQUIRE_SERVICES=1``, as in CI)."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as missing:
        if os.environ.get(REQUIRE_SERVICES) == "1":
            raise
        pytest.skip(f"needs {needs}: {missing}", allow_module_level=True)


MARKS = [
    pytest.mark.services,
    # The sandbox's notice that pydantic imported a helper lazily inside a replay in this process: harmless.
    pytest.mark.filterwarnings("ignore:Module .* was imported after initial workflow load:UserWarning"),
]
"""The test modules' ``pytestmark``."""


@dataclass(frozen=True)
class ExpectedTurn:
    """One turn as the core alone decides it on an SDK's script (no SDK, no Temporal)."""

    reached: list[str]
    """Parcels of the calls that reach the tool, in order."""
    outputs: list[str]
    """Every tool output of the turn, as the model reads it: results and refusals."""
    stop: Stop
    model_calls: int
    """Model calls (responses of real model requests) the turn used."""


READY_TIMEOUT = 30.0
"""Seconds a worker gets to import, connect and start polling."""
KILL_POINT_TIMEOUT = 20.0
"""Seconds worker A gets to reach the kill point once the workflow starts."""
RESULT_TIMEOUT = 40.0
"""Seconds a workflow gets to finish (a takeover takes ~4-5 s: heartbeat and sticky timeouts, replay)."""

Report = TypeVar("Report", bound=BaseModel)


@dataclass(frozen=True)
class Deployment(Generic[Report]):
    """One SDK's workers, as the test drives them."""

    package: str
    """The package whose ``worker`` module runs a worker (``python -m <package>.worker``)."""
    task_queue: str
    workflow_name: str
    """The conversation workflow: its input is ``request()``, its result a ``report``."""
    request: Callable[[], BaseModel]
    report: type[Report]
    plugins: Callable[[Path], Sequence[SimplePlugin]]
    """The client's plugins (their data converter), given the ledger; the replayer uses them too."""
    id_prefix: str

    async def connect(self, address: str, ledger: Path) -> Client:
        return await Client.connect(address, plugins=list(self.plugins(ledger)))

    async def start(self, client: Client) -> str:
        """Start the conversation workflow; its id."""
        workflow_id = f"{self.id_prefix}-{uuid.uuid4().hex[:12]}"
        await client.start_workflow(
            self.workflow_name,
            self.request(),
            id=workflow_id,
            task_queue=self.task_queue,
            execution_timeout=timedelta(seconds=RESULT_TIMEOUT + 20),
        )
        return workflow_id

    async def replay(self, history: WorkflowHistory, workflow: type, ledger: Path) -> None:
        """Replay ``history`` with ``workflow`` in this process (raises ``NondeterminismError`` if it diverges)."""
        replayer = Replayer(workflows=[workflow], plugins=list(self.plugins(ledger)))
        await asyncio.wait_for(replayer.replay_workflow(history, raise_on_replay_failure=True), 30)


@dataclass
class Workers:
    """Worker processes of one test, each stopped by its PID at the end (SIGTERM, then SIGKILL)."""

    package: str
    address: str
    directory: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def ledger(self) -> Path:
        return self.directory / "ledger.jsonl"

    def start(self, name: str, kill_at: str | None = None, wait_for: Path | None = None) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", f"{self.package}.worker", "--address", self.address]
        argv += ["--ledger", str(self.ledger), "--ready", str(self.ready_file(name))]
        if kill_at is not None:
            argv += ["--kill-at", kill_at]
        if wait_for is not None:
            argv += ["--wait-for", str(wait_for)]
        # cwd tests/deploy: ``-m`` puts it on sys.path. spawn: own session, log file, stopped at exit if leaked.
        process = spawn(argv, self.log(name), DEPLOY)
        self.started.append(process)
        return process

    def ready_file(self, name: str) -> Path:
        return self.directory / f"worker-{name}.ready"

    def log(self, name: str) -> Path:
        return self.directory / f"worker-{name}.log"

    async def start_ready(self, name: str, **options: Any) -> subprocess.Popen[bytes]:
        """Start a worker and wait until it polls."""
        process = self.start(name, **options)
        await self.wait_ready(name, process)
        return process

    async def wait_ready(self, name: str, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.ready_file(name).exists():
            if process.poll() is not None:
                pytest.fail(f"worker {name} exited with {process.returncode}:\n{log_tail(self.log(name))}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker {name} did not poll within {READY_TIMEOUT:.0f} s:\n{log_tail(self.log(name))}")
            await asyncio.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{log_tail(p, 30)}" for p in sorted(self.directory.glob("worker-*.log")))

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: type[BaseException] | BaseException | TracebackType | None) -> None:
        for process in self.started:
            stop_pid(process)


@dataclass(frozen=True)
class Run(Generic[Report]):
    """One finished workflow: its report, what its processes logged, and its history."""

    report: Report
    ledger: Ledger
    history: WorkflowHistory
    seconds: float


async def finish(
    deployment: Deployment[Report], client: Client, workflow_id: str, workers: Workers, started: float
) -> Run[Report]:
    """Wait (bounded) for the workflow's report; on timeout terminate it and fail with the workers' logs."""
    handle = client.get_workflow_handle(workflow_id, result_type=deployment.report)
    try:
        report = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    except BaseException as error:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.terminate("test failed"), 5)
        if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
            pytest.fail(f"workflow {workflow_id} did not finish in {RESULT_TIMEOUT:.0f} s\n{workers.logs()}")
        if isinstance(error, WorkflowFailureError):  # e.g. a replay that diverged: NondeterminismError
            causes: list[str] = []
            cause: BaseException | None = error.cause
            while cause is not None:
                causes.append(f"{type(cause).__name__}: {cause}")
                cause = cause.__cause__
            pytest.fail(f"workflow {workflow_id} failed: {' <- '.join(causes)}\n{workers.logs()}")
        raise
    seconds = time.monotonic() - started
    history = await asyncio.wait_for(handle.fetch_history(), 10)
    return Run(report, Ledger.load(workers.ledger, workflow_id), history, seconds)


def task_identities(history: WorkflowHistory) -> list[str]:
    """The identity (``PID@host``) of the worker that completed each workflow task, in order."""
    return [
        event.workflow_task_completed_event_attributes.identity
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]


@pytest.fixture
def workers(request: pytest.FixtureRequest, temporal_server: TemporalServer, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes of the test module's ``DEPLOYMENT``, stopped after the test."""
    with Workers(request.module.DEPLOYMENT.package, temporal_server.address, tmp_path) as pool:
        yield pool


@pytest.fixture(scope="module")
def uninterrupted(
    request: pytest.FixtureRequest, temporal_server: TemporalServer, tmp_path_factory: pytest.TempPathFactory
) -> Run[Any]:
    """The test module's conversation on one worker, never killed: the run every interrupted run must equal."""
    deployment: Deployment[Any] = request.module.DEPLOYMENT

    async def run(workers: Workers) -> Run[Any]:
        await workers.start_ready("solo")
        client = await deployment.connect(temporal_server.address, workers.ledger)
        began = time.monotonic()
        return await finish(deployment, client, await deployment.start(client), workers, began)

    directory = tmp_path_factory.mktemp(f"{deployment.package}-uninterrupted")
    with Workers(deployment.package, temporal_server.address, directory) as pool:
        return asyncio.run(run(pool))


def assert_uninterrupted(run: Run[Report]) -> None:
    """One worker ran everything, each activity once."""
    attempts = [len(a) for a in (*run.ledger.tool_calls.values(), *run.ledger.model_calls.values())]
    assert attempts == [1] * len(attempts)
    assert len(run.ledger.pids()) == 1


@dataclass(frozen=True)
class Takeover(Generic[Report]):
    """A conversation whose worker A was SIGKILLed at a kill point, and finished by worker B."""

    run: Run[Report]
    a: int
    b: int
    """The PIDs of the killed worker and of the one that took over."""
    killed_activity: str
    seconds: float
    """From the SIGKILL to the workflow's end."""
    ledger: Path
    """The workers' ledger file."""


async def kill_mid_turn(deployment: Deployment[Report], kill_at: str, workers: Workers) -> Takeover[Report]:
    """Kill and resume, arranged so that the takeover is always a replay.

    1. Worker A starts polling; worker B boots too but stands by (``--wait-for``), so A alone runs the
       conversation and holds the workflow in its cache.
    2. A reaches the kill point and blocks there, heartbeating.
    3. B starts polling; A is SIGKILLed by its PID.
    4. The call's heartbeat times out; Temporal retries it on B (attempt 2). The next workflow task leaves
       A's sticky queue after 1 s and goes to B, which has never seen the workflow: it replays the history
       from the start, the guard included, and finishes the conversation.
    """
    gate = workers.directory / "b.go"
    a = workers.start("a", kill_at=kill_at)
    b = workers.start("b", wait_for=gate)  # boots now, polls only once the gate exists
    await workers.wait_ready("a", a)
    client = await deployment.connect(workers.address, workers.ledger)
    began = time.monotonic()
    workflow_id = await deployment.start(client)

    deadline = time.monotonic() + KILL_POINT_TIMEOUT
    while not (blocked := Ledger.load(workers.ledger, workflow_id).blocked):
        if time.monotonic() > deadline or a.poll() is not None:
            pytest.fail(f"worker A never reached {kill_at}\n{workers.logs()}")
        await asyncio.sleep(0.05)
    assert [(r["at"], r["pid"], r["attempt"]) for r in blocked] == [(kill_at, a.pid, 1)]

    gate.touch()
    await workers.wait_ready("b", b)
    stop_pid(a, signal.SIGKILL)
    assert a.returncode == -signal.SIGKILL
    killed_at = time.monotonic()
    run = await finish(deployment, client, workflow_id, workers, began)
    return Takeover(run, a.pid, b.pid, blocked[0]["activity_id"], time.monotonic() - killed_at, workers.ledger)


async def assert_takeover(
    deployment: Deployment[Report], takeover: Takeover[Report], uninterrupted: Run[Report], workflow: type
) -> None:
    """What the takeover must leave as the uninterrupted run had it, and how it must have happened."""
    run, a, b = takeover.run, takeover.a, takeover.b
    # Same calls reached the tool (activity ids are deterministic), and the model was sent the same outputs.
    parcels = {aid: attempts[0]["parcel_id"] for aid, attempts in run.ledger.tool_calls.items()}
    assert parcels == {aid: attempts[0]["parcel_id"] for aid, attempts in uninterrupted.ledger.tool_calls.items()}
    assert run.ledger.received_by_step() == uninterrupted.ledger.received_by_step()
    assert run.ledger.model_calls.keys() == uninterrupted.ledger.model_calls.keys()

    # The killed call reached its activity twice: attempt 1 in A (killed), attempt 2 in B. Nothing else retried.
    calls = {**run.ledger.tool_calls, **run.ledger.model_calls}
    assert [(r["attempt"], r["pid"]) for r in calls[takeover.killed_activity]] == [(1, a), (2, b)]
    assert all(len(attempts) == 1 for aid, attempts in calls.items() if aid != takeover.killed_activity)
    assert run.ledger.pids() == {a, b}

    # B took the workflow over: it completed the workflow tasks after the kill (by replaying A's part first).
    identities = task_identities(run.history)
    assert identities[0].startswith(f"{a}@")
    assert identities[-1].startswith(f"{b}@")
    assert {i.split("@")[0] for i in identities} == {str(a), str(b)}

    # A third process replays the interrupted history to the same end.
    await deployment.replay(run.history, workflow, takeover.ledger)


async def assert_skewed_replay_fails(
    deployment: Deployment[Report], history: WorkflowHistory, faithful: type, skewed: type, ledger: Path
) -> None:
    """The history pins the guard's decisions: the faithful workflow replays it, a guard allowing one more call
    (``skewed``) cannot, and replaying runs no activity (nothing reaches ``ledger``)."""
    await deployment.replay(history, faithful, ledger)
    with pytest.raises(NondeterminismError):
        await deployment.replay(history, skewed, ledger)
    assert not ledger.exists()
