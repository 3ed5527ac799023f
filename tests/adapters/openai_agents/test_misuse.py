"""Mistakes fail loudly at the first model or tool call, with the right spelling in the message (issue 12, 5-9).

Each test has the mistake in it and runs the real Runner: no hooks, one guard shared by two
concurrent runs, an agent not built with guard_agent, a budget nothing feeds, a RunState restored
with the SDK's default context handling.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from agents import Agent, AgentHooks, Runner, RunState, function_tool
from repeat_hooks_openai_agents import (
    GuardHooks,
    GuardSetupError,
    MissingGuard,
    context_deserializer,
    context_serializer,
    guard_agent,
    token_prices,
)
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import StopRepeatedCalls

ARGS = {"tracking_number": "FR-7731"}
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."


def seed_004() -> StopRepeatedCalls:
    return StopRepeatedCalls(match="tool", max_calls=2, max_refusals=3)


def guarded(model: ScriptedModel, carrier: Any, **settings: Any) -> Agent[Any]:
    return guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool], **settings))


# -- 5. forgetting hooks=GuardHooks() ----------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_run_without_guard_hooks_raises_before_the_model_is_called(carrier: Any, streamed: bool) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guarded(model, carrier)
    guard = seed_004()
    first = await Runner.run(agent, "Keep checking FR-7731", context=guard, hooks=GuardHooks())
    assert first.final_output == STOPPED

    # The mistake: an unrelated question, same guard, no hooks. Before the fix it ended at once with the
    # first run's stop, and a log line was printed once per process.
    with pytest.raises(GuardSetupError, match=r"without GuardHooks.*hooks=GuardHooks\(\)"):
        if streamed:
            run = Runner.run_streamed(agent, "What is your name?", context=guard)
            async for _ in run.stream_events():
                pass
        else:
            await Runner.run(agent, "What is your name?", context=guard)

    assert model.calls == 5  # the second run never reached the model
    assert carrier.calls == ["FR-7731"] * 2


async def test_the_first_run_without_guard_hooks_raises_too(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))

    with pytest.raises(GuardSetupError, match="without GuardHooks"):
        await Runner.run(guarded(model, carrier), "Keep checking FR-7731", context=seed_004())

    assert model.calls == 0 and carrier.calls == []


async def test_your_agent_hooks_still_fire_and_replacing_them_still_fails_at_the_first_tool_call(
    carrier: Any,
) -> None:
    seen: list[str] = []

    class Mine(AgentHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            seen.append("llm_start")

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            seen.append(f"tool_end {result}")

    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In Lyon.")])
    agent = guarded(model, carrier, hooks=Mine())
    result = await Runner.run(agent, "Where is FR-7731?", context=seed_004(), hooks=GuardHooks())
    assert result.final_output == "In Lyon."
    assert seen == ["llm_start", "tool_end FR-7731: in transit, hub Lyon", "llm_start"]

    # Agent hooks replaced after guarding, and no GuardHooks: the tool guardrail catches it before the tool runs.
    bare = agent.clone(hooks=None, model=ScriptedModel(then=keep_calling("track_parcel", ARGS)))
    with pytest.raises(GuardSetupError, match="without GuardHooks"):
        await Runner.run(bare, "Keep checking", context=seed_004())
    assert carrier.calls == ["FR-7731"]


# -- 6. one guard, two concurrent runs ---------------------------------------------------------------


async def test_one_guard_shared_by_two_concurrent_runs_fails_one_of_them() -> None:
    reached: list[str] = []

    @function_tool
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        await asyncio.sleep(0.002)
        return f"{tracking_number}: in transit"

    def agent_for(parcel: str) -> Agent[Any]:
        model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": parcel}))
        return guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]))

    guard = seed_004()  # the mistake: a double-sent message runs twice on one conversation's guard
    outcomes = await asyncio.gather(
        Runner.run(agent_for("A"), "Keep checking A", context=guard, hooks=GuardHooks()),
        Runner.run(agent_for("B"), "Keep checking B", context=guard, hooks=GuardHooks()),
        return_exceptions=True,
    )

    errors = [o for o in outcomes if isinstance(o, BaseException)]
    finished = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], GuardSetupError)
    assert "one guard per conversation" in str(errors[0])
    # The run that kept the guard kept exact counts: 2 calls reached the tool, 3 refusals, then the stop.
    (survivor,) = finished
    assert survivor.final_output == STOPPED
    parcel = "A" if outcomes[0] is survivor else "B"
    assert reached.count(parcel) == 2
    assert guard.state.refusals == 3
    assert guard.state.turn == 2  # before the fix the runs reset each other's turn dozens of times


async def test_sequential_runs_on_one_guard_are_fine(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guarded(model, carrier)
    guard = seed_004()

    for _ in range(3):
        result = await Runner.run(agent, "Keep checking", context=guard, hooks=GuardHooks())
        assert result.final_output == STOPPED

    assert guard.state.turn == 3 and carrier.calls == ["FR-7731"] * 6


# -- 7. GuardHooks and a guard, but the agent is not guarded --------------------------------------------


async def test_an_agent_not_built_with_guard_agent_is_refused_at_the_first_model_call(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    plain = Agent(name="parcel-tracker", model=model, tools=[carrier.tool])  # the mistake: no guard_agent

    with pytest.raises(GuardSetupError, match=r"'parcel-tracker'.*not built with guard_agent.*guard_agent\(Agent"):
        await Runner.run(plain, "Keep checking FR-7731", context=seed_004(), hooks=GuardHooks())

    assert model.calls == 0 and carrier.calls == []


async def test_an_unguarded_agent_used_as_a_tool_with_guard_hooks_is_refused(carrier: Any) -> None:
    inner_model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    inner = Agent(name="lookup", model=inner_model, tools=[carrier.tool])  # the mistake: not guarded
    outer_model = ScriptedModel([tool_call("ask_lookup", {"input": "Find FR-7731"}, "o1")], [message("never")])
    outer = guard_agent(
        Agent(
            name="desk",
            model=outer_model,
            tools=[inner.as_tool(tool_name="ask_lookup", tool_description="Ask.", hooks=GuardHooks())],
        )
    )

    with pytest.raises(GuardSetupError, match=r"'lookup'.*guard_agent"):
        await Runner.run(outer, "Where is FR-7731?", context=seed_004(), hooks=GuardHooks())
    assert inner_model.calls == 0 and carrier.calls == []


# -- 8. a budget nothing feeds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"max_model_seconds": 30.0}, r"max_model_seconds=30 can never trip.*GuardHooks\(clock=time.monotonic\)"),
        ({"max_cost_usd": 0.5}, r"max_cost_usd=0.5 can never trip.*GuardHooks\(cost=token_prices\("),
    ],
)
async def test_a_budget_without_what_feeds_it_is_refused_at_the_first_model_call(
    carrier: Any, settings: dict[str, Any], expected: str
) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    guard = StopRepeatedCalls(**settings)

    with pytest.raises(GuardSetupError, match=expected):
        await Runner.run(guarded(model, carrier), "Track", context=guard, hooks=GuardHooks())  # no clock, no cost
    assert model.calls == 0


async def test_a_cost_budget_with_a_model_that_reports_no_usage_is_refused_at_its_first_response(
    carrier: Any,
) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS), reports_usage=False)  # some providers do this
    guard = StopRepeatedCalls(max_cost_usd=0.5)

    with pytest.raises(GuardSetupError, match=r"max_cost_usd=0.5 can never trip.*reported no token usage"):
        await Runner.run(guarded(model, carrier), "Track", context=guard, hooks=GuardHooks(cost=token_prices(2, 8)))
    assert model.calls == 1 and carrier.calls == []  # its tool call never ran


async def test_the_same_budgets_with_their_feeds_run(carrier: Any) -> None:
    ticks = itertools.count(step=1.0)
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In Lyon.")])
    guard = StopRepeatedCalls(max_model_seconds=30.0, max_cost_usd=0.5)
    hooks = GuardHooks(clock=lambda: float(next(ticks)), cost=token_prices(2.0, 8.0))

    result = await Runner.run(guarded(model, carrier), "Where?", context=guard, hooks=hooks)

    assert result.final_output == "In Lyon."
    assert guard.state.model_seconds == 2.0 and guard.state.cost_usd > 0


# -- 9. RunState.from_json without context_deserializer -----------------------------------------------


async def test_a_state_restored_without_context_deserializer_says_to_pass_it(carrier: Any) -> None:
    notified: list[str] = []

    @function_tool(needs_approval=True)
    def notify_customer(text: str) -> str:
        """Tell the customer (needs a human's approval)."""
        notified.append(text)
        return "notified"

    model = ScriptedModel([tool_call("notify_customer", {"text": "Still looking"}, "c1")], [message("Done.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool, notify_customer]))
    paused = await Runner.run(agent, "Tell them", context=seed_004(), hooks=GuardHooks())
    saved = paused.to_state().to_json(context_serializer=context_serializer)

    state = await RunState.from_json(agent, saved)  # the mistake: the SDK's default leaves the context a dict
    for item in state.get_interruptions():
        state.approve(item)
    with pytest.raises(MissingGuard, match=r"context_deserializer=context_deserializer"):
        await Runner.run(agent, state, hooks=GuardHooks())
    assert notified == []  # the approved call did not run unguarded

    state = await RunState.from_json(agent, saved, context_deserializer=context_deserializer)
    for item in state.get_interruptions():
        state.approve(item)
    resumed = await Runner.run(agent, state, hooks=GuardHooks())
    assert notified == ["Still looking"] and resumed.final_output == "Done."
