"""pydantic-ai under ``pydantic_ai.durable_exec.temporal``: a worker killed mid-turn changes nothing.

The guarded agent (``RepeatGuard`` + ``TemporalDurability``) runs in a Temporal workflow
(``pydantic_ai_temporal/agent.py``) on a real Temporal dev server, with a scripted model stuck on one
parcel, for two turns (two ``agent.run`` calls) of one conversation (``pydantic_ai_temporal/scenario.py``).
Model requests and ``track_parcel`` are activities; the agent graph and the guard's hooks are
workflow code.

Kill and resume, arranged so that the takeover is always a replay:

1. Worker A starts polling; worker B boots too but stands by (``--wait-for``), so A alone runs the
   conversation and holds the workflow in its cache.
2. A reaches the kill point and blocks there, heartbeating: inside the 3rd call that reaches the
   tool (turn 1, before any refusal), or inside model request 10 (turn 2, carrying the turn's first
   refusal: after A's guard ended turn 1, started turn 2 and refused once in it).
3. B starts polling; the test SIGKILLs A by its PID.
4. The activity's heartbeat times out; Temporal retries it on B (attempt 2). The next workflow task
   leaves A's sticky queue after 1 s and goes to B, which has never seen the workflow: it replays the
   history from the start, the guard's hooks included, and finishes the conversation.

The report (outputs, stops, every tool return the turns produced, model responses) must equal an
uninterrupted run's, and both must equal the decisions of the core alone on the same script.

``continue_as_new`` mid-turn (``ContinuedParcelConversation``): the first workflow run pauses the turn and
continues as new with its messages; the new run resumes them with no new prompt, and the guard continues
the same turn (its counts rebuilt from the messages): the turn ends as the uninterrupted turn 1 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from repeat_hooks import Stop, StopReason, StopRepeatedCalls, ToolCall

_DEPLOY = Path(__file__).resolve().parent
if str(_DEPLOY) not in sys.path:
    sys.path.insert(0, str(_DEPLOY))  # ``import pydantic_ai_temporal`` here, in the replayer and in the workers

from services import REQUIRE_SERVICES, TemporalServer, log_tail, spawn, stop_pid  # noqa: E402

try:
    import pydantic_ai.durable_exec.temporal  # noqa: F401
    import repeat_hooks_pydantic_ai  # noqa: F401
except ImportError as missing:  # a skip, like a missing server binary; a failure in CI
    if os.environ.get(REQUIRE_SERVICES) == "1":
        raise
    pytest.skip(f"needs pydantic-ai-slim[temporal] and repeat-hooks-pydantic-ai: {missing}", allow_module_level=True)

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin  # noqa: E402
from pydantic_ai_temporal import scenario  # noqa: E402
from pydantic_ai_temporal.agent import GuardedParcelConversation, SkewedGuardedParcelConversation  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402
from temporalio.workflow import NondeterminismError  # noqa: E402

pytestmark = [
    pytest.mark.services,
    pytest.mark.filterwarnings("ignore:Module .* was imported after initial workflow load:UserWarning"),
]

READY_TIMEOUT = 30.0
"""Seconds a worker gets to import, connect and start polling."""
KILL_POINT_TIMEOUT = 20.0
"""Seconds worker A gets to reach the kill point once the workflow starts."""
RESULT_TIMEOUT = 40.0
"""Seconds a workflow gets to finish (a takeover takes a few seconds: heartbeat and sticky timeouts, replay)."""


# -- the reference: the core alone on the same script ------------------------------------------------


@dataclass(frozen=True)
class ExpectedTurn:
    reached: list[str]
    """Parcels of the calls that reach the tool, in order."""
    returns: list[str]
    """Every tool return of the turn: results and refusals."""
    stop: Stop
    model_responses: int


def expected() -> list[ExpectedTurn]:
    """What the guard must decide on ``scenario.script``, turn by turn: the core alone, no SDK, no Temporal."""
    guard = StopRepeatedCalls(**scenario.POLICY)
    turns: list[ExpectedTurn] = []
    step = 0
    for _ in scenario.PROMPTS:
        guard.pre_agent_turn()
        reached: list[str] = []
        returns: list[str] = []
        responses = 0
        while (stop := guard.pre_llm_call()) is None:
            guard.post_llm_call()
            responses += 1
            calls = [ToolCall(name, arguments) for name, arguments in scenario.script(step)]
            for call, refusal in zip(calls, guard.pre_tool_calls(calls), strict=True):  # one response, one batch
                if refusal is None:
                    parcel = call.arguments["parcel_id"]
                    reached.append(parcel)
                    status = scenario.tracking_status(parcel)
                    guard.post_tool_call(call, result=status)
                    returns.append(status)
                else:
                    returns.append(refusal.message)
            step += 1
            assert responses < 20, "the guard never stopped the scripted model"
        step += 1  # the guard's own closing response is in the history: the model's next step is one later
        turns.append(ExpectedTurn(reached, returns, stop, responses))
    return turns


# -- worker processes --------------------------------------------------------------------------------


@dataclass
class Workers:
    """Worker processes of one test, each stopped by its PID at the end (SIGTERM, then SIGKILL)."""

    address: str
    directory: Path
    ledger: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str, kill_at: str | None = None, wait_for: Path | None = None) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "pydantic_ai_temporal.worker", "--address", self.address]
        argv += ["--ledger", str(self.ledger), "--ready", str(self.ready_file(name))]
        if kill_at is not None:
            argv += ["--kill-at", kill_at]
        if wait_for is not None:
            argv += ["--wait-for", str(wait_for)]
        process = spawn(argv, self.log(name), _DEPLOY)  # cwd tests/deploy: ``-m`` puts it on sys.path
        self.started.append(process)
        return process

    def ready_file(self, name: str) -> Path:
        return self.directory / f"worker-{name}.ready"

    def log(self, name: str) -> Path:
        return self.directory / f"worker-{name}.log"

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

    def stop_all(self) -> None:
        for process in self.started:
            stop_pid(process)


@pytest.fixture
def workers(temporal_server: TemporalServer, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(temporal_server.address, tmp_path, tmp_path / "ledger.jsonl")
    try:
        yield pool
    finally:
        pool.stop_all()


@dataclass(frozen=True)
class Run:
    """One finished workflow: its report, what its processes logged, and its history."""

    report: scenario.ConversationReport
    ledger: scenario.Ledger
    history: WorkflowHistory
    seconds: float


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


async def finish(client: Client, workflow_id: str, workers: Workers, started: float) -> Run:
    """Wait (bounded) for the workflow's report; on timeout terminate it and fail with the workers' logs."""
    handle = client.get_workflow_handle(workflow_id, result_type=scenario.ConversationReport)
    try:
        report = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    except BaseException as error:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.terminate("test failed"), 5)
        if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
            pytest.fail(f"workflow {workflow_id} did not finish in {RESULT_TIMEOUT:.0f} s\n{workers.logs()}")
        if isinstance(error, WorkflowFailureError):
            causes: list[str] = []
            cause: BaseException | None = error.cause
            while cause is not None:
                causes.append(f"{type(cause).__name__}: {cause}")
                cause = cause.__cause__
            pytest.fail(f"workflow {workflow_id} failed: {' <- '.join(causes)}\n{workers.logs()}")
        raise
    seconds = time.monotonic() - started
    history = await asyncio.wait_for(handle.fetch_history(), 10)
    return Run(report, scenario.Ledger.load(workers.ledger, workflow_id), history, seconds)


async def start(client: Client) -> str:
    workflow_id = f"pai-guarded-conversation-{uuid.uuid4().hex[:12]}"
    await client.start_workflow(
        scenario.WORKFLOW_NAME,
        scenario.ConversationRequest(),
        id=workflow_id,
        task_queue=scenario.TASK_QUEUE,
        execution_timeout=timedelta(seconds=RESULT_TIMEOUT + 20),
    )
    return workflow_id


def task_identities(history: WorkflowHistory) -> list[str]:
    """The identity (``PID@host``) of the worker that completed each workflow task, in order."""
    return [
        event.workflow_task_completed_event_attributes.identity
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]


# -- the uninterrupted run ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(temporal_server: TemporalServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The same script on one worker, never killed: the run every interrupted run must equal."""
    directory = tmp_path_factory.mktemp("pai-uninterrupted")
    pool = Workers(temporal_server.address, directory, directory / "ledger.jsonl")

    async def run() -> Run:
        worker = pool.start("solo")
        await pool.wait_ready("solo", worker)
        client = await connect(temporal_server.address)
        began = time.monotonic()
        return await finish(client, await start(client), pool, began)

    try:
        return asyncio.run(run())
    finally:
        pool.stop_all()


def assert_report(run: Run) -> None:
    """The run did what the core alone decides on the script, turn by turn."""
    want = expected()
    report, ledger = run.report, run.ledger
    # The script, as the core decides it (default count="progress"): two turns, each stopped after three
    # refusals. In turn 1, PX-7's run may have changed PX-42's status, so PX-42 runs twice more after it.
    assert [t.reached for t in want] == [["PX-42", "PX-7", "PX-42", "PX-42"], ["PX-42", "PX-42"]]
    assert [t.model_responses for t in want] == [6, 5]
    assert [t.stop.reason for t in want] == [StopReason.IGNORED_REFUSALS] * 2
    # The workflow: each turn's output is the guard's stop message; same tool returns, same refusals.
    assert len(report.turns) == len(want)
    for turn, wanted in zip(report.turns, want, strict=True):
        assert turn.output == wanted.stop.message
        assert turn.stop == wanted.stop
        assert turn.tool_returns == wanted.returns
        assert turn.refused == ["track_parcel"] * 3
        assert turn.model_responses == wanted.model_responses
    assert len(set(report.run_ids)) == 2
    # What the processes saw: the calls that reached the tool, and what the model was sent.
    assert sorted(ledger.tool_arguments) == sorted(want[0].reached + want[1].reached)
    assert len(ledger.model_calls) == want[0].model_responses + want[1].model_responses
    received = ledger.received_by_step()
    assert received[5] == want[0].returns[-2:-1]  # turn 1's last request: its 2nd refusal
    assert received[11] == want[1].returns[-2:-1]  # turn 2's last request (step 6 was the guard's stop)


def test_uninterrupted_run_matches_the_core(uninterrupted: Run) -> None:
    assert_report(uninterrupted)
    attempts = [len(a) for a in (*uninterrupted.ledger.tool_calls.values(), *uninterrupted.ledger.model_calls.values())]
    assert attempts == [1] * len(attempts)
    assert len(uninterrupted.ledger.pids()) == 1


# -- the kill ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kill_at",
    [
        pytest.param("tool:3", id="mid-tool-call"),  # PX-42's 2nd run, before any refusal: B goes on
        pytest.param("model:10", id="mid-model-call"),  # turn 2, after a refusal: B must replay both turns
    ],
)
async def test_worker_killed_mid_turn_changes_nothing(
    kill_at: str, workers: Workers, temporal_server: TemporalServer, uninterrupted: Run
) -> None:
    gate = workers.directory / "b.go"
    a = workers.start("a", kill_at=kill_at)
    b = workers.start("b", wait_for=gate)  # boots now, polls only once the gate exists
    await workers.wait_ready("a", a)
    client = await connect(temporal_server.address)
    began = time.monotonic()
    workflow_id = await start(client)

    deadline = time.monotonic() + KILL_POINT_TIMEOUT
    while not (blocked := scenario.Ledger.load(workers.ledger, workflow_id).blocked):
        if time.monotonic() > deadline or a.poll() is not None:
            pytest.fail(f"worker A never reached {kill_at}\n{workers.logs()}")
        await asyncio.sleep(0.05)
    assert [(r["at"], r["pid"], r["attempt"]) for r in blocked] == [(kill_at, a.pid, 1)]
    killed_activity = blocked[0]["activity_id"]

    gate.touch()
    await workers.wait_ready("b", b)
    stop_pid(a, signal.SIGKILL)
    assert a.returncode == -signal.SIGKILL
    killed_at = time.monotonic()

    run = await finish(client, workflow_id, workers, began)
    takeover = time.monotonic() - killed_at

    # Same decisions as the core alone, and as the uninterrupted run.
    assert_report(run)
    assert run.report == uninterrupted.report.model_copy(update={"run_ids": run.report.run_ids})
    # Same calls reached the tool (activity ids are deterministic), and the model was sent the same returns.
    parcels = {aid: attempts[0]["parcel_id"] for aid, attempts in run.ledger.tool_calls.items()}
    assert parcels == {aid: attempts[0]["parcel_id"] for aid, attempts in uninterrupted.ledger.tool_calls.items()}
    assert run.ledger.received_by_step() == uninterrupted.ledger.received_by_step()
    assert run.ledger.model_calls.keys() == uninterrupted.ledger.model_calls.keys()

    # The killed call reached its activity twice: attempt 1 in A (killed), attempt 2 in B. Nothing else retried.
    calls = {**run.ledger.tool_calls, **run.ledger.model_calls}
    assert [(r["attempt"], r["pid"]) for r in calls[killed_activity]] == [(1, a.pid), (2, b.pid)]
    assert all(len(attempts) == 1 for aid, attempts in calls.items() if aid != killed_activity)
    assert run.ledger.pids() == {a.pid, b.pid}

    # B took the workflow over: it completed the workflow tasks after the kill (by replaying A's part first).
    identities = task_identities(run.history)
    assert identities[0].startswith(f"{a.pid}@")
    assert identities[-1].startswith(f"{b.pid}@")

    # A third process replays the interrupted history to the same end.
    replayer = Replayer(workflows=[GuardedParcelConversation], plugins=[PydanticAIPlugin()])
    await asyncio.wait_for(replayer.replay_workflow(run.history), 30)
    print(f"\n{kill_at}: run {run.seconds:.1f} s, takeover after SIGKILL {takeover:.1f} s")


# -- a guard that decides differently on replay is caught --------------------------------------------


async def test_replay_with_a_guard_that_decides_differently_fails(uninterrupted: Run, tmp_path: Path) -> None:
    """The history pins the guard's decisions: a guard allowing one more call cannot replay it."""
    faithful = Replayer(workflows=[GuardedParcelConversation], plugins=[PydanticAIPlugin()])
    await asyncio.wait_for(faithful.replay_workflow(uninterrupted.history), 30)
    skewed = Replayer(workflows=[SkewedGuardedParcelConversation], plugins=[PydanticAIPlugin()])
    with pytest.raises(NondeterminismError):
        await asyncio.wait_for(skewed.replay_workflow(uninterrupted.history, raise_on_replay_failure=True), 30)


# -- structured output: the stop is an exception the workflow catches, or a failed workflow -----------


async def test_structured_output_stop_in_a_workflow(workers: Workers, temporal_server: TemporalServer) -> None:
    """``RepeatGuardStopped`` reaches workflow code; uncaught, it fails the workflow (not a retried task)."""
    solo = workers.start("solo")
    await workers.wait_ready("solo", solo)
    client = await connect(temporal_server.address)
    want = expected()[0].stop

    caught = await client.execute_workflow(
        scenario.STRUCTURED_WORKFLOW_NAME,
        scenario.LookupRequest(catch=True),
        id=f"pai-lookup-{uuid.uuid4().hex[:12]}",
        task_queue=scenario.TASK_QUEUE,
        result_type=scenario.LookupReport,
        execution_timeout=timedelta(seconds=RESULT_TIMEOUT),
    )
    assert caught.stop == want
    assert caught.messages == 1 + 2 * 6  # the prompt, then 6 responses each with its tool returns

    with pytest.raises(WorkflowFailureError) as failed:
        await client.execute_workflow(
            scenario.STRUCTURED_WORKFLOW_NAME,
            scenario.LookupRequest(catch=False),
            id=f"pai-lookup-{uuid.uuid4().hex[:12]}",
            task_queue=scenario.TASK_QUEUE,
            execution_timeout=timedelta(seconds=RESULT_TIMEOUT),
        )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RepeatGuardStopped"
    assert want.message in str(cause)


# -- continue_as_new: the new workflow run continues the same turn ------------------------------------


@pytest.mark.parametrize("pause_after", [3, 5])
async def test_continue_as_new_mid_turn_continues_the_same_turns_counts(
    pause_after: int, workers: Workers, temporal_server: TemporalServer
) -> None:
    """The first workflow run pauses the turn and continues as new with its history; the resumed run
    decides as the uninterrupted turn 1 does (before: its counts started from zero, so the stuck parcel
    ran again in the new workflow run)."""
    solo = workers.start("solo")
    await workers.wait_ready("solo", solo)
    client = await connect(temporal_server.address)
    want = expected()[0]
    workflow_id = f"pai-continued-{uuid.uuid4().hex[:12]}"
    report = await client.execute_workflow(
        scenario.CONTINUED_WORKFLOW_NAME,
        scenario.ContinuedRequest(pause_after=pause_after),
        id=workflow_id,
        task_queue=scenario.TASK_QUEUE,
        result_type=scenario.ContinuedReport,
        execution_timeout=timedelta(seconds=RESULT_TIMEOUT),
    )
    assert report.stop == want.stop and report.output == want.stop.message
    assert report.refused == ["track_parcel"] * 3
    assert report.model_responses == want.model_responses
    assert len(set(report.run_ids)) == 2  # two agent runs (one per workflow run), one turn
    # What reached the tool and the model over both workflow runs (activity ids restart in the new run).
    records = scenario.Ledger.load(workers.ledger, workflow_id).records
    assert all(record["attempt"] == 1 for record in records)
    reached = [record["parcel_id"] for record in records if record["kind"] == "tool"]
    assert sorted(reached) == sorted(want.reached)  # PX-42 three times and PX-7 once, in all
    assert sum(record["kind"] == "model" for record in records) == want.model_responses
