"""A model calling a tool the agent does not have: pydantic-ai answers each call with its unknown-tool retry
and charges it to the agent's tool retry budget (``Agent(retries=...)``, 1 by default), failing the run with
``UnexpectedModelBehavior`` when it runs out. The guard counts each such call as a failed call of that name;
when it refuses one, the model reads the refusal instead of pydantic-ai's retry text."""

from __future__ import annotations

from typing import Any

import pytest
from pai_parcels import Carrier, guarded
from pydantic_ai import Agent, Tool
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from repeat_hooks_pydantic_ai import refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import Reply, ScriptedModel, call, keep_calling

from repeat_hooks import Policy, RefusalKind, StopReason

HEX = {"value": "255"}
UNKNOWN = "Unknown tool name: 'hex'. Available tools: 'track_parcel'"
"""What pydantic-ai tells the model for a call of ``hex`` (``tool_manager.py:825``)."""
SAME_FAILURE = "Refused: hex failed the same way 2 times"
"""How the guard's refusal of the 3rd identical failed call starts."""


def hex_returns(messages: Any) -> list[tuple[str, str]]:
    """``(outcome, content)`` of every return to a ``hex`` call in ``messages``, in order."""
    return [
        (part.outcome, str(part.content))
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "hex"
    ]


async def run_once(agent: Agent[None, Any], how: str) -> tuple[str, Any]:
    """One turn, run the way ``how`` says: its output and the object ``stop_of`` / ``refusals_of`` read."""
    if how == "run":
        result = await agent.run("Convert 255 to hex")
        return result.output, result
    if how == "run_stream":
        async with agent.run_stream("Convert 255 to hex") as stream:
            output = await stream.get_output()
        return output, stream
    async with agent.iter("Convert 255 to hex") as run:
        async for _node in run:
            pass
    assert run.result is not None
    return run.result.output, run.result


async def test_pydantic_ais_default_budget_fails_the_run_at_the_second_call(carrier: Carrier) -> None:
    """The default ``retries`` (1): the 2nd call of ``hex`` exceeds it, before any loop forms (the guard, counting
    from the 3rd, refuses none): the caller gets pydantic-ai's ``UnexpectedModelBehavior`` after 2 model calls."""
    agent, model = guarded(keep_calling("hex", HEX), carrier, Policy())
    with pytest.raises(UnexpectedModelBehavior, match=r"Tool 'hex' exceeded max retries count of 1"):
        await agent.run("Convert 255 to hex")
    assert model.calls == 2
    assert model.tool_returns(1) == [UNKNOWN]  # the 2nd model call read pydantic-ai's retry
    assert carrier.calls == []


@pytest.mark.parametrize("how", ["run", "run_stream", "iter"])
async def test_with_a_raised_budget_the_same_failure_is_refused_and_the_turn_ends(how: str, carrier: Carrier) -> None:
    """``retries={"tools": 10}``: the model reads pydantic-ai's error twice, then the guard's refusal in its place;
    3 refused responses end the turn with the stop message before a 6th model call."""
    agent, model = guarded(keep_calling("hex", HEX), carrier, Policy(), retries={"tools": 10})
    output, result = await run_once(agent, how)
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert output == stop.message
    assert model.calls == 5
    received = [text for n in range(1, 5) for text in model.tool_returns(n)]
    assert received[:2] == [UNKNOWN, UNKNOWN]
    assert [text.startswith(SAME_FAILURE) for text in received[2:]] == [True, True]
    assert [(tool, refusal.reason) for tool, refusal in refusals_of(result)] == [("hex", RefusalKind.FAILURE)] * 3
    # The history keeps each refusal where pydantic-ai's retry was (the 5th, read by no model: the turn ended).
    outcomes = [outcome for outcome, _ in hex_returns(result.all_messages())]
    assert outcomes == ["retried", "retried", "success", "success", "success"]
    assert carrier.calls == []


async def test_a_refused_call_still_draws_on_pydantic_ais_budget(carrier: Carrier) -> None:
    """``retries={"tools": 3}``: the 3rd call is refused, yet pydantic-ai charged it (it rejects the name before
    any hook runs), so the 4th call fails the run with its error before the guard's stop."""
    agent, model = guarded(keep_calling("hex", HEX), carrier, Policy(), retries={"tools": 3})
    with pytest.raises(UnexpectedModelBehavior, match=r"Tool 'hex' exceeded max retries count of 3"):
        await agent.run("Convert 255 to hex")
    assert model.calls == 4
    assert model.tool_returns(2) == [UNKNOWN]
    assert model.tool_returns(3)[0].startswith(SAME_FAILURE)


def invented(step: int) -> Reply:
    """A model calling a new tool name at each step: ``hex_0``, ``hex_1``, ..."""
    return [call(f"hex_{step}", HEX, step=step)]


async def test_a_new_name_at_each_step_is_ended_by_errors_in_a_row(carrier: Carrier) -> None:
    """pydantic-ai's budget is per tool name, so a model inventing a name at each step runs until the run's
    ``request_limit`` (50 by default); the guard counts each call as a failure and ends the turn at 3 in a row."""
    unguarded = Agent(ScriptedModel(invented), tools=[carrier.tool])
    with pytest.raises(UsageLimitExceeded, match="request_limit of 50"):
        await unguarded.run("Convert 255 to hex")

    agent, model = guarded(invented, carrier, Policy(max_errors_in_a_row=3))
    result = await agent.run("Convert 255 to hex")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert result.output == stop.message and "hex_2" in stop.message
    assert model.calls == 3
    assert model.tool_returns(2) == ["Unknown tool name: 'hex_1'. Available tools: 'track_parcel'"]


async def test_a_missing_tool_and_a_real_one_in_one_response_count_apart(carrier: Carrier) -> None:
    """Each response calls ``track_parcel`` (read-only) and ``hex``: the parcel is tracked twice, ``hex`` fails
    twice; from the 3rd response both are refused, and the turn ends after 3 refused responses."""

    def both(step: int) -> Reply:
        return [call("track_parcel", {"parcel_id": "FR-1"}, step=step), call("hex", HEX, step=step, index=1)]

    agent, model = guarded(both, carrier, Policy(read_only=frozenset({"track_parcel"})), retries={"tools": 10})
    result = await agent.run("Track FR-1 and convert 255 to hex")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert carrier.calls == ["FR-1", "FR-1"]
    assert model.calls == 5
    assert model.tool_returns(2) == ["FR-1: in transit, hub Lyon", UNKNOWN]
    assert [text[: len("Refused: ")] for text in model.tool_returns(3)] == ["Refused: "] * 2
    assert [tool for tool, _ in refusals_of(result)] == ["track_parcel", "hex"] * 3


async def test_a_tool_not_revealed_yet_fails_the_same_way(carrier: Carrier) -> None:
    """A tool behind tool search (``defer_loading=True``) called before any search: pydantic-ai rejects it the same
    way (``unavailable_tool``, before any hook); the guard counts it as failed and refuses the 3rd."""

    def check_label(label_id: str) -> str:
        """Validate a shipping label."""
        raise AssertionError("never runs: the model did not search for it")

    label = Tool(check_label, defer_loading=True)
    agent, model = guarded(
        keep_calling("check_label", {"label_id": "L-1"}), carrier, Policy(), tools=[label], retries={"tools": 10}
    )
    result = await agent.run("Check label L-1")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert model.calls == 5
    received = [text for n in range(1, 5) for text in model.tool_returns(n)]
    assert ["not available yet" in text for text in received] == [True, True, False, False]
    assert [text.startswith("Refused: check_label failed the same way") for text in received[2:]] == [True, True]
