"""The guard on Agent Framework's real agent and function loop, as the caller and the model see it: refusals,
stops, turns, runs without a session, approvals."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import Agent, AgentResponse, Content, FunctionInvocationContext, FunctionMiddleware, Message, tool
from repeat_hooks_agent_framework import (
    STATE_KEY,
    STOP_KEY,
    GuardSetupError,
    RepeatGuardMiddleware,
    read_state,
    stop_of,
)
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, history, tool_results

from repeat_hooks import Policy, StopReason, kit

from .conftest import ARGS, REFUSAL, SEED_004, STOPPED, Carrier, client_of, looping_agent

TRACK = [function_call("track_parcel", ARGS)]


async def test_seed_004_refuses_the_third_call_and_ends_the_run_after_three_refusals(carrier: Carrier) -> None:
    agent = looping_agent(carrier)
    session = agent.create_session()

    response = await agent.run("Keep checking FR-7731 until it is delivered", session=session)

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert client_of(agent).calls == 5  # 2 calls ran, 3 were refused, no 6th model call
    assert response.text == STOPPED  # what the caller got
    assert response.messages[-1].role == "assistant" and response.messages[-1].text == STOPPED
    stop = stop_of(response)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    assert response.messages[-1].additional_properties[STOP_KEY] == stop.model_dump(mode="json")
    assert stop_of(session) == stop
    # The model read each refusal as the call's result (the SDK's own history); the tool did not run.
    assert tool_results(history(session)) == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL] * 3
    assert history(session)[-1].text == STOPPED


async def test_a_new_run_is_a_new_turn(carrier: Carrier) -> None:
    agent = looping_agent(carrier)
    session = agent.create_session()
    await agent.run("Keep checking FR-7731", session=session)
    first = read_state(session).turn.id

    response = await agent.run("And now?", session=session)

    assert carrier.calls == ["FR-7731"] * 4 and response.text == STOPPED
    state = read_state(session)
    assert state.turn.number == 2 and state.turn.id != first
    assert [event.turn_id for event in state.events if event.kind == "stop"] == [first, state.turn.id]
    assert isinstance(session.state[STATE_KEY], str)  # JSON text: AgentSession.from_dict restores it as it was
    with pytest.raises(GuardSetupError, match=r"stop_of takes what agent\.run\(\.\.\.\) returned .*; got str"):
        stop_of(response.text)


async def test_a_run_without_a_session_is_guarded_on_its_own(carrier: Carrier) -> None:
    """``agent.run()`` without a session hands every middleware ``session=None``: the guard keeps that run's
    counts in the run itself (a contextvar its agent middleware sets), so each such run is its own conversation."""
    agent = looping_agent(carrier)

    first = await agent.run("Keep checking FR-7731")
    second = await agent.run("Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 4  # each run: 2 calls, then refusals
    assert first.text == second.text == STOPPED and client_of(agent).calls == 10
    assert tool_results(first)[2:] == [REFUSAL] * 3


async def test_a_streamed_run_is_guarded_and_the_stop_is_its_last_update(carrier: Carrier) -> None:
    """``agent.run(..., stream=True)``: the guard's chat middleware decides each response once the loop has it whole
    (it buffers that model call's updates, as the SDK's agent-hooks do); the stop is the stream's last update."""
    agent = looping_agent(carrier)
    session = agent.create_session()

    stream = agent.run("Keep checking FR-7731", stream=True, session=session)
    updates = [update async for update in stream]
    response = await stream.get_final_response()

    assert carrier.calls == ["FR-7731"] * 2 and client_of(agent).calls == 5
    assert updates[-1].text == STOPPED and response.text == STOPPED
    assert (stop := stop_of(response)) is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert tool_results(history(session))[2:] == [REFUSAL] * 3


async def test_a_model_that_answers_ends_the_run_normally(carrier: Carrier) -> None:
    agent = Agent(
        client=ScriptedClient(TRACK, "It is in transit."),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )

    response = await agent.run("Where is FR-7731?")

    assert response.text == "It is in transit." and stop_of(response) is None and carrier.calls == ["FR-7731"]


async def test_a_tool_that_fails_ends_the_turn_before_the_sdks_own_error_limit() -> None:
    """A tool exception propagates out of ``call_next()``: the failure flag. The loop tells the model "Error:
    Function failed."; two in a row end the turn here, before Agent Framework's own limit of 3."""
    runs: list[str] = []

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        runs.append(tracking_number)
        raise RuntimeError("carrier timeout")

    numbers = iter(range(100))
    agent = Agent(
        client=ScriptedClient(
            then=lambda client, messages: [function_call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})]
        ),
        tools=[track_parcel],
        middleware=[RepeatGuardMiddleware(max_errors_in_a_row=2)],
    )

    response = await agent.run("Where are my parcels?")

    assert runs == ["FR-0", "FR-1"] and client_of(agent).calls == 2
    stop = stop_of(response)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and response.text == stop.message
    assert tool_results(response) == ["Error: Function failed."] * 2


async def test_an_approval_round_keeps_the_turn_and_a_refused_call_is_never_asked_about() -> None:
    runs: list[int] = []

    @tool(approval_mode="always_require")
    def refund_order(order: int) -> str:
        """Refund an order."""
        runs.append(order)
        return f"refund {len(runs)} sent for {order}"

    refund = [function_call("refund_order", {"order": 7731})]
    agent = Agent(
        client=ScriptedClient(refund, refund, "Refunded."),
        tools=[refund_order],
        middleware=[RepeatGuardMiddleware(destructive={"refund_order"})],
    )
    session = agent.create_session()

    paused = await agent.run("Refund order 7731", session=session)
    (asked,) = paused.user_input_requests
    turn = read_state(session).turn.id
    response = await agent.run(
        Message(role="user", contents=[asked.to_function_approval_response(True)]), session=session
    )

    assert runs == [7731] and response.text == "Refunded."
    assert response.user_input_requests == []  # the repeat was refused, not put to the human again
    assert tool_results(response)[-1].startswith("Refused: refund_order already succeeded")
    assert read_state(session).turn.id == turn and read_state(session).turn.number == 1


async def test_a_stop_message_of_your_own_reaches_the_caller(carrier: Carrier) -> None:
    guard = RepeatGuardMiddleware(
        SEED_004.model_copy(update={"stop_messages": {StopReason.IGNORED_REFUSALS: "Paused: ask again later."}})
    )
    response = await looping_agent(carrier, guard).run("Keep checking FR-7731")

    assert response.text == "Paused: ask again later."


async def test_each_model_response_is_a_chat_response_the_guard_reads_whole(carrier: Carrier) -> None:
    """The guard's chat middleware sees the response with every call before any runs: a response asking the same
    call three times runs it twice and refuses the third, whatever order the loop then runs them in."""
    agent = Agent(
        client=ScriptedClient(TRACK * 3, "Done."),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(match="tool", max_calls=2)],
    )

    response: AgentResponse[Any] = await agent.run("Where is FR-7731?")

    assert carrier.calls == ["FR-7731"] * 2
    assert [text.startswith("Refused") for text in tool_results(response)] == [False, False, True]


def test_the_guard_reads_no_policy_it_was_not_given() -> None:
    assert RepeatGuardMiddleware().policy == Policy()
    assert RepeatGuardMiddleware(max_calls=3).policy == Policy(max_calls=3)


async def test_a_call_a_later_middleware_puts_to_a_human_is_counted_when_it_runs() -> None:
    """A function middleware after the guard may answer a call with an approval request (the SDK passes it
    through, ``_tools.py:2398``): the call did not run, so the guard records no outcome; the approval round runs it
    through the guard again, which finds its decision in the state and records its outcome once."""
    runs: list[str] = []

    @tool
    def place_order(item: str) -> str:
        """Order an item."""
        runs.append(item)
        return f"order placed for {item}"

    class AskFirst(FunctionMiddleware):
        async def process(self, context: FunctionInvocationContext, call_next: Any) -> None:
            if "approval_response" in context.metadata:
                await call_next()
                return
            call = Content.from_function_call(
                call_id=str(context.metadata["call_id"]),
                name=context.function.name,
                arguments=context.arguments,
                id=str(context.metadata["function_call_occurrence_id"]),
            )
            context.result = Content.from_function_approval_request(id=str(call.id), function_call=call)

    order = [function_call("place_order", {"item": "box"})]
    agent = Agent(
        client=ScriptedClient(order, order, "Ordered."),
        tools=[place_order],
        middleware=[RepeatGuardMiddleware(destructive={"place_order"}), AskFirst()],
    )
    session = agent.create_session()

    paused = await agent.run("Order a box", session=session)
    (asked,) = paused.user_input_requests
    assert runs == [] and [mark.ok for mark in read_state(session).turn.marks.values()] == [None]  # no outcome yet
    response = await agent.run(
        Message(role="user", contents=[asked.to_function_approval_response(True)]), session=session
    )

    assert runs == ["box"] and response.text == "Ordered."
    assert tool_results(response)[-1].startswith("Refused: place_order already succeeded")


@pytest.mark.parametrize("plain_text", [False, True], ids=["items", "text"])
async def test_with_warn_the_model_reads_the_guards_note_after_the_result(carrier: Carrier, plain_text: bool) -> None:
    """``Policy(warn=True)``: after the 2nd identical call the model reads the kit's note after its result (the
    function's text items, or a text a later middleware set), and the 3rd is refused."""

    class AsText(FunctionMiddleware):
        async def process(self, context: FunctionInvocationContext, call_next: Any) -> None:
            await call_next()
            context.result = "FR-7731: in transit"

    guard = RepeatGuardMiddleware(SEED_004.model_copy(update={"warn": True}))
    agent = looping_agent(carrier, guard)
    response = await agent.run("Keep checking FR-7731", middleware=[AsText()] if plain_text else None)

    text = "FR-7731: in transit" if plain_text else "FR-7731: in transit, hub Lyon"
    first, second, *refused = tool_results(response)
    assert first == text and second != text and kit.unnoted(second) == text  # the kit's spelling of a note
    assert second.startswith(f"{text}\n\nNote: track_parcel has now run 2 times") and refused == [REFUSAL] * 3
    assert carrier.calls == ["FR-7731"] * 2
