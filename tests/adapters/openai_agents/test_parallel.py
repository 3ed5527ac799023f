"""Parallel tool calls in one response, and one guarded agent shared by concurrent runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.guard import MissingGuard
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, tool_call

STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


def refused_ids(model: ScriptedModel) -> list[str]:
    seen: dict[str, Any] = {}
    for n in range(model.calls):
        seen.update(model.outputs_received(n))
    return sorted((cid for cid, text in seen.items() if str(text).startswith("Refused")), key=lambda c: int(c[5:]))


@pytest.mark.parametrize("streamed", [False, True])
async def test_parallel_calls_are_counted_exactly_and_later_siblings_are_refused(streamed: bool) -> None:
    reached: list[str] = []

    @function_tool
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        # Earlier siblings take longer: which call is refused must not depend on who finishes first.
        await asyncio.sleep(0.03 if tracking_number == "FR-1" else 0.001)
        return f"{tracking_number}: in transit"

    def three_at_once(n: int, model: ScriptedModel) -> list[Any]:
        return [tool_call("track_parcel", {"tracking_number": f"FR-{k}"}, model.new_call_id()) for k in (1, 2, 3)]

    model = ScriptedModel(then=three_at_once)
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]), **SEED_004)
    state = GuardState()

    if streamed:
        result: Any = Runner.run_streamed(agent, "Track FR-1..3", context=state)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "Track FR-1..3", context=state)

    # Response 1: the first two listed run, the third is refused. Responses 2 and 3: all three refused.
    # Refusals count once per model response, so the turn ends before the 4th model call, once the
    # model has read the refusals of two responses and asked again.
    assert sorted(reached) == ["FR-1", "FR-2"]
    assert refused_ids(model) == ["call_3", "call_4", "call_5", "call_6"]  # call_7..9: no model call saw them
    assert model.calls == 3
    assert state.turn.refusals == 7 and state.turn.refused_responses == 3
    assert result.final_output == STOPPED


async def test_refused_sibling_is_the_same_on_every_run() -> None:
    refused: set[tuple[str, ...]] = set()
    for _ in range(5):
        model = ScriptedModel(
            [tool_call("track_parcel", {"tracking_number": n}, f"c{n}") for n in ("A", "B", "C", "D")],
        )

        @function_tool
        async def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            await asyncio.sleep(0.001 * (4 - ord(tracking_number[0]) + ord("A")))
            return "in transit"

        agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), count="per_turn", match="tool")
        await Runner.run(agent, "Track A..D", context=GuardState())
        received = model.outputs_received(1)
        refused.add(tuple(sorted(cid for cid, text in received.items() if text.startswith("Refused"))))
    assert refused == {("cC", "cD")}


async def test_one_guarded_agent_serves_concurrent_runs_with_their_own_counts() -> None:
    reached: list[str] = []

    @function_tool
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        await asyncio.sleep(0.001)
        return f"{tracking_number}: in transit"

    # One shared agent and model; each run keeps calling its own parcel.
    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "X"}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]), **SEED_004)
    states = [GuardState() for _ in range(8)]

    results = await asyncio.gather(
        *(Runner.run(agent, f"Keep checking parcel {i}", context=state) for i, state in enumerate(states))
    )

    assert [r.final_output for r in results] == [STOPPED] * 8
    assert len(reached) == 2 * 8  # each run reached the carrier exactly twice
    assert [state.turn.refusals for state in states] == [3] * 8
    assert [state.turn.model_calls for state in states] == [5] * 8
    assert model.calls == 5 * 8


async def test_a_run_without_a_state_in_its_context_fails_loudly(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "X"}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]))

    for context in ({"user": "u1"}, None):
        with pytest.raises(MissingGuard, match=r"context=GuardState\(\)"):
            await Runner.run(agent, "Keep checking", context=context)
    assert carrier.calls == [] and model.calls == 0


async def test_the_state_may_sit_in_your_own_context(carrier: Any) -> None:
    class AppContext:
        def __init__(self) -> None:
            self.user_id = "u1"
            self.repeat_guard = GuardState()

    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "X"}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **SEED_004)
    context = AppContext()

    result = await Runner.run(agent, "Keep checking", context=context)

    assert result.final_output == STOPPED
    assert carrier.calls == ["X", "X"]
    assert context.repeat_guard.turn.refusals == 3


def test_guarding_leaves_the_original_agent_and_tools_untouched(carrier: Any) -> None:
    original = Agent(name="parcel-tracker", tools=[carrier.tool])
    guarded = guard_agent(original)
    twice = guard_agent(guarded, max_calls=3)

    assert original.tools == [carrier.tool] and carrier.tool.tool_input_guardrails is None
    assert original.tool_use_behavior == "run_llm_again"
    assert guarded is not original and guarded.tools[0] is not carrier.tool
    assert [g.get_name() for g in twice.tools[0].tool_input_guardrails or []] == ["repeat_hooks"]  # type: ignore[union-attr]
    assert twice.hooks is not guarded.hooks and twice.hooks.policy.max_calls == 3  # type: ignore[union-attr]
    assert twice.tool_use_behavior.original == "run_llm_again"  # type: ignore[union-attr]
