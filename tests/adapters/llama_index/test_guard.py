"""The guard on LlamaIndex's real FunctionAgent and ReActAgent loops: seed 004's story as the caller and the model
see it, a stop that raises, tool errors, the guard's note, and a new run counting afresh."""

from __future__ import annotations

import pytest
from llama_index.core.agent.workflow import AgentOutput, AgentStream, FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from repeat_hooks_llama_index import STOP_KEY, RepeatGuard, RepeatGuardStopped, StopReason, read_state, stop_of
from repeat_hooks_llama_index.testing import Script, call, messages_of, tool_results

from .conftest import REFUSAL, SEED_004, STOPPED, Carrier, looping_agent, read


async def test_seed_004_refuses_the_third_call_and_ends_the_run_with_the_stop_message(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier)
    ctx = Context(agent)

    output = await agent.run(user_msg="Keep checking FR-7731", ctx=ctx)

    assert carrier.calls == ["FR-7731"] * 2
    assert script.calls == 5  # no model call after the stop
    assert read(script) == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL] * 2  # the 5th call read the 3rd refusal
    assert output.response.content == STOPPED
    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    messages = await messages_of(ctx)
    assert messages[-1].role == "assistant" and messages[-1].content == STOPPED  # the memory holds the stop
    assert await tool_results(ctx) == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL] * 3


async def test_the_next_run_on_the_same_context_is_a_new_turn(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier)
    ctx = Context(agent)
    await agent.run(user_msg="Keep checking FR-7731", ctx=ctx)

    output = await agent.run(user_msg="And now?", ctx=ctx)

    assert carrier.calls == ["FR-7731"] * 4 and script.calls == 10
    assert stop_of(output) is not None
    state = await read_state(ctx, "parcel_tracker")
    assert state.turn.number == 2 and state.turn.refusals == 3


async def test_a_streaming_agent_is_guarded_the_same(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier, streaming=True)

    handler = agent.run(user_msg="Keep checking FR-7731")
    streamed = [event async for event in handler.stream_events()]
    output = await handler

    assert carrier.calls == ["FR-7731"] * 2 and script.calls == 5
    assert output.response.content == STOPPED
    assert [e for e in streamed if isinstance(e, AgentOutput)][-1].response.content == STOPPED


async def test_a_streamed_run_streams_the_stop_message_as_it_streams_an_answer(carrier: Carrier) -> None:
    agent, _ = looping_agent(carrier, streaming=True)

    handler = agent.run(user_msg="Keep checking FR-7731")
    deltas = [event async for event in handler.stream_events() if isinstance(event, AgentStream)]
    await handler

    assert "".join(event.delta for event in deltas) == STOPPED  # what a UI rendering the deltas shows
    assert deltas[-1].response == STOPPED and STOP_KEY in deltas[-1].raw and deltas[-1].current_agent_name == agent.name


async def test_on_stop_raise_raises_out_of_the_handler(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(SEED_004, on_stop="raise"))

    with pytest.raises(RepeatGuardStopped) as raised:
        await agent.run(user_msg="Keep checking FR-7731")

    stop = stop_of(raised.value)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert script.calls == 5 and carrier.calls == ["FR-7731"] * 2


async def test_a_tool_exception_is_a_failure_and_three_in_a_row_end_the_run() -> None:
    ran: list[str] = []

    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        ran.append(tracking_number)
        raise TimeoutError(f"carrier timeout for {tracking_number}")

    numbers = iter(range(100))
    script = Script(then=lambda s, m: [call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})])
    guard = RepeatGuard(max_errors_in_a_row=3)
    agent = guard.agent(
        FunctionAgent(name="tracker", description="Tracks.", llm=script.llm(), tools=[track_parcel], streaming=False)
    )

    output = await agent.run(user_msg="Where are my parcels?")

    assert ran == ["FR-0", "FR-1", "FR-2"] and script.calls == 3
    assert read(script)[0] == "carrier timeout for FR-0"  # LlamaIndex's own error result (base_agent.py:382)
    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS


async def test_the_guards_note_follows_the_result_before_the_refusal(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(warn=True))

    await agent.run(user_msg="Keep checking FR-7731")

    seen = read(script)
    assert seen[0] == "FR-7731: in transit, hub Lyon"
    assert seen[1].startswith("FR-7731: in transit, hub Lyon") and "the same call again will be refused" in seen[1]
    assert seen[2].startswith("Refused") and carrier.calls == ["FR-7731"] * 2


async def test_a_react_agent_reads_the_refusal_as_its_observation_and_ends_with_the_stop(carrier: Carrier) -> None:
    action = 'Thought: I need to check.\nAction: track_parcel\nAction Input: {"tracking_number": "FR-7731"}'
    script = Script(then=lambda s, m: action)
    react = ReActAgent(name="react", description="Tracks.", llm=script.llm(), tools=[carrier.tool], streaming=False)
    agent = RepeatGuard(SEED_004).agent(react)
    ctx = Context(agent)

    output = await agent.run(user_msg="Keep checking FR-7731", ctx=ctx)

    assert carrier.calls == ["FR-7731"] * 2 and script.calls == 5
    observations = [m.content or "" for m in script.requests[-1] if "Observation:" in (m.content or "")]
    assert sum(REFUSAL in text for text in observations) == 2  # the 5th call read refusals 1 and 2 as observations
    assert output.response.content == STOPPED and stop_of(output) is not None
    assert STOPPED in ((await messages_of(ctx))[-1].content or "")  # ReAct's finalize put it in memory


async def test_a_refused_return_direct_tool_does_not_end_the_run_with_the_refusal() -> None:
    async def lookup_address(tracking_number: str) -> str:
        """The parcel's address, returned to the user as it is."""
        return "12 Rue du Port"

    tool = FunctionTool.from_defaults(async_fn=lookup_address, return_direct=True)
    script = Script([call("lookup_address", {"tracking_number": "FR-7731"})], "I may not look it up.")
    agent = RepeatGuard(limits={"lookup_address": 0}).agent(FunctionAgent(llm=script.llm(), tools=[tool]))

    output = await agent.run(user_msg="Where does FR-7731 go?")

    assert output.response.content == "I may not look it up." and script.calls == 2  # the run went on
    tool_messages = [m.content or "" for m in script.requests[1] if m.role == "tool"]
    assert len(tool_messages) == 1 and tool_messages[0].startswith("Refused")


async def test_is_failure_reads_what_the_model_reads() -> None:
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        return f"ERROR: no scan for {tracking_number}"  # a failure the tool reports as text

    numbers = iter(range(100))
    script = Script(then=lambda s, m: [call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})])
    guard = RepeatGuard(max_errors_in_a_row=2, is_failure=lambda text: text.startswith("ERROR"))
    agent = guard.agent(FunctionAgent(llm=script.llm(), tools=[track_parcel], streaming=False))

    output = await agent.run(user_msg="Where are my parcels?")

    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and script.calls == 2
