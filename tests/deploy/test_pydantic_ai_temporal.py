"""pydantic-ai under ``pydantic_ai.durable_exec.temporal``: a worker killed mid-turn changes nothing.

The guarded agent (``RepeatGuard`` + ``TemporalDurability``) runs in a Temporal workflow
(``pydantic_ai_temporal/agent.py``) on a real Temporal dev server, with a scripted model stuck on one
parcel, for two turns (two ``agent.run`` calls) of one conversation (``pydantic_ai_temporal/scenario.py``).
Model requests and ``track_parcel`` are activities; the agent graph and the guard's hooks are
workflow code.

Kill and resume (``temporal_harness.kill_mid_turn``): worker A runs the conversation alone and blocks at
the kill point, inside the 3rd call that reaches the tool (turn 1, before any refusal), or inside model
request 10 (turn 2, carrying the turn's first refusal: after A's guard ended turn 1, started turn 2 and
refused once in it); standby worker B starts polling and A is SIGKILLed; B replays the history from the
start, the guard's hooks included, and finishes the conversation.

The report (outputs, stops, every tool return the turns produced, model responses) must equal an
uninterrupted run's, and both must equal the decisions of the core alone on the same script.

``continue_as_new`` mid-turn (``ContinuedParcelConversation``): the first workflow run pauses the turn and
continues as new with its messages; the new run resumes them with no new prompt, and the guard continues
the same turn (its counts rebuilt from the messages): the turn ends as the uninterrupted turn 1 does.
"""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from repeat_hooks import StopReason, StopRepeatedCalls, ToolCall

_DEPLOY = Path(__file__).resolve().parent
if str(_DEPLOY) not in sys.path:
    sys.path.insert(0, str(_DEPLOY))  # ``import pydantic_ai_temporal`` here, in the replayer and in the workers

from services import TemporalServer  # noqa: E402
from temporal_harness import (  # noqa: E402
    MARKS,
    RESULT_TIMEOUT,
    ExpectedTurn,
    Ledger,
    Run,
    Workers,
    assert_skewed_replay_fails,
    assert_takeover,
    assert_uninterrupted,
    kill_mid_turn,
    require,
    tracking_status,
    uninterrupted,
    workers,
)

require(
    "pydantic_ai.durable_exec.temporal",
    "repeat_hooks_pydantic_ai",
    needs="pydantic-ai-slim[temporal] and repeat-hooks-pydantic-ai",
)

from pydantic_ai_temporal import scenario  # noqa: E402
from pydantic_ai_temporal.agent import GuardedParcelConversation, SkewedGuardedParcelConversation  # noqa: E402
from pydantic_ai_temporal.worker import DEPLOYMENT  # noqa: E402
from temporalio.client import WorkflowFailureError  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402

__all__ = ["uninterrupted", "workers"]  # fixtures (the module's DEPLOYMENT's)

pytestmark = MARKS

Conversation = Run[scenario.ConversationReport]


# -- the reference: the core alone on the same script ------------------------------------------------


def expected() -> list[ExpectedTurn]:
    """What the guard must decide on ``scenario.script``, turn by turn: the core alone, no SDK, no Temporal."""
    guard = StopRepeatedCalls(**scenario.POLICY)
    turns: list[ExpectedTurn] = []
    step = 0
    for _ in scenario.PROMPTS:
        guard.pre_agent_turn()
        reached: list[str] = []
        outputs: list[str] = []
        responses = 0
        while (stop := guard.pre_llm_call()) is None:
            guard.post_llm_call()
            responses += 1
            calls = [ToolCall(name, arguments) for name, arguments in scenario.script(step)]
            for call, refusal in zip(calls, guard.pre_tool_calls(calls), strict=True):  # one response, one batch
                if refusal is None:
                    parcel = call.arguments["parcel_id"]
                    reached.append(parcel)
                    status = tracking_status(parcel)
                    guard.post_tool_call(call, result=status)
                    outputs.append(status)
                else:
                    outputs.append(refusal.message)
            step += 1
            assert responses < 20, "the guard never stopped the scripted model"
        step += 1  # the guard's own closing response is in the history: the model's next step is one later
        turns.append(ExpectedTurn(reached, outputs, stop, responses))
    return turns


# -- the uninterrupted run ---------------------------------------------------------------------------


def assert_report(run: Conversation) -> None:
    """The run did what the core alone decides on the script, turn by turn."""
    want = expected()
    report, ledger = run.report, run.ledger
    # The script, as the core decides it (default count="progress"): two turns, each stopped after three
    # refusals. In turn 1, PX-7's run may have changed PX-42's status, so PX-42 runs twice more after it.
    assert [t.reached for t in want] == [["PX-42", "PX-7", "PX-42", "PX-42"], ["PX-42", "PX-42"]]
    assert [t.model_calls for t in want] == [6, 5]
    assert [t.stop.reason for t in want] == [StopReason.IGNORED_REFUSALS] * 2
    # The workflow: each turn's output is the guard's stop message; same tool returns, same refusals.
    assert len(report.turns) == len(want)
    for turn, wanted in zip(report.turns, want, strict=True):
        assert turn.output == wanted.stop.message
        assert turn.stop == wanted.stop
        assert turn.tool_returns == wanted.outputs
        assert turn.refused == ["track_parcel"] * 3
        assert turn.model_responses == wanted.model_calls
    assert len(set(report.run_ids)) == 2
    # What the processes saw: the calls that reached the tool, and what the model was sent.
    assert sorted(ledger.tool_arguments) == sorted(want[0].reached + want[1].reached)
    assert len(ledger.model_calls) == want[0].model_calls + want[1].model_calls
    received = ledger.received_by_step()
    assert received[5] == want[0].outputs[-2:-1]  # turn 1's last request: its 2nd refusal
    assert received[11] == want[1].outputs[-2:-1]  # turn 2's last request (step 6 was the guard's stop)


def test_uninterrupted_run_matches_the_core(uninterrupted: Conversation) -> None:
    assert_report(uninterrupted)
    assert_uninterrupted(uninterrupted)


# -- the kill ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kill_at",
    [
        pytest.param("tool:3", id="mid-tool-call"),  # PX-42's 2nd run, before any refusal: B goes on
        pytest.param("model:10", id="mid-model-call"),  # turn 2, after a refusal: B must replay both turns
    ],
)
async def test_worker_killed_mid_turn_changes_nothing(
    kill_at: str, workers: Workers, uninterrupted: Conversation
) -> None:
    takeover = await kill_mid_turn(DEPLOYMENT, kill_at, workers)
    run = takeover.run

    # Same decisions as the core alone, and as the uninterrupted run.
    assert_report(run)
    assert run.report == uninterrupted.report.model_copy(update={"run_ids": run.report.run_ids})
    # Same calls and model inputs; the killed call retried once, in B; B replayed and finished; so does a third.
    await assert_takeover(DEPLOYMENT, takeover, uninterrupted, GuardedParcelConversation)
    print(f"\n{kill_at}: run {run.seconds:.1f} s, takeover after SIGKILL {takeover.seconds:.1f} s")


# -- a guard that decides differently on replay is caught --------------------------------------------


async def test_replay_with_a_guard_that_decides_differently_fails(uninterrupted: Conversation, tmp_path: Path) -> None:
    """The history pins the guard's decisions: a guard allowing one more call cannot replay it."""
    await assert_skewed_replay_fails(
        DEPLOYMENT,
        uninterrupted.history,
        GuardedParcelConversation,
        SkewedGuardedParcelConversation,
        tmp_path / "ledger.jsonl",
    )


# -- structured output: the stop is an exception the workflow catches, or a failed workflow -----------


async def test_structured_output_stop_in_a_workflow(workers: Workers, temporal_server: TemporalServer) -> None:
    """``RepeatGuardStopped`` reaches workflow code; uncaught, it fails the workflow (not a retried task)."""
    await workers.start_ready("solo")
    client = await DEPLOYMENT.connect(temporal_server.address, workers.ledger)
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
    await workers.start_ready("solo")
    client = await DEPLOYMENT.connect(temporal_server.address, workers.ledger)
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
    assert report.model_responses == want.model_calls
    assert len(set(report.run_ids)) == 2  # two agent runs (one per workflow run), one turn
    # What reached the tool and the model over both workflow runs (activity ids restart in the new run).
    records = Ledger.load(workers.ledger, workflow_id).records
    assert all(record["attempt"] == 1 for record in records)
    reached = [record["parcel_id"] for record in records if record["kind"] == "tool"]
    assert sorted(reached) == sorted(want.reached)  # PX-42 three times and PX-7 once, in all
    assert sum(record["kind"] == "model" for record in records) == want.model_calls
