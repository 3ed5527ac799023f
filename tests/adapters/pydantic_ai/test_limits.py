"""Budgets (model calls, cost, run-clock time), UsageLimits side by side, and misuse that must fail loudly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pai_parcels import SEED_004, Carrier, guarded
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UsageLimitExceeded, UserError
from pydantic_ai.tools import ToolDefinition
from repeat_hooks_pydantic_ai import GuardSetupError, RepeatGuard, TokenPrices, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling, steps

import repeat_hooks
from repeat_hooks import Policy, StopReason, StopRepeatedCalls

STUCK = keep_calling("track_parcel", {"parcel_id": "FR-7731"})


def wandering(n: int = 50) -> Any:
    """A model tracking a new parcel at every step: no repeats, it just never stops."""
    return steps(*[[("track_parcel", {"parcel_id": f"FR-{i}"})] for i in range(n)])


# -- UsageLimits side by side -------------------------------------------------------------------------


async def test_guard_trips_first_when_request_limit_leaves_room(carrier: Carrier) -> None:
    agent, model = guarded(STUCK, carrier)
    result = await agent.run("Keep checking", usage_limits=UsageLimits(request_limit=6))
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result.output == stop.message  # the caller gets a message, not an exception
    assert model.calls == 5
    # pydantic-ai counts the guard's closing response as a request (with no tokens): 6 of the 6 allowed.
    assert result.usage.requests == 6
    assert result.usage.input_tokens == 5 * 100


async def test_usage_limits_trip_first_with_an_exception_and_no_message(carrier: Carrier) -> None:
    agent, model = guarded(STUCK, carrier)
    with pytest.raises(UsageLimitExceeded, match="request_limit of 4"):
        await agent.run("Keep checking", usage_limits=UsageLimits(request_limit=4))
    assert model.calls == 4
    assert carrier.calls == ["FR-7731", "FR-7731"]  # the guard still refused what it refused


async def test_tool_calls_limit_counts_only_calls_that_ran(carrier: Carrier) -> None:
    # pydantic-ai checks the limit before each call, counting calls that ran: refused calls never run,
    # so with room for the 2 allowed calls and one more, the guard ends the loop with its message.
    agent, model = guarded(STUCK, carrier)
    result = await agent.run("Keep checking", usage_limits=UsageLimits(tool_calls_limit=3))
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model.calls == 5
    # With no room past the allowed calls, the limit raises before the guard can refuse the 3rd.
    with pytest.raises(UsageLimitExceeded, match="tool_calls_limit of 2"):
        await agent.run("Keep checking", usage_limits=UsageLimits(tool_calls_limit=2))
    assert carrier.calls == ["FR-7731"] * 4
    # A model that never repeats is the limit's job: it raises once a 4th call would run.
    wander, _ = guarded(wandering(), Carrier(), Policy())
    with pytest.raises(UsageLimitExceeded, match="tool_calls_limit of 3"):
        await wander.run("Track everything", usage_limits=UsageLimits(tool_calls_limit=3))


@pytest.mark.parametrize("streamed", [False, True])
async def test_max_model_calls_ends_a_wandering_run_with_a_message(streamed: bool, carrier: Carrier) -> None:
    agent, model = guarded(wandering(), carrier, Policy(max_model_calls=4))
    result: Any
    if streamed:  # streamed responses are recorded too
        async with agent.run_stream("Track everything") as result:
            output = await result.get_output()
    else:
        result = await agent.run("Track everything")
        output = result.output
    stop = stop_of(result)
    assert stop is not None and output == stop.message
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert model.calls == 4
    assert carrier.calls == ["FR-0", "FR-1", "FR-2", "FR-3"]


async def test_a_step_budget_usage_limits_would_preempt_fails_loudly(carrier: Carrier) -> None:
    agent, model = guarded(wandering(), carrier, Policy(max_model_calls=8))
    with pytest.raises(UserError, match=r"max_model_calls=8\) can never trip.*request_limit=8"):
        await agent.run("Track everything", usage_limits=UsageLimits(request_limit=8))
    assert model.calls == 0
    with pytest.raises(UserError, match="request_limit=50"):  # pydantic-ai's default limit
        await agent.run("Track everything", capabilities=[RepeatGuard(Policy(max_model_calls=60))])


# -- cost and time ------------------------------------------------------------------------------------


async def test_cost_budget_uses_each_responses_usage(carrier: Carrier) -> None:
    # 100 input + 20 output tokens per response at $3 / $15 per million: $0.0006 a response.
    guard = RepeatGuard(Policy(max_cost_usd=0.002), cost=TokenPrices(3.0, 15.0))
    agent, model = guarded(wandering(), carrier, guard=guard)
    result = await agent.run("Track everything")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.COST
    assert model.calls == 4  # $0.0024 > $0.002 after the 4th response


@dataclass
class FakeRunClock(AbstractCapability[Any]):
    """A run clock as durable execution provides one (``get_run_clock``): 2 s pass at every reading."""

    readings: int = 0

    def get_run_clock(self) -> Callable[[], datetime] | None:
        def now() -> datetime:
            self.readings += 1
            return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.readings)

        return now


async def test_time_budget_reads_the_run_clock(carrier: Carrier) -> None:
    clock = FakeRunClock()
    model = ScriptedModel(wandering())
    agent = Agent(model, tools=[carrier.tool], capabilities=[clock, RepeatGuard(Policy(max_model_seconds=2.5))])
    result = await agent.run("Track everything")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TIME
    assert model.calls == 3  # 1 s per model call on the run clock: 3 s > 2.5 s
    assert clock.readings >= 6


async def test_time_budget_reads_the_given_clock(carrier: Carrier) -> None:
    readings = iter(range(0, 1000, 2))  # 2 s pass at every reading
    guard = RepeatGuard(Policy(max_model_seconds=5), clock=lambda: float(next(readings)))
    agent, model = guarded(wandering(), carrier, guard=guard)
    result = await agent.run("Track everything")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TIME
    assert model.calls == 3  # 2 s per model call: 6 s > 5 s
    with pytest.raises(GuardSetupError, match=r"max_model_seconds=\.\.\.\) could never trip.*clock="):
        RepeatGuard(Policy(max_model_seconds=5), clock=None)


# -- misuse -------------------------------------------------------------------------------------------


def test_two_guards_on_one_agent_fail_loudly(carrier: Carrier) -> None:
    model = ScriptedModel(STUCK)
    with pytest.raises(UserError, match=r"RepeatGuard was given 2 times"):
        agent = Agent(model, tools=[carrier.tool], capabilities=[RepeatGuard(SEED_004), RepeatGuard(Policy())])
        agent.run_sync("Keep checking")
    assert model.calls == 0
    # Under different ids they slip past pydantic-ai's merge: the run refuses to start.
    agent = Agent(
        model, tools=[carrier.tool], capabilities=[RepeatGuard(SEED_004, id="a"), RepeatGuard(Policy(), id="b")]
    )
    with pytest.raises(UserError, match=r"2 RepeatGuard capabilities \(ids \['a', 'b'\]\)"):
        agent.run_sync("Keep checking")
    assert model.calls == 0 and carrier.calls == []


def test_a_stateful_guard_instead_of_a_policy_fails_loudly() -> None:
    with pytest.raises(TypeError, match=r"RepeatGuard\(Policy\(\.\.\.\)\)"):
        RepeatGuard(StopRepeatedCalls())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"takes a repeat_hooks\.Policy"):
        RepeatGuard({"max_calls": 2})  # type: ignore[arg-type]


def test_the_policy_or_its_settings_as_keywords_or_nothing() -> None:
    assert RepeatGuard().policy == Policy()
    assert RepeatGuard(max_calls=3, max_refusals=None).policy == Policy(max_calls=3, max_refusals=None)
    with pytest.raises(TypeError, match=r"unknown setting 'max_call' \(did you mean max_calls\?\)"):
        RepeatGuard(max_call=3)
    with pytest.raises(TypeError, match=r"not both: put max_calls inside Policy"):
        RepeatGuard(Policy(), max_calls=3)


def test_a_cost_budget_without_prices_fails_loudly() -> None:
    with pytest.raises(GuardSetupError, match=r"cost=TokenPrices") as raised:
        RepeatGuard(Policy(max_cost_usd=1.0))
    assert isinstance(raised.value, repeat_hooks.GuardSetupError) and isinstance(raised.value, UserError)
    with pytest.raises(ValueError, match="are both 0, so max_cost_usd could never trip"):
        TokenPrices(0.0, 0.0)


async def test_a_tool_name_in_the_policy_that_matches_no_tool_fails_loudly(carrier: Carrier) -> None:
    """Checked at the run's first model request, where the agent's tools (MCP ones included) are known."""
    agent, model = guarded(STUCK, carrier, Policy(exempt=frozenset({"track_parcels"})))
    with pytest.raises(GuardSetupError, match=r"exempt=\.\.\.\) names 'track_parcels'.*'track_parcel'"):
        await agent.run("Keep checking")
    assert model.calls == 0 and carrier.calls == []
    agent, _ = guarded(STUCK, carrier, Policy(exempt=frozenset({"track_parcel"})))
    with pytest.raises(UsageLimitExceeded):  # the right name: exempt, never refused
        await agent.run("Keep checking", usage_limits=UsageLimits(request_limit=3))
    assert carrier.calls == ["FR-7731"] * 3


async def test_hooks_on_the_agents_own_instance_fail_loudly() -> None:
    guard = RepeatGuard(SEED_004)
    with pytest.raises(GuardSetupError, match="for_run"):
        await guard.before_model_request(None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "spelling"),
    [
        ("GUARD_NAME", "repeat_hooks_pydantic_ai.state.GUARD_NAME"),
        ("FailureCheck", "repeat_hooks.kit.FailureCheck"),
        ("accepts_text", "repeat_hooks_pydantic_ai.guard.accepts_text"),
        ("tool_hints", "repeat_hooks.kit.hints"),
        ("read_only_hint", "repeat_hooks.kit.hints"),
    ],
)
def test_the_names_dropped_from_all_still_import_with_a_warning_naming_the_new_spelling(
    name: str, spelling: str
) -> None:
    import repeat_hooks_pydantic_ai

    with pytest.warns(DeprecationWarning, match=rf"repeat_hooks_pydantic_ai\.{name} is deprecated: use {spelling}"):
        value = getattr(repeat_hooks_pydantic_ai, name)
    if name == "GUARD_NAME":
        assert value == "repeat-hooks"
    if name in ("tool_hints", "read_only_hint"):
        tool = ToolDefinition(name="track", metadata={"annotations": {"readOnlyHint": True, "destructiveHint": None}})
        assert value(tool) == ({"read_only": True} if name == "tool_hints" else True)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        repeat_hooks_pydantic_ai.nothing  # noqa: B018


def test_the_0_2_module_tools_still_imports_registered_with_a_warning_naming_its_home() -> None:
    from repeat_hooks_pydantic_ai import calls

    with pytest.deprecated_call(match=r"tools\.registered is deprecated: use repeat_hooks_pydantic_ai\.calls\."):
        from repeat_hooks_pydantic_ai.tools import registered
    assert registered is calls.registered
