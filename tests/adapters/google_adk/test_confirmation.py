"""Confirmation and long-running tools on ADK's real Runner: asking is not running, an approved call runs, a
rejected call counts as rejected (its retry past the limit is refused without asking), a long-running call is
counted once, when it is issued."""

from __future__ import annotations

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from repeat_hooks_google_adk import RepeatGuardPlugin, read_state
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call

from repeat_hooks import Policy, RefusalKind

from .conftest import USER, Turn, new_session, run_turn, runner_for

CONFIRMATION = "adk_request_confirmation"
ORDER = {"item": "parcel box"}


def confirmation_call(turn: Turn) -> types.FunctionCall:
    calls = [call for event in turn.events for call in event.get_function_calls() if call.name == CONFIRMATION]
    assert len(calls) == 1, calls
    return calls[0]


async def approve(runner: Any, session_id: str, request: types.FunctionCall, confirmed: bool = True) -> Turn:
    answer = types.Part(
        function_response=types.FunctionResponse(name=CONFIRMATION, id=request.id, response={"confirmed": confirmed})
    )
    content = types.Content(role="user", parts=[answer])
    return Turn([event async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=content)])


def order_agent(tool: Any, model: ScriptedLlm) -> LlmAgent:
    return LlmAgent(name="shop", model=model, tools=[tool])


async def test_require_confirmation_asking_is_not_running_and_the_approved_call_runs() -> None:
    orders: list[str] = []

    def place_order(item: str) -> dict[str, str]:
        """Place an order."""
        orders.append(item)
        return {"order": f"ORD-{len(orders)}"}

    model = ScriptedLlm([function_call("place_order", ORDER, "o1")], then=lambda model, request: "Ordered.")
    plugin = RepeatGuardPlugin(Policy(limits={"place_order": 1}, destructive={"place_order"}))
    runner = runner_for(order_agent(FunctionTool(place_order, require_confirmation=True), model), plugin)
    session_id = await new_session(runner)

    asked = await run_turn(runner, session_id, "Order a parcel box")
    assert orders == []  # asked, not run

    done = await approve(runner, session_id, confirmation_call(asked))

    assert orders == ["parcel box"]
    responses = [r for r in done.tool_responses if isinstance(r, dict)]
    assert {"order": "ORD-1"} in responses
    assert not any("error" in r for r in responses)


async def test_request_confirmation_inside_the_tool_then_the_approved_call_runs() -> None:
    orders: list[str] = []

    def place_order(item: str, tool_context: ToolContext) -> dict[str, str]:
        """Place an order, once the user confirmed it."""
        if tool_context.tool_confirmation is None:
            tool_context.request_confirmation(hint=f"Order {item}?")
            return {"status": "waiting for confirmation"}
        if not tool_context.tool_confirmation.confirmed:
            return {"status": "rejected"}
        orders.append(item)
        return {"order": f"ORD-{len(orders)}"}

    model = ScriptedLlm([function_call("place_order", ORDER, "o1")], then=lambda model, request: "Ordered.")
    plugin = RepeatGuardPlugin(Policy(limits={"place_order": 1}))
    runner = runner_for(order_agent(place_order, model), plugin)
    session_id = await new_session(runner)

    asked = await run_turn(runner, session_id, "Order a parcel box")
    assert orders == []
    await approve(runner, session_id, confirmation_call(asked))

    assert orders == ["parcel box"]
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    assert read_state(session).turn.refusals == 0


def asked_twice(limit: int) -> tuple[list[str], ScriptedLlm, Any]:
    """A shop whose ``place_order`` asks for confirmation; the model asks for the same order twice."""
    orders: list[str] = []

    def place_order(item: str) -> dict[str, str]:
        """Place an order."""
        orders.append(item)
        return {"order": "ORD-1"}

    model = ScriptedLlm(
        [function_call("place_order", ORDER, "o1")],
        [function_call("place_order", ORDER, "o2")],
        then=lambda model, request: "Ordered.",
    )
    plugin = RepeatGuardPlugin(Policy(limits={"place_order": limit}))
    return orders, model, runner_for(order_agent(FunctionTool(place_order, require_confirmation=True), model), plugin)


async def test_a_rejected_call_counts_and_its_retry_past_the_limit_is_refused_without_asking() -> None:
    """The model asks, the user says no, the model asks again: the rejection counted (``limits`` 1), so the
    retry is refused (``RefusalKind.REJECTED``) before anyone is asked."""
    orders, model, runner = asked_twice(limit=1)
    session_id = await new_session(runner)

    first = await run_turn(runner, session_id, "Order a parcel box")
    rejected = await approve(runner, session_id, confirmation_call(first), confirmed=False)

    assert orders == []
    assert not [call for event in rejected.events for call in event.get_function_calls() if call.name == CONFIRMATION]
    (refused,) = [r for r in rejected.tool_responses if "Refused" in str(r)]
    assert "was already rejected once before it ran" in refused["error"]
    assert rejected.final_text == "Ordered." and model.calls == 3
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    assert [event.reason for event in read_state(session).events] == [RefusalKind.REJECTED]


async def test_a_retry_after_a_rejection_within_the_limit_is_asked_and_runs_once() -> None:
    orders, _, runner = asked_twice(limit=2)
    session_id = await new_session(runner)

    first = await run_turn(runner, session_id, "Order a parcel box")
    rejected = await approve(runner, session_id, confirmation_call(first), confirmed=False)
    second = await approve(runner, session_id, confirmation_call(rejected))  # the model asked again

    assert orders == ["parcel box"]
    assert not any("Refused" in str(r) for r in second.tool_responses)


async def test_a_long_running_call_is_counted_once_when_issued() -> None:
    requests: list[str] = []

    def ask_approval(amount: int) -> None:
        """Ask a manager to approve a refund (the answer comes later)."""
        requests.append(f"{amount}")

    same = [function_call("ask_approval", {"amount": 50}, f"a{n}") for n in range(5)]
    model = ScriptedLlm(same, then=lambda model, request: "Waiting for the manager.")
    agent = LlmAgent(name="refunds", model=model, tools=[LongRunningFunctionTool(ask_approval)])
    runner = runner_for(agent, RepeatGuardPlugin(Policy()))
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Refund 50")

    # Five identical requests in one response, each returning nothing (the answer comes later): each is
    # counted when it is issued, so the 3rd, 4th and 5th are refused and never reach the manager.
    assert requests == ["50", "50"]
    refused = [r for r in turn.tool_responses if "Refused" in str(r)]
    assert len(refused) == 3
    # The manager's answer to a0, sent later as the user's message, is not a new call: nothing counts it.
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    before = read_state(session).turn
    answer = types.Part(
        function_response=types.FunctionResponse(name="ask_approval", id="a0", response={"approved": True})
    )
    content = types.Content(role="user", parts=[answer])
    events = [e async for e in runner.run_async(user_id=USER, session_id=session_id, new_message=content)]
    assert requests == ["50", "50"]
    assert any(e.is_final_response() for e in events)
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    after = read_state(session).turn
    assert after.counts == before.counts and after.refusals == before.refusals
