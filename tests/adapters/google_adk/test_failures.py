"""Tools that raise, report errors, or get malformed arguments; tools the model made up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from repeat_hooks_google_adk import STOP_METADATA, RepeatGuardPlugin, read_state
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call, keep_calling, text

from repeat_hooks import Policy

from .conftest import ARGS, USER, new_session, run_turn, runner_for

TOO_MANY_ERRORS = "I stopped: 3 tool calls failed in a row, the last one track_parcel. Try again later."


class CarrierDown(RuntimeError):
    pass


def failing_tool(calls: list[str]) -> Any:
    def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        raise CarrierDown("carrier API timed out")

    return track_parcel


def report_errors(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception) -> dict[str, Any]:
    """The agent's own on_tool_error_callback: hands the model the error instead of failing the run."""
    return {"error": f"{type(error).__name__}: {error}"}


async def test_a_raising_tool_still_fails_the_invocation_as_adk_does() -> None:
    calls: list[str] = []
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[failing_tool(calls)]), _plugin())

    with pytest.raises(CarrierDown, match="timed out"):  # the guard neither hides nor replaces the error
        await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    assert calls == ["FR-7731"]


async def test_errors_reported_to_the_model_end_the_turn_after_three_in_a_row() -> None:
    calls: list[str] = []
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    agent = LlmAgent(
        name="parcel_tracker", model=model, tools=[failing_tool(calls)], on_tool_error_callback=report_errors
    )
    runner = runner_for(agent, _plugin(count_failures=False, max_errors_in_a_row=3))

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    # Failed calls are not counted as repeats (count_failures=False): all 3 reached the tool.
    assert calls == ["FR-7731"] * 3
    assert turn.tool_responses == [{"error": "CarrierDown: carrier API timed out"}] * 3
    assert model.calls == 3
    assert turn.final_text == TOO_MANY_ERRORS
    assert turn.final.custom_metadata[STOP_METADATA] == "too_many_errors"


async def test_a_tool_that_returns_errors_counts_as_failing_with_is_failure() -> None:
    calls: list[str] = []

    def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        return {"status": "error", "message": "carrier API timed out"}

    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    plugin = RepeatGuardPlugin(
        Policy(count_failures=False, max_errors_in_a_row=3, max_calls=2),
        is_failure=lambda result: result.get("status") == "error",
    )
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel]), plugin)

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    assert calls == ["FR-7731"] * 3
    assert turn.final_text == TOO_MANY_ERRORS


async def test_parallel_failures_persist_the_exact_state() -> None:
    calls: list[str] = []

    async def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        await asyncio.sleep(0.01)  # both calls are counted before either fails
        raise CarrierDown("carrier API timed out")

    model = ScriptedLlm([function_call("track_parcel", ARGS, "p1"), function_call("track_parcel", ARGS, "p2")], "Down.")
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel], on_tool_error_callback=report_errors)
    runner = runner_for(agent, _plugin(count_failures=False))
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Where is FR-7731?")

    assert turn.final_text == "Down."
    assert calls == ["FR-7731"] * 2
    # Both failures were taken back out of the count; the persisted state says so (ADK merges the two
    # calls' state deltas key by key, which alone would keep the count one call left behind).
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    state = read_state(session)
    assert state.turn.counts == {}
    assert state.turn.errors_in_a_row == 2


async def test_malformed_arguments_reach_the_model_as_adk_errors_and_repeats_are_refused() -> None:
    calls: list[str] = []

    def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        return {"status": "in transit"}

    model = ScriptedLlm(then=keep_calling("track_parcel", {"tracking_no": "FR-7731", "n": [1.5, None, {"x": ""}]}))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel]), _plugin())

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    assert calls == []  # ADK itself rejects the arguments; the tool never runs
    responses = turn.tool_responses
    assert all("error" in r for r in responses)
    assert "tracking_number" in str(responses[0]["error"])  # ADK's own message, for the 2 calls allowed
    assert [r["error"].startswith("Refused:") for r in responses] == [False, False, True, True, True]
    assert turn.final.custom_metadata[STOP_METADATA] == "ignored_refusals"


async def test_a_tool_the_model_made_up_is_counted_and_refused_like_any_other() -> None:
    model = ScriptedLlm(then=keep_calling("track_parcels", ARGS))  # no such tool
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[failing_tool([])]), _plugin())

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    responses = turn.tool_responses
    assert "no tool with that name" in responses[0]["error"]
    assert [r["error"].startswith("Refused:") for r in responses] == [False, False, True, True, True]
    assert model.calls == 5
    assert turn.final.custom_metadata[STOP_METADATA] == "ignored_refusals"


async def test_a_text_answer_after_errors_is_kept() -> None:
    model = ScriptedLlm([function_call("track_parcel", ARGS, "c1")], [text("The carrier is down, sorry.")])
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[failing_tool([])], on_tool_error_callback=report_errors)
    runner = runner_for(agent, _plugin(max_errors_in_a_row=1))

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    # 1 error in a row is the limit: the next model call is not made, the turn ends with the guard's text.
    assert model.calls == 1
    assert turn.final.custom_metadata[STOP_METADATA] == "too_many_errors"


def _plugin(**settings: Any) -> RepeatGuardPlugin:
    return RepeatGuardPlugin(Policy(**{"match": "tool", "max_calls": 2, "max_refusals": 3, **settings}))
