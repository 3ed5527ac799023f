"""Side by side with ADK's only cap (``RunConfig.max_llm_calls``), the guard's budgets, and misuse that
must fail loudly."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from repeat_hooks_google_adk import (
    STATE_KEY,
    STOP_METADATA,
    Policy,
    RepeatGuardPlugin,
    Stop,
    StopReason,
    TokenPrices,
    stop_of,
)
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks import GuardSetupError, StopRepeatedCalls
from repeat_hooks.messages import STORE_DOWN_STOP

from .conftest import APP, ARGS, STOPPED, USER, Carrier, new_session, run_turn, runner_for

CAP_5 = RunConfig(max_llm_calls=5)


def looping_agent(carrier: Carrier, model: ScriptedLlm | None = None) -> LlmAgent:
    model = model or ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    return LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool])


def fresh_numbers() -> Any:
    numbers = itertools.count(1)
    return keep_calling("track_parcel", lambda request: {"tracking_number": f"FR-{next(numbers)}"})


# -- side by side with max_llm_calls ----------------------------------------------------------------


async def test_max_llm_calls_alone_raises_after_every_call_reached_the_tool(carrier: Carrier) -> None:
    runner = runner_for(looping_agent(carrier))

    with pytest.raises(LlmCallsLimitExceededError):
        await run_turn(
            runner, await new_session(runner), "Keep checking FR-7731", run_config=RunConfig(max_llm_calls=5)
        )

    # ADK's cap counts model calls only: the same lookup ran 5 times and the caller got an exception.
    assert carrier.calls == ["FR-7731"] * 5


async def test_the_guard_under_the_same_cap_refuses_the_repeats_and_answers(carrier: Carrier) -> None:
    plugin = RepeatGuardPlugin(Policy(match="tool", max_calls=2, max_refusals=3))
    runner = runner_for(looping_agent(carrier), plugin)

    turn = await run_turn(
        runner, await new_session(runner), "Keep checking FR-7731", run_config=RunConfig(max_llm_calls=5)
    )

    assert carrier.calls == ["FR-7731"] * 2
    assert turn.final_text == STOPPED


async def test_max_model_calls_ends_the_turn_with_a_message_before_adk_would_raise(carrier: Carrier) -> None:
    model = ScriptedLlm(then=fresh_numbers())  # never repeats: only the step limit can stop it
    runner = runner_for(looping_agent(carrier, model), RepeatGuardPlugin(Policy(max_model_calls=5)))

    turn = await run_turn(runner, await new_session(runner), "Track everything", run_config=RunConfig(max_llm_calls=5))

    assert model.calls == 5
    assert len(carrier.calls) == 5
    assert turn.final.custom_metadata[STOP_METADATA] == "max_steps"
    assert "5" in turn.final_text


async def test_a_step_limit_above_max_llm_calls_fails_at_the_start(carrier: Carrier) -> None:
    model = ScriptedLlm(then=fresh_numbers())
    runner = runner_for(looping_agent(carrier, model), RepeatGuardPlugin(Policy(max_model_calls=8)))

    # ADK wraps what a plugin raises in a RuntimeError naming the plugin; the guard's message is kept.
    with pytest.raises(RuntimeError, match=r"max_model_calls=8\) can never trip: RunConfig\(max_llm_calls=5\)"):
        await run_turn(runner, await new_session(runner), "Track", run_config=RunConfig(max_llm_calls=5))

    assert model.calls == 0


# -- budgets --------------------------------------------------------------------------------------


async def test_cost_budget_from_usage_metadata_and_token_prices_as_cost(carrier: Carrier) -> None:
    model = ScriptedLlm(then=fresh_numbers(), input_tokens=1000, output_tokens=200)
    # $1 / M input, $5 / M output: each call costs $0.001 + $0.001 = $0.002.
    plugin = RepeatGuardPlugin(max_cost_usd=0.005, cost=TokenPrices(1.0, 5.0))
    runner = runner_for(looping_agent(carrier, model), plugin)

    turn = await run_turn(runner, await new_session(runner), "Track everything")

    assert model.calls == 3  # $0.006 > $0.005 after the 3rd call: no 4th
    assert turn.final.custom_metadata[STOP_METADATA] == "cost"


async def test_time_budget_on_the_plugins_clock(carrier: Carrier) -> None:
    ticks = itertools.count(0.0, 1.5)  # every reading 1.5 s after the previous one
    model = ScriptedLlm(then=fresh_numbers())
    plugin = RepeatGuardPlugin(Policy(max_model_seconds=4.0), clock=lambda: next(ticks))
    runner = runner_for(looping_agent(carrier, model), plugin)

    turn = await run_turn(runner, await new_session(runner), "Track everything")

    assert model.calls == 3  # 1.5 s a call: 4.5 s > 4 s after the 3rd
    assert turn.final.custom_metadata[STOP_METADATA] == "time"


def test_token_prices_read_gemini_usage_metadata() -> None:
    from google.genai import types

    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=1000, candidates_token_count=100, thoughts_token_count=100, cached_content_token_count=400
    )
    assert TokenPrices(1.0, 10.0)(usage) == pytest.approx((1000 * 1 + 200 * 10) / 1e6)
    assert TokenPrices(1.0, 10.0, 0.25)(usage) == pytest.approx((600 * 1 + 400 * 0.25 + 200 * 10) / 1e6)
    assert TokenPrices(1.0, 10.0)(types.GenerateContentResponseUsageMetadata()) == 0.0


# -- misuse ---------------------------------------------------------------------------------------


async def test_two_guard_plugins_on_one_runner_fail_at_the_first_run(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(
        looping_agent(carrier, model),
        RepeatGuardPlugin(Policy()),
        RepeatGuardPlugin(Policy(), name="another_guard"),
    )

    with pytest.raises(RuntimeError, match="2 RepeatGuardPlugins share the session-state key"):
        await run_turn(runner, await new_session(runner), "Keep checking FR-7731")

    assert model.calls == 0 and carrier.calls == []


def test_one_plugin_registered_twice_is_refused_by_adk(carrier: Carrier) -> None:
    plugin = RepeatGuardPlugin(Policy())
    with pytest.raises(ValueError, match="already registered"):
        InMemoryRunner(app=App(name=APP, root_agent=looping_agent(carrier), plugins=[plugin, plugin]))


def test_the_plugin_builds_with_no_arguments_as_adk_web_builds_it() -> None:
    # adk web / adk api_server --extra_plugins repeat_hooks_google_adk.RepeatGuardPlugin: cls(name=<qualified name>).
    plugin = RepeatGuardPlugin(name="repeat_hooks_google_adk.RepeatGuardPlugin")

    assert plugin.policy == Policy()
    assert RepeatGuardPlugin(max_calls=3, max_refusals=1).policy == Policy(max_calls=3, max_refusals=1)


def test_a_policy_argument_that_is_not_one_is_refused() -> None:
    with pytest.raises(
        TypeError, match=r"takes a Policy, not a StopRepeatedCalls.*RepeatGuardPlugin\(Policy\(\.\.\.\)\)"
    ):
        RepeatGuardPlugin(StopRepeatedCalls(max_calls=2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"takes a repeat_hooks\.Policy, not dict"):
        RepeatGuardPlugin({"max_calls": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unknown setting 'max_call' \(did you mean max_calls\?\)"):
        RepeatGuardPlugin(max_call=2)
    with pytest.raises(TypeError, match="not both"):
        RepeatGuardPlugin(Policy(), max_calls=2)


def test_budgets_that_can_never_trip_are_refused() -> None:
    with pytest.raises(GuardSetupError, match=r"max_cost_usd=\.\.\.\) could never trip.*cost=TokenPrices"):
        RepeatGuardPlugin(Policy(max_cost_usd=1.0))
    with pytest.raises(GuardSetupError, match=r"max_model_seconds=\.\.\.\) could never trip.*clock="):
        RepeatGuardPlugin(Policy(max_model_seconds=30), clock=None)


async def test_a_tool_name_the_agent_lacks_fails_at_the_first_model_call(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(looping_agent(carrier, model), RepeatGuardPlugin(limits={"track_parcels": 1}))

    with pytest.raises(RuntimeError, match=r"limits=\.\.\.\) names 'track_parcels'.*did you mean 'track_parcel'"):
        await run_turn(runner, await new_session(runner), "Keep checking FR-7731")

    assert model.calls == 0 and carrier.calls == []


async def test_tool_names_are_checked_against_the_whole_agent_tree(carrier: Carrier) -> None:
    from google.adk.tools.agent_tool import AgentTool

    def reroute_parcel(tracking_number: str, hub: str) -> dict[str, Any]:
        """Send a parcel to another hub."""
        return {"status": f"{tracking_number}: rerouted to {hub}"}

    helper = LlmAgent(name="rerouter", model=ScriptedLlm(), tools=[reroute_parcel])
    desk = LlmAgent(name="front_desk", model=ScriptedLlm(), tools=[carrier.tool, AgentTool(helper)])
    # reroute_parcel belongs to an agent used as a tool, not to the agent whose model is called first.
    plugin = RepeatGuardPlugin(limits={"reroute_parcel": 1, "rerouter": 1}, exempt={"track_parcel"})
    runner = runner_for(desk, plugin)

    turn = await run_turn(runner, await new_session(runner), "Hello")

    assert turn.final_text == "Done."


async def test_check_tools_false_leaves_names_unchecked(carrier: Carrier) -> None:
    plugin = RepeatGuardPlugin(Policy(limits={"found_later": 1}), check_tools=False)
    runner = runner_for(looping_agent(carrier, ScriptedLlm()), plugin)

    turn = await run_turn(runner, await new_session(runner), "Hello")

    assert turn.final_text == "Done."


@pytest.mark.parametrize("key", ["repeat_guard", "temp:repeat_hooks"])
def test_a_state_key_adk_would_validate_or_drop_is_refused(key: str) -> None:
    with pytest.raises(GuardSetupError, match=r"must hold a ':'.*must not start with 'temp:'"):
        RepeatGuardPlugin(Policy(), state_key=key)


async def test_a_foreign_value_under_the_state_key_is_an_outage_that_names_the_key(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(looping_agent(carrier, model), RepeatGuardPlugin(Policy(), fail="closed"))
    session = await runner.session_service.create_session(
        app_name=APP, user_id=USER, state={STATE_KEY: {"counts": "not a dict"}}
    )

    turn = await run_turn(runner, session.id, "Keep checking FR-7731")

    # The guard cannot read the counts: with fail="closed" the turn ends before any model call, saying so.
    assert turn.final_text == STORE_DOWN_STOP and stop_of(turn.final) == Stop(
        message=STORE_DOWN_STOP, reason=StopReason.STORE_UNAVAILABLE
    )
    assert carrier.calls == [] and model.calls == 0
    assert re.search(r"session state 'repeat_hooks:guard': .*delete it to start", caplog.text)


async def test_with_fail_open_a_foreign_value_leaves_the_calls_unguarded(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(looping_agent(carrier, model), RepeatGuardPlugin(Policy()))
    session = await runner.session_service.create_session(app_name=APP, user_id=USER, state={STATE_KEY: [1, 2]})

    with pytest.raises(LlmCallsLimitExceededError):
        await run_turn(runner, session.id, "Keep checking FR-7731", run_config=RunConfig(max_llm_calls=4))

    assert carrier.calls == ["FR-7731"] * 4  # as without the guard, which logged why at every call
    assert caplog.text.count("could not reach the state of session state 'repeat_hooks:guard'") >= 4
