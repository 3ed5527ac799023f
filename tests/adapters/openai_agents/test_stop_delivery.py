"""Where the guard's stop goes (issue 12, item 10; issue 18): the caller, a stream, a session, a typed output.

The SDK ends a stopped run from ``tool_use_behavior``, so no model message carries the stop text.
These tests pin what each consumer sees, and the helpers that fill the gaps (``stop_of``,
``stop_items``, ``save_stop``).
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import (
    Agent,
    AgentHookContext,
    AgentHooks,
    AgentsException,
    GuardrailFunctionOutput,
    ItemHelpers,
    MaxTurnsExceeded,
    RunContextWrapper,
    Runner,
    SQLiteSession,
    output_guardrail,
)
from pydantic import BaseModel
from repeat_hooks_openai_agents import (
    GuardState,
    Policy,
    RepeatGuardStopped,
    StopReason,
    guard_agent,
    save_stop,
    stop_items,
    stop_of,
)
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import ToolCall

ARGS = {"tracking_number": "FR-7731"}
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."


SEED_004: dict[str, Any] = {"match": "tool", "max_calls": 2, "max_refusals": 3}


def stuck_agent(carrier: Any, **settings: Any) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = Agent(name="parcel-tracker", model=model, tools=[carrier.tool], **settings)
    return guard_agent(agent, **SEED_004), model


async def test_a_session_gets_the_stop_message_with_save_stop(carrier: Any) -> None:
    agent, model = stuck_agent(carrier)
    state = GuardState()
    session = SQLiteSession("parcel-chat")

    result = await Runner.run(agent, "Keep checking FR-7731", context=state, session=session)
    # The SDK saved the calls and the refusals, but not the text the user was given.
    assert (await session.get_items())[-1].get("type") == "function_call_output"

    assert await save_stop(session, result) is True
    assert (await session.get_items())[-1] == {"role": "assistant", "content": STOPPED}

    # The next turn's model reads what the user was told, before the new question.
    model.then = lambda n, m: [message("Still in transit.")]
    await Runner.run(agent, "Any news?", context=state, session=session)
    sent = model.requests[-1].input
    assert [i.get("content") for i in sent[-2:]] == [STOPPED, "Any news?"]


async def test_save_stop_adds_nothing_when_the_model_answered(carrier: Any) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In Lyon.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **SEED_004)
    session = SQLiteSession("parcel-chat")

    result = await Runner.run(agent, "Where?", context=GuardState(), session=session)

    assert stop_of(result) is None and stop_items(result) == []
    assert await save_stop(session, result) is False
    assert (await session.get_items())[-1]["content"][0]["text"] == "In Lyon."  # type: ignore[index,typeddict-item]


async def test_a_history_you_keep_yourself_gets_the_stop_with_stop_items(carrier: Any) -> None:
    agent, _ = stuck_agent(carrier)
    result = await Runner.run(agent, "Keep checking", context=GuardState())

    history = result.to_input_list()
    assert history[-1].get("type") == "function_call_output"  # the SDK's list ends with the last refusal
    assert [*history, *stop_items(result)][-1] == {"role": "assistant", "content": STOPPED}


async def test_a_streamed_run_has_no_message_event_for_the_stop_but_stop_of_reads_it(carrier: Any) -> None:
    agent, _ = stuck_agent(carrier)
    streamed = Runner.run_streamed(agent, "Keep checking", context=GuardState())

    names = [e.name async for e in streamed.stream_events() if e.type == "run_item_stream_event"]

    assert "message_output_created" not in names  # the stop is not a model message
    assert streamed.final_output == STOPPED
    stop = stop_of(streamed)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED


class ParcelStatus(BaseModel):
    status: str


def watched(carrier: Any, seen: list[tuple[str, Any]], **settings: Any) -> tuple[Agent[Any], ScriptedModel]:
    """A stuck agent whose output guardrail and ``on_end`` hook record every output they are handed."""

    @output_guardrail
    def check(context: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> GuardrailFunctionOutput:
        seen.append(("guardrail", output))
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)

    class Hooks(AgentHooks[Any]):
        async def on_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
            seen.append(("on_end", output))

    return stuck_agent(carrier, output_guardrails=[check], hooks=Hooks(), **settings)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
async def test_a_typed_output_never_receives_the_stop_text_the_run_raises_with_the_stop(
    carrier: Any, streamed: bool
) -> None:
    # Before 0.2 the stop text was the final_output of an output_type agent: its output guardrails and on_end
    # hooks were handed a str where they expect a ParcelStatus, and final_output_as(ParcelStatus) raised.
    seen: list[tuple[str, Any]] = []
    agent, model = watched(carrier, seen, output_type=ParcelStatus)
    state = GuardState()

    with pytest.raises(RepeatGuardStopped) as caught:
        if streamed:
            run = Runner.run_streamed(agent, "Keep checking", context=state)
            async for _ in run.stream_events():
                pass
        else:
            await Runner.run(agent, "Keep checking", context=state)

    error = caught.value
    assert isinstance(error, AgentsException)  # as the SDK's own MaxTurnsExceeded
    assert seen == []  # no output guardrail, no on_end hook was handed the stop as a ParcelStatus
    assert error.stop.reason is StopReason.IGNORED_REFUSALS and error.message == error.stop.message == STOPPED
    assert stop_of(error) is error.stop and stop_items(error) == [{"role": "assistant", "content": STOPPED}]
    assert carrier.calls == ["FR-7731", "FR-7731"] and model.calls == 5  # seed 004: 2 runs, 3 refusals
    assert error.run_data is not None  # the SDK attached the run, as it does to MaxTurnsExceeded
    assert error.run_data.context_wrapper.context is state
    # It holds the steps completed before the one that stopped (the SDK drops a step that raised): 4 responses,
    # each call with its output, a history that continues cleanly.
    assert len(error.run_data.raw_responses) == 4 and len(error.run_data.new_items) == 8
    history = [
        *ItemHelpers.input_to_new_input_list(error.run_data.input),
        *(item.to_input_item() for item in error.run_data.new_items),
        *stop_items(error),
    ]  # as the README says to continue the conversation
    assert history[0] == {"role": "user", "content": "Keep checking"}
    assert history[-1] == {"role": "assistant", "content": STOPPED} and len(history) == 10


async def test_a_typed_output_agent_that_answers_is_untouched(carrier: Any) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message('{"status": "in transit"}')])
    answering = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], output_type=ParcelStatus), **SEED_004)
    answered = await Runner.run(answering, "Where?", context=GuardState())
    assert stop_of(answered) is None
    assert answered.final_output == ParcelStatus(status="in transit")


async def test_on_stop_raise_makes_a_text_agent_raise_and_reply_is_the_default(carrier: Any) -> None:
    seen: list[tuple[str, Any]] = []
    agent, _ = watched(carrier, seen)
    replied = await Runner.run(agent, "Keep checking", context=GuardState())
    assert replied.final_output == STOPPED and seen == [("on_end", STOPPED), ("guardrail", STOPPED)]

    seen.clear()
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    raising = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), on_stop="raise", **SEED_004)
    with pytest.raises(RepeatGuardStopped, match=r"ignored_refusals\): I stopped"):
        await Runner.run(raising, "Keep checking", context=GuardState())

    with pytest.raises(TypeError, match=r"guard_agent\(on_stop=\.\.\.\) is 'reply' or 'raise', not 'exception'"):
        guard_agent(Agent(name="p", tools=[carrier.tool]), on_stop="exception")  # type: ignore[arg-type]


@pytest.mark.parametrize("behavior", ["stop_on_first_tool", {"stop_at_tool_names": ["track_parcel"]}])
async def test_a_refused_call_never_becomes_the_callers_output(carrier: Any, behavior: Any) -> None:
    # A behaviour that ends the run on a tool's output: the refused call did not run, so its refusal (written
    # for the model) must not become the answer. The model reads it and answers instead.
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("I may not track parcels today.")])
    forbidden = Policy(limits={"track_parcel": 0})  # the tool is forbidden: its first call is refused
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], tool_use_behavior=behavior), forbidden)
    state = GuardState()

    result = await Runner.run(agent, "Where is FR-7731?", context=state)

    assert carrier.calls == []
    assert state.turn.refusals == 1
    refusal = forbidden.decide_tool_call(GuardState(), ToolCall("track_parcel", ARGS))
    assert refusal is not None and model.outputs_received(1)["c1"] == refusal.message  # the model read it
    assert result.final_output == "I may not track parcels today."
    assert model.calls == 2


async def test_max_turns_below_the_guards_limits_fires_first(carrier: Any) -> None:
    agent, model = stuck_agent(carrier)

    # The SDK's max_turns counts model calls: 3 is less than the 5 the guard needs to end this turn.
    with pytest.raises(MaxTurnsExceeded):
        await Runner.run(agent, "Keep checking", context=GuardState(), max_turns=3)
    assert model.calls == 3

    # With max_turns above the guard's limits, the guard ends the turn with its own message.
    result = await Runner.run(agent, "Keep checking", context=GuardState(), max_turns=6)
    assert result.final_output == STOPPED
