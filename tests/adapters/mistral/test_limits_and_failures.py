"""Budgets, tool failures, store outages and the class settings, through the SDK's real loop."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from mistralai.agents import agents
from repeat_hooks_mistral import GuardSetupError, RepeatGuardHook, TokenPrices, read_state, stop_of
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, calls_this_turn, run_turn, tool_messages

from repeat_hooks import GuardState, MemoryStore, Policy, StopReason
from repeat_hooks.messages import STORE_DOWN_REFUSAL

T = TypeVar("T")
FR = {"tracking_number": "FR-7731"}


def numbered_calls(request: Any) -> ToolUse:
    """A model that checks a new parcel every time: never the same call twice."""
    return ToolUse("track_parcel", {"tracking_number": f"FR-{calls_this_turn(request)}"})


class StepGuard(RepeatGuardHook):
    policy = Policy(max_model_calls=3)


async def test_max_model_calls_ends_the_turn(carrier: Any, agent_for: Any) -> None:
    model = ScriptedModel(numbered_calls)
    async with await agent_for(model, StepGuard()).create_session() as session:
        result = await run_turn(session, "Check every parcel.")
        stop = await stop_of(session, guard=StepGuard)

    assert len(model.requests) == 3
    assert len(carrier.calls) == 3
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert stop.message == "I stopped: this turn reached its limit of 3 model calls."
    assert result.text == ""


class CostGuard(RepeatGuardHook):
    policy = Policy(max_cost_usd=0.05)
    cost = TokenPrices(2.0, 6.0)


async def test_the_cost_of_the_recorded_token_usage_ends_the_turn(carrier: Any, agent_for: Any) -> None:
    # Each call reports 10 000 input + 1 000 output tokens: $0.02 + $0.006 = $0.026; the 2nd goes over $0.05.
    model = ScriptedModel(numbered_calls, usage=(10_000, 1_000))
    async with await agent_for(model, CostGuard()).create_session() as session:
        await run_turn(session, "Check every parcel.")
        stop = await stop_of(session, guard=CostGuard)
        state = await read_state(session, guard=CostGuard)

    assert len(model.requests) == 2
    assert stop is not None and stop.reason is StopReason.COST
    assert state is not None and state.turn.cost_usd == pytest.approx(0.052)


class ErrorGuard(RepeatGuardHook):
    policy = Policy(max_errors_in_a_row=2)


async def test_failed_tool_calls_in_a_row_end_the_turn(carrier: Any, agent_for: Any) -> None:
    carrier.fail = True
    model = ScriptedModel(numbered_calls)
    async with await agent_for(model, ErrorGuard()).create_session() as session:
        await run_turn(session, "Check every parcel.")
        stop = await stop_of(session, guard=ErrorGuard)

    assert len(carrier.calls) == 2
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert stop.message == "I stopped: 2 tool calls failed in a row, the last one track_parcel. Try again later."


class SuccessOnlyGuard(RepeatGuardHook):
    policy = Policy(max_calls=1, count_failures=False)


async def test_a_failed_call_may_be_retried_when_failures_do_not_count(carrier: Any, agent_for: Any) -> None:
    carrier.fail = True
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), ToolUse("track_parcel", FR), "The carrier is down.")
    async with await agent_for(model, SuccessOnlyGuard()).create_session() as session:
        result = await run_turn(session, "Check FR-7731.")

    assert len(carrier.calls) == 2, "the retry after a failure was not refused"
    assert result.text == "The carrier is down."


async def test_calls_of_a_tool_the_agent_lacks_are_rc11_s_errors_that_no_limit_counts(
    carrier: Any, agent_for: Any
) -> None:
    """rc11's native core answers a call of a tool the agent lacks (``hex``) with its own InvalidToolCall error,
    before any hook: the guard counts none of them as failed calls, so neither the repeat limit nor
    ``max_errors_in_a_row`` ends the turn; the model reads the error every time, until it answers."""
    model = ScriptedModel.replies(*[ToolUse("hex", {"number": "255"})] * 6, "I cannot convert it.")
    async with await agent_for(model, ErrorGuard()).create_session() as session:
        result = await run_turn(session, "Convert 255 to hex.")
        stop = await stop_of(session, guard=ErrorGuard)
        state = await read_state(session, guard=ErrorGuard)

    unsupported = '{"result":{"type":"error","error":{"name":"InvalidToolCall","message":"unsupported top-level tool'
    assert tool_messages(model.requests[-1]) == [unsupported + ' \\"hex\\""}}}'] * 6
    assert len(model.requests) == 7 and result.text == "I cannot convert it."
    assert carrier.calls == [] and stop is None
    assert state is not None, "the guard ran in the session"
    assert (state.turn.counts, state.turn.errors_in_a_row, state.turn.refusals) == ({}, 0, 0), "it saw no tool call"


# -- the store fails: the agent loop never crashes ---------------------------------------------------


class BrokenStore(MemoryStore):
    """A shared store that cannot be reached."""

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        raise ConnectionError("store unreachable")


class OpenGuard(RepeatGuardHook):
    policy = Policy(count="per_turn", match="tool", max_calls=1)
    store = BrokenStore()


class ClosedGuard(OpenGuard):
    fail = "closed"


async def test_a_failing_store_fails_open_by_default(
    carrier: Any, agent_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "FR-7731 is in transit.")
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        async with await agent_for(model, OpenGuard()).create_session() as session:
            result = await run_turn(session, "Check FR-7731 three times.")

    assert len(carrier.calls) == 3, "unguarded, but running"
    assert result.text == "FR-7731 is in transit."
    assert "OpenGuard could not reach the state of" in caplog.text and "failing open" in caplog.text
    assert "store unreachable" in caplog.text


async def test_a_failing_store_fails_closed_when_asked(
    carrier: Any, agent_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "Nothing to report.")
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        async with await agent_for(model, ClosedGuard()).create_session() as session:
            result = await run_turn(session, "Check FR-7731.")

    assert carrier.calls == []
    assert model.requests == [], "the first model call is skipped: the turn ends"
    assert (result.stop_reason, result.text) == ("completed", "")
    assert "ClosedGuard could not reach the state of" in caplog.text and "failing closed" in caplog.text


class FlakyStore(MemoryStore):
    """A store whose 2nd update fails: with this policy, a turn's updates are pre_llm_call, then the tool check."""

    def __init__(self) -> None:
        super().__init__()
        self.updates = 0

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        self.updates += 1
        if self.updates == 2:
            raise ConnectionError("store unreachable")
        return await super().update(key, change)


class ClosedToolGuard(RepeatGuardHook):
    policy = Policy(count="per_turn", match="tool", max_calls=1)
    store = FlakyStore()
    fail = "closed"


async def test_fail_closed_refuses_the_tool_call_with_a_clear_message(carrier: Any, agent_for: Any) -> None:
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "I could not check.")
    async with await agent_for(model, ClosedToolGuard()).create_session() as session:
        result = await run_turn(session, "Check FR-7731.")

    assert carrier.calls == []
    assert tool_messages(model.requests[-1]) == [STORE_DOWN_REFUSAL]
    assert result.text == "I could not check."


# -- the class settings -------------------------------------------------------------------------------


def test_each_guard_class_has_its_own_store_unless_it_inherits_one() -> None:
    class A(RepeatGuardHook):
        pass

    class B(RepeatGuardHook):
        pass

    class C(OpenGuard):
        pass

    assert A.store is not B.store
    assert isinstance(A.store, MemoryStore)
    assert C.store is OpenGuard.store, "a named store is inherited, not replaced"
    assert A.state_key("s") != B.state_key("s")


def test_a_policy_that_is_not_a_policy_is_refused_at_class_creation() -> None:
    spelling = r"Wrong takes a repeat_hooks\.Policy, not str: class Wrong\(RepeatGuardHook\): policy = Policy"
    with pytest.raises(TypeError, match=spelling):

        class Wrong(RepeatGuardHook):
            policy = "max_calls=2"  # type: ignore[assignment]


def test_a_time_budget_is_refused_at_class_creation_since_rc11_records_no_latency() -> None:
    with pytest.raises(GuardSetupError, match=r"max_model_seconds=\.\.\.\) could never trip.*no model latency"):

        class Timed(RepeatGuardHook):
            policy = Policy(max_model_seconds=30)


def test_the_same_answer_rule_is_refused_at_class_creation_since_each_turn_ends_at_its_answer() -> None:
    with pytest.raises(GuardSetupError, match=r"max_same_answers=\.\.\.\) could never trip.*ends in CompletedTurn"):

        class Answers(RepeatGuardHook):
            policy = Policy(max_same_answers=3)


def test_a_cost_budget_without_prices_is_refused_with_the_spelling_that_feeds_it() -> None:
    with pytest.raises(GuardSetupError, match=r"class Costly\(RepeatGuardHook\): cost = TokenPrices\(\.\.\.\)"):

        class Costly(RepeatGuardHook):
            policy = Policy(max_cost_usd=1.0)


def test_the_0_1_price_settings_are_refused_with_their_replacement() -> None:
    with pytest.raises(
        TypeError, match=r"usd_per_million_input_tokens is no longer a setting: write cost = TokenPrices"
    ):

        class Priced(RepeatGuardHook):
            usd_per_million_input_tokens = 2.0


def test_the_guard_takes_only_the_hook_points_its_policy_needs() -> None:
    """rc11 adds a loop step per hook point the class overrides: the seed-004 guard needs two."""

    class Lean(RepeatGuardHook):
        policy = Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3)

    class Budgeted(Lean):
        policy = Policy(max_model_calls=8, max_errors_in_a_row=3)

    class Printing(Lean):
        async def post_llm_call(self, ctx: Any, invocation: Any) -> Any:
            return await super().post_llm_call(ctx, invocation)

    hook = agents.Hook
    assert Lean.pre_tool_call is not hook.pre_tool_call and Lean.pre_llm_call is not hook.pre_llm_call
    assert (Lean.post_tool_call, Lean.post_llm_call) == (hook.post_tool_call, hook.post_llm_call)
    assert Budgeted.post_tool_call is not hook.post_tool_call and Budgeted.post_llm_call is not hook.post_llm_call
    assert Printing.post_llm_call is Printing.__dict__["post_llm_call"], "a user's own method is kept"
