"""Tool outcomes: errors LangChain reports (raised and handled, bad arguments, unknown tools)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolCallRequest, ToolErrorMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.tools import tool
from langchain_parcels import ARGS, USER, Carrier, parcel_agent, thread
from langgraph.checkpoint.memory import InMemorySaver
from repeat_hooks_langchain import RepeatGuardMiddleware, guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message, keep_calling

from repeat_hooks import Policy, StopReason

TOO_MANY_ERRORS_POLICY = Policy(max_calls=2, max_errors_in_a_row=3)


def report_errors(error: Exception, request: ToolCallRequest) -> str:
    return f"{request.tool_call['name']} failed: {type(error).__name__}"


class Flaky:
    """A carrier API that fails for the numbers it is told to."""

    def __init__(self, failing: set[str]) -> None:
        self.calls: list[str] = []
        self.failing = failing

        @tool
        def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            self.calls.append(tracking_number)
            if tracking_number in self.failing:
                raise TimeoutError("carrier timed out")
            return f"{tracking_number}: in transit"

        self.tool = track_parcel


def tracking(*numbers: str) -> list[AIMessage]:
    return [call_message(("track_parcel", {"tracking_number": n})) for n in numbers]


def flaky_agent(model: ScriptedChatModel, flaky: Flaky, policy: Policy = TOO_MANY_ERRORS_POLICY) -> Any:
    """The agent with the flaky carrier, the guard, and LangChain's own ToolErrorMiddleware reporting errors."""
    middleware = [RepeatGuardMiddleware(policy), ToolErrorMiddleware(on_error=report_errors)]
    return create_agent(model, tools=[flaky.tool], middleware=middleware, checkpointer=InMemorySaver())


def test_three_failures_in_a_row_end_the_turn() -> None:
    flaky = Flaky({"FR-1", "FR-2", "FR-3"})
    model = ScriptedChatModel(replies=[*tracking("FR-1", "FR-2", "FR-3"), AIMessage(content="never")])
    agent = flaky_agent(model, flaky)

    result = agent.invoke(USER, thread("t1"))

    assert flaky.calls == ["FR-1", "FR-2", "FR-3"]
    assert [model.tool_results(n) for n in (1, 2)] == [["track_parcel failed: TimeoutError"]] * 2
    assert model.calls == 3  # the 4th model call never happened
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert result["messages"][-1].content == stop.message


def test_a_success_between_failures_resets_the_count() -> None:
    flaky = Flaky({"FR-1", "FR-2", "FR-4", "FR-5"})
    model = ScriptedChatModel(replies=[*tracking("FR-1", "FR-2", "FR-3", "FR-4", "FR-5"), AIMessage(content="done")])
    agent = flaky_agent(model, flaky)

    result = agent.invoke(USER, thread("t1"))

    assert flaky.calls == ["FR-1", "FR-2", "FR-3", "FR-4", "FR-5"]
    assert result["messages"][-1].content == "done"
    assert stop_of(result) is None
    assert guard_state_of(result).turn.errors_in_a_row == 2


def test_an_unhandled_tool_error_reaches_the_caller_and_the_next_turn_starts_clean() -> None:
    flaky = Flaky({"FR-1"})
    model = ScriptedChatModel(replies=[*tracking("FR-1"), *tracking("FR-2"), AIMessage(content="FR-2 moves")])
    agent = create_agent(
        model, tools=[flaky.tool], middleware=[RepeatGuardMiddleware(Policy())], checkpointer=InMemorySaver()
    )

    with pytest.raises(TimeoutError, match="carrier timed out"):
        agent.invoke(USER, thread("t1"))  # LangChain re-raises tool errors by default; so does the guard

    result = agent.invoke({"messages": [("user", "Try FR-2")]}, thread("t1"))
    assert result["messages"][-1].content == "FR-2 moves"
    assert flaky.calls == ["FR-1", "FR-2"]
    assert guard_state_of(result).turn.number == 2


def test_malformed_arguments_never_reach_the_tool_count_as_failures_and_repeats_are_refused(
    carrier: Carrier,
) -> None:
    bad = {"tracking_nr": "FR-7731"}  # not the tool's schema
    model = ScriptedChatModel(then=keep_calling("track_parcel", bad))
    agent = parcel_agent(model, carrier, Policy(max_calls=2, max_refusals=2))

    result = agent.invoke(USER, thread("t1"))

    assert carrier.calls == []  # LangChain's tool node rejected the arguments both times
    first = model.tool_results(1)[0]
    assert "tracking_number" in first and "Field required" in first  # LangChain's validation error
    # The default count="progress" tells the model this call fails the same way each time.
    assert model.tool_results(3)[0].startswith("Refused: track_parcel failed the same way 2 times")
    state = guard_state_of(result)
    assert state.turn.errors_in_a_row == 2 and state.turn.refusals == 2
    assert stop_of(result) is not None
    # No argument values in the saved state: digests and tool names only.
    assert "FR-7731" not in str(result["repeat_guard"])


def test_a_call_to_a_tool_the_agent_does_not_have_is_an_error_then_refused(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("cancel_parcel", {"tracking_number": "FR-7731"}))
    agent = parcel_agent(model, carrier, Policy(max_calls=1, max_refusals=2))

    result = agent.invoke(USER, thread("t1"))

    assert "cancel_parcel is not a valid tool" in model.tool_results(1)[0]
    assert model.tool_results(2)[0].startswith("Refused")
    assert [m.status for m in result["messages"] if isinstance(m, ToolMessage)] == ["error"] * 3
    assert carrier.calls == []


def test_the_scripted_model_sends_its_invalid_tool_calls_and_the_model_reads_langchains_error(
    carrier: Carrier,
) -> None:
    # A response whose call could not be parsed (bad JSON) next to a valid one: the scripted model keeps it,
    # so LangChain answers it with its own error and the guard decides the valid call as usual.
    bad = invalid_tool_call(name="track_parcel", args='{"tracking_number": 7', id="bad_1", error="bad JSON")
    reply = AIMessage(
        content="", tool_calls=[{"name": "track_parcel", "args": ARGS, "id": None}], invalid_tool_calls=[bad]
    )
    model = ScriptedChatModel(replies=[reply, AIMessage(content="In transit.")])
    agent = parcel_agent(model, carrier)

    result = agent.invoke(USER, thread("t1"))

    sent = next(m for m in model.received[1] if isinstance(m, AIMessage))
    assert [call["id"] for call in sent.invalid_tool_calls] == ["bad_1"]
    read = {m.tool_call_id: (m.status, m.text) for m in model.received[1] if isinstance(m, ToolMessage)}
    assert read["bad_1"][0] == "error" and "could not be executed" in read["bad_1"][1]
    assert carrier.calls == ["FR-7731"] and result["messages"][-1].content == "In transit."
