"""Budgets fed from the SDK (model calls, usage-priced cost, timed seconds), failures and bad input."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from agents import Agent, Runner, ToolOutputText, function_tool
from repeat_hooks_openai_agents import GuardState, StopReason, TokenPrices, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, tool_call


def new_parcel_each_time(n: int, model: ScriptedModel) -> list[Any]:
    return [tool_call("track_parcel", {"tracking_number": f"FR-{n}"}, model.new_call_id())]


async def test_max_model_calls_ends_the_turn_after_that_many_calls(carrier: Any) -> None:
    model = ScriptedModel(then=new_parcel_each_time)
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), max_model_calls=3)
    guard = GuardState()

    result = await Runner.run(agent, "Track everything", context=guard)

    assert model.calls == 3
    assert carrier.calls == ["FR-0", "FR-1", "FR-2"]
    assert result.final_output == "I stopped: this turn reached its limit of 3 model calls."
    assert guard.turn.stop is not None and guard.turn.stop.reason is StopReason.MAX_STEPS


async def test_cost_is_priced_from_the_sdk_usage(carrier: Any) -> None:
    model = ScriptedModel(then=new_parcel_each_time, input_tokens=1000, output_tokens=100)
    # $2 per million input tokens, $8 per million output: 1000 in + 100 out = $0.0028 a call.
    prices = TokenPrices(input_usd_per_million=2.0, output_usd_per_million=8.0)
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), max_cost_usd=0.01, cost=prices)
    guard = GuardState()

    result = await Runner.run(agent, "Track everything", context=guard)

    assert model.calls == 4  # $0.0112 > $0.01 after the 4th call
    assert guard.turn.cost_usd == pytest.approx(4 * 0.0028)
    assert guard.turn.stop is not None and guard.turn.stop.reason is StopReason.COST
    assert result.final_output == "I stopped: this turn used up its budget of 0.01 US dollars."


async def test_seconds_come_from_the_clock_you_give(carrier: Any) -> None:
    ticks = itertools.count(step=1.5)  # each model call lasts 1.5 "seconds" on this clock
    model = ScriptedModel(then=new_parcel_each_time)
    agent = guard_agent(
        Agent(name="p", model=model, tools=[carrier.tool]), max_model_seconds=4.0, clock=lambda: float(next(ticks))
    )
    guard = GuardState()

    result = await Runner.run(agent, "Track", context=guard)

    assert model.calls == 3
    assert guard.turn.model_seconds == pytest.approx(4.5)
    assert guard.turn.stop is not None and guard.turn.stop.reason is StopReason.TIME
    assert result.final_output == "I stopped: this turn used up its budget of 4 seconds of model time."


async def test_without_a_clock_no_seconds_are_recorded(carrier: Any) -> None:
    model = ScriptedModel(then=new_parcel_each_time)
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), max_model_calls=2, clock=None)
    guard = GuardState()

    await Runner.run(agent, "Track", context=guard)

    assert guard.turn.model_seconds == 0.0 and guard.turn.cost_usd == 0.0


async def test_a_tool_that_raises_is_a_failure_and_errors_in_a_row_end_the_turn() -> None:
    attempts: list[str] = []

    @function_tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        attempts.append(tracking_number)
        raise ConnectionError("carrier down")

    model = ScriptedModel(then=new_parcel_each_time)
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), max_errors_in_a_row=3)
    guard = GuardState()

    result = await Runner.run(agent, "Track", context=guard)

    assert attempts == ["FR-0", "FR-1", "FR-2"]
    assert model.outputs_received(1)["call_1"] == "An error occurred while running the tool. Please try again."
    assert guard.turn.stop is not None and guard.turn.stop.reason is StopReason.TOO_MANY_ERRORS
    assert result.final_output == "I stopped: 3 tool calls failed in a row, the last one track_parcel. Try again later."


async def test_a_tool_that_times_out_is_a_failure() -> None:
    import asyncio

    @function_tool(timeout=0.01)
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        await asyncio.sleep(1)
        return "never"

    model = ScriptedModel(then=new_parcel_each_time)
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), max_errors_in_a_row=2)
    guard = GuardState()

    result = await Runner.run(agent, "Track", context=guard)

    assert model.outputs_received(1)["call_1"] == "Tool 'track_parcel' timed out after 0.01 seconds."
    assert model.calls == 2
    assert guard.turn.stop is not None and guard.turn.stop.reason is StopReason.TOO_MANY_ERRORS
    assert result.final_output == guard.turn.stop.message


async def test_is_failure_marks_your_own_error_outputs_and_retries_after_failure_are_allowed() -> None:
    answers = iter(["ERROR: timeout", "ERROR: timeout", "in transit", "in transit", "in transit"])
    reached: list[str] = []

    @function_tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        return next(answers)

    model = ScriptedModel(
        *[[tool_call("track_parcel", {"tracking_number": "FR-7731"}, f"c{i}")] for i in range(5)],
    )
    agent = guard_agent(
        Agent(name="p", model=model, tools=[track_parcel]),
        count_failures=False,  # only repeats of a success are refused
        is_failure=lambda out: str(out).startswith("ERROR"),
    )
    guard = GuardState()

    await Runner.run(agent, "Track FR-7731", context=guard)

    # 2 failures did not count; 2 successes did; the 5th identical call is refused.
    assert len(reached) == 4
    assert str(model.outputs_received(5)["c4"]).startswith("Refused: you already called track_parcel with these")


@pytest.mark.parametrize("arguments", ['{"tracking_number": "FR-7731"', "not json at all", "[1, 2]", "", "{" * 5000])
async def test_malformed_arguments_never_crash_the_guard(carrier: Any, arguments: str) -> None:
    model = ScriptedModel(then=lambda n, m: [tool_call("track_parcel", arguments, m.new_call_id())])
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), max_calls=2, max_refusals=3)
    guard = GuardState()

    result = await Runner.run(agent, "Track", context=guard)

    # The SDK could not parse the arguments, so the tool body never ran; the guard still counted
    # the identical calls, refused the 3rd and ended the turn after the 3rd refusal.
    assert carrier.calls == []
    assert model.outputs_received(2)["call_2"] == "An error occurred while running the tool. Please try again."
    assert str(model.outputs_received(3)["call_3"]).startswith("Refused:")
    assert model.calls == 5
    assert result.final_output == guard.turn.stop.message  # type: ignore[union-attr]


async def test_is_failure_is_asked_about_what_the_model_reads() -> None:
    @function_tool
    def track_parcel(tracking_number: str) -> ToolOutputText:
        """Where the parcel is now."""
        return ToolOutputText(text="ERROR: carrier down")

    asked: list[Any] = []

    def is_failure(view: Any) -> bool:
        asked.append(view)
        return "ERROR" in str(view)

    model = ScriptedModel(*[[tool_call("track_parcel", {"tracking_number": "FR-7731"}, f"c{i}")] for i in range(2)])
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), is_failure=is_failure)
    state = GuardState()

    await Runner.run(agent, "Track FR-7731", context=state)

    assert asked[0] == [{"type": "input_text", "text": "ERROR: carrier down"}]  # the Responses item the model gets
    assert state.turn.errors_in_a_row == 2 and state.turn.last_failed == "track_parcel"
