"""The OpenAI Agents SDK under ``temporalio.contrib.openai_agents``: a worker killed mid-turn changes nothing.

The guarded agent runs in a Temporal workflow (``openai_temporal/workflows.py``) on a real Temporal dev
server, with a scripted model that is stuck on one parcel, for two turns of one conversation
(``openai_temporal/scenario.py``). Model calls and the ``track_parcel`` tool are activities; the guard
(agent hooks, tool guardrails, ``tool_use_behavior``, the ``GuardState`` in the run context) runs in
workflow code.

Kill and resume (``temporal_harness.kill_mid_turn``): worker A runs the conversation alone and blocks at
the kill point, inside the 3rd call that reaches the tool (turn 1, before any refusal), or inside model
call 9 (turn 2, after A's guard ended turn 1, started turn 2 and refused once in it); standby worker B
starts polling and A is SIGKILLed; B replays the history from the start, the guard included, and
finishes the conversation.

The result must equal an uninterrupted run's (one worker, no kill) field by field, the guard's full
state included, and both must equal the decisions of the core alone on the same script. "Reached the
tool" counts distinct calls (activity ids) that started in some worker; the killed call reached it
twice (attempt 1 in A, attempt 2 in B) and the guard counted it once, as in the uninterrupted run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from repeat_hooks import GuardState, Policy, StopReason, ToolCall

_DEPLOY = Path(__file__).resolve().parent
if str(_DEPLOY) not in sys.path:
    sys.path.insert(0, str(_DEPLOY))  # ``import openai_temporal`` here, in the replayer and in the workers

from temporal_harness import (  # noqa: E402
    MARKS,
    ExpectedTurn,
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

require("agents", "temporalio.contrib.openai_agents", needs="openai-agents and temporalio[openai-agents]")

from openai_temporal import scenario  # noqa: E402
from openai_temporal.worker import DEPLOYMENT  # noqa: E402
from openai_temporal.workflows import GuardedParcelConversation, SkewedGuardedParcelConversation  # noqa: E402
from temporalio.contrib.openai_agents import OpenAIPayloadConverter  # noqa: E402

__all__ = ["uninterrupted", "workers"]  # fixtures (the module's DEPLOYMENT's)

pytestmark = MARKS

Conversation = Run[scenario.ConversationReport]


# -- the reference: the core alone on the same script ------------------------------------------------


def expected() -> list[ExpectedTurn]:
    """What the guard must decide on ``scenario.script``, turn by turn: the core alone, no SDK, no Temporal."""
    policy, state = Policy(**scenario.POLICY), GuardState()
    turns: list[ExpectedTurn] = []
    step = 0
    for _ in scenario.PROMPTS:
        policy.start_turn(state)
        reached: list[str] = []
        outputs: list[str] = []
        for calls in range(1, scenario.MAX_SCRIPTED_STEPS + 1):
            step += 1  # the model's step counts across turns (it reads the whole conversation)
            response = scenario.script(step)
            decisions = policy.decide_tool_calls(state, [ToolCall(name, arguments) for name, arguments in response])
            for (_, arguments), refusal in zip(response, decisions, strict=True):
                if refusal is None:
                    reached.append(arguments["parcel_id"])
                    outputs.append(tracking_status(arguments["parcel_id"]))
                else:
                    outputs.append(refusal.message)
            stop = policy.decide_model_call(state)
            if stop is not None:
                turns.append(ExpectedTurn(reached, outputs, stop, calls))
                break
        else:
            raise AssertionError("the guard never stopped the scripted model")
    return turns


# -- the uninterrupted run ---------------------------------------------------------------------------


def assert_report(run: Conversation) -> None:
    """The run did what the core alone decides on the script, turn by turn."""
    want = expected()
    report, ledger = run.report, run.ledger
    # The script, as the core decides it: two turns, each stopped after three refusals.
    assert [t.reached for t in want] == [["PX-42", "PX-7", "PX-42"], ["PX-42", "PX-42"]]
    assert [t.model_calls for t in want] == [5, 5]
    assert [t.stop.reason for t in want] == [StopReason.IGNORED_REFUSALS] * 2
    # The workflow: each turn's final output is the guard's stop message; same outputs, same refusals.
    assert len(report.turns) == len(want)
    for turn, wanted in zip(report.turns, want, strict=True):
        assert turn.final_output == wanted.stop.message
        assert turn.stop == wanted.stop
        assert [o.output for o in turn.tool_outputs] == wanted.outputs
        assert turn.model_calls == wanted.model_calls
    per_turn = [("refusal", 3), ("refusal", 4), ("refusal", 5), ("stop", 3)]  # refusals: count; stop: refusals
    assert [(e.kind, e.turn, e.count) for e in report.events] == [(k, t, n) for t in (1, 2) for k, n in per_turn]
    assert len({e.turn_id for e in report.events}) == 2
    # What the processes saw: the calls that reached the tool, and what the model was given.
    assert sorted(ledger.tool_arguments) == sorted(want[0].reached + want[1].reached)
    assert len(ledger.model_calls) == want[0].model_calls + want[1].model_calls
    received = ledger.received_by_step()
    first, second = want[0].outputs, want[1].outputs
    assert received[5] == first[:-1]  # turn 1's last model call: its third refusal ends the turn unseen
    assert received[10] == first + second[:-1]  # turn 2 carries turn 1's history


def test_uninterrupted_run_matches_the_core(uninterrupted: Conversation) -> None:
    assert_report(uninterrupted)
    assert_uninterrupted(uninterrupted)


# -- the kill ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kill_at",
    [
        pytest.param("tool:3", id="mid-tool-call"),  # PX-42's 2nd run: before any refusal; B must refuse next
        pytest.param("model:9", id="mid-model-call"),  # turn 2, after a refusal: B must replay both turns
    ],
)
async def test_worker_killed_mid_turn_changes_nothing(
    kill_at: str, workers: Workers, uninterrupted: Conversation
) -> None:
    takeover = await kill_mid_turn(DEPLOYMENT, kill_at, workers)
    run = takeover.run

    # Same decisions as the core alone, and as the uninterrupted run: every field, the guard's state included.
    assert_report(run)
    assert run.report == uninterrupted.report
    assert run.report.guard_json == uninterrupted.report.guard_json
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


# -- a guard state carried in a payload --------------------------------------------------------------


def test_a_guard_state_keeps_its_counts_through_the_plugins_payload_converter() -> None:
    """A conversation's state carried in a workflow input or result (continue-as-new, a child workflow per turn,
    a query result) goes through the plugin's converter, which dumps pydantic models with ``exclude_unset=True``."""
    policy, state = Policy(**scenario.POLICY), GuardState()
    policy.start_turn(state, turn_id="turn-1")
    for _ in range(3):
        policy.decide_tool_call(state, ToolCall("track_parcel", {"parcel_id": scenario.STUCK_PARCEL}))
    converter = OpenAIPayloadConverter()
    (back,) = converter.from_payloads(converter.to_payloads([state]), [GuardState])
    assert back.turn.refusals == state.turn.refusals == 1
    assert back == state
