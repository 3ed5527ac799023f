"""The seed-004 story through every way of running a pydantic-ai agent (``run``, ``run_stream``, ``iter``):
what the caller gets, what the model read, and what the history keeps. (The story itself, on
``run_sync``, is the conformance kit's ``seed_004_story``: ``test_conformance.py``.)"""

from __future__ import annotations

from typing import Any

import pytest
from pai_parcels import SEED_004, Carrier, guarded, status
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from repeat_hooks_pydantic_ai import refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, answer, keep_calling

from repeat_hooks import RefusalKind, Stop, StopReason, StopRepeatedCalls, ToolCall

PARCEL = {"parcel_id": "FR-7731"}


def core_alone() -> tuple[list[str], Stop]:
    """What the core alone decides on one turn of a model stuck on FR-7731: the texts the model reads."""
    guard = StopRepeatedCalls(policy=SEED_004)
    guard.pre_agent_turn()
    outputs: list[str] = []
    while (stop := guard.pre_llm_call()) is None:
        guard.post_llm_call()
        call = ToolCall("track_parcel", PARCEL)
        refusal = guard.pre_tool_call(call)
        if refusal is None:
            guard.post_tool_call(call, result=status("FR-7731"))
        outputs.append(status("FR-7731") if refusal is None else refusal.message)
    return outputs, stop


async def run_once(agent: Agent[None, Any], how: str, history: list[ModelMessage] | None) -> tuple[str, Any]:
    """One turn, started the way ``how`` says; returns the output and the result object."""
    if how == "run":
        result = await agent.run("Keep checking FR-7731", message_history=history)
        return result.output, result
    if how == "run_stream":
        async with agent.run_stream("Keep checking FR-7731", message_history=history) as stream:
            output = await stream.get_output()
        return output, stream
    if how == "iter":
        async with agent.iter("Keep checking FR-7731", message_history=history) as run:
            async for _node in run:
                pass
        assert run.result is not None
        return run.result.output, run.result
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["run", "run_stream", "iter"])
async def test_seed_004_each_turn_runs_twice_refuses_three_times_and_ends_with_the_message(
    how: str, carrier: Carrier
) -> None:
    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier)
    outputs, stop = core_alone()
    assert stop.reason is StopReason.IGNORED_REFUSALS
    assert outputs[:2] == [status("FR-7731")] * 2 and len(outputs) == 5  # 2 results, 3 refusals

    history: list[ModelMessage] | None = None
    for turn in (1, 2):  # message_history continues the conversation: each run is a new turn
        output, result = await run_once(agent, how, history)
        assert output == stop.message  # the caller gets the stop message as the run's output
        assert stop_of(result) == stop
        assert carrier.calls == ["FR-7731"] * 2 * turn  # the 3 refused calls never reached the carrier
        assert model.calls == 5 * turn  # a 6th model call never happened
        # What the model read: its first 4 tool returns (the 5th, the 3rd refusal, ended the turn unseen).
        received = [text for n in range(5 * (turn - 1), 5 * turn) for text in model.tool_returns(n)]
        assert received == outputs[:-1]
        # The run's refusals, as the guard recorded them in the tool returns' metadata (unseen by the model).
        refusals = refusals_of(result)
        assert [(tool, r.message, r.reason) for tool, r in refusals] == [
            ("track_parcel", text, RefusalKind.REPEAT) for text in outputs[2:]
        ]
        history = result.all_messages()
    assert history is not None
    guard_responses = [m for m in history if isinstance(m, ModelResponse) and m.model_name == "repeat-hooks"]
    assert len(guard_responses) == 2
    assert len(refusals_of(history)) == 6  # both turns' refusals, from the saved history


async def test_a_cooperative_model_is_left_alone(carrier: Carrier) -> None:
    agent, model = guarded(answer("FR-7731 is in Lyon."), carrier)
    result = await agent.run("Where is FR-7731?")
    assert result.output == "FR-7731 is in Lyon."
    assert stop_of(result) is None
    assert model.calls == 1


async def test_the_stop_is_found_in_a_saved_history(carrier: Carrier) -> None:
    agent, _ = guarded(keep_calling("track_parcel", PARCEL), carrier)
    result = await agent.run("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None
    assert stop_of(result.all_messages()) == stop
    # A later run that ends on its own: the history's last run was not stopped.
    follow_up = Agent(ScriptedModel(answer("Done.")))
    later = await follow_up.run("Thanks", message_history=result.all_messages())
    assert stop_of(later) is None
