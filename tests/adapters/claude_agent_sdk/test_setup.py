"""Setup mistakes fail loudly, and say how to fix them; budgets are fed from what Claude Code reports."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from cas_parcels import TRACKED, allowed, call, carrier, converse, keep_calling, scripted
from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher, StreamEvent, query
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, stop_of
from repeat_hooks_claude_agent_sdk.guard import NO_TRANSPORT
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, offline_options

from repeat_hooks import (
    GuardSetupError,
    GuardState,
    Policy,
    StopReason,
    StopRepeatedCalls,
    StoreUnavailable,
    TokenPrices,
)
from repeat_hooks.kit import Fail, usage_tokens
from repeat_hooks.messages import STORE_DOWN_REFUSAL


def test_a_budget_claude_code_cannot_feed_fails_at_construction() -> None:
    with pytest.raises(GuardSetupError, match=r"max_model_seconds.*no model-call time.*max_turns"):
        RepeatGuardHooks(max_model_seconds=30)
    with pytest.raises(GuardSetupError, match=r"cannot time model calls \(Claude Code reports no model-call time"):
        RepeatGuardHooks(clock=time.time)
    with pytest.raises(GuardSetupError, match=r"max_cost_usd.*cost=TokenPrices.*max_budget_usd"):
        RepeatGuardHooks(max_cost_usd=0.5)
    RepeatGuardHooks(max_cost_usd=0.5, cost=TokenPrices(3, 15))
    RepeatGuardHooks(max_model_calls=8, max_errors_in_a_row=3)


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        # Anthropic's input_tokens leaves out the cache reads and writes: every input token is the three.
        (
            {"input_tokens": 2, "cache_read_input_tokens": 800, "cache_creation_input_tokens": 100, "output_tokens": 9},
            (902, 9, 800),
        ),
        (  # as the fake Messages API reports it
            {"input_tokens": 50, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 10},
            (50, 10, 0),
        ),
        ({"input_tokens": 50, "output_tokens": 1}, (50, 1, 0)),  # a response's first line, before its end
        ({}, (0, 0, 0)),
    ],
)
def test_the_core_reads_the_cost_of_claude_codes_usage(usage: dict[str, int], tokens: tuple[int, int, int]) -> None:
    # The figures calls.usage_for_cost gave before the core read Anthropic's usage itself (issue 15).
    assert usage_tokens(usage) == tokens
    prices = TokenPrices(3, 15, 0.3)
    assert prices(usage) == pytest.approx(prices.dollars(*tokens))


def test_the_policy_argument_is_checked() -> None:
    assert RepeatGuardHooks().policy == Policy()
    assert RepeatGuardHooks(max_calls=3).policy == Policy(max_calls=3)
    with pytest.raises(TypeError, match="max_calls"):
        RepeatGuardHooks(max_call=3)
    with pytest.raises(TypeError, match="StopRepeatedCalls"):
        RepeatGuardHooks(StopRepeatedCalls())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        RepeatGuardHooks(Policy(), max_calls=3)


def test_hooks_merge_with_your_own() -> None:
    async def mine(event: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        return {}

    hooks = RepeatGuardHooks().hooks({"PreToolUse": [HookMatcher(hooks=[mine])], "Stop": [HookMatcher(hooks=[mine])]})
    assert set(hooks) == {
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
        "Stop",
    }
    assert len(hooks["PreToolUse"]) == 2 and hooks["PreToolUse"][1].hooks == [mine]


async def test_a_tool_name_that_claude_code_does_not_offer_fails_the_query(tmp_path: Path) -> None:
    parcels = carrier()
    guard = RepeatGuardHooks(limits={"mcp__parcels__track_parcels": 1})
    with FakeMessagesAPI(keep_calling()) as api:
        options = offline_options(api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed())
        with pytest.raises(GuardSetupError, match="did you mean 'mcp__parcels__track_parcel'"):
            async for _ in guard.query(prompt="Where is FR-7731?", options=options):
                pass
    assert parcels.count("track_parcel") == 0


async def test_hooks_without_the_guards_transport_refuse_and_say_why(tmp_path: Path) -> None:
    parcels = carrier()
    guard = RepeatGuardHooks()
    with FakeMessagesAPI(keep_calling()) as api:
        options = offline_options(api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed())
        messages = [message async for message in query(prompt="Where is FR-7731?", options=guard.options(options))]
    assert parcels.count("track_parcel") == 0
    assert len(api.model_requests()) == 1
    result = messages[-1]
    assert getattr(result, "terminal_reason", None) == "hook_stopped"
    assert any(NO_TRANSPORT in str(message) for message in messages)


async def test_max_cost_usd_counts_each_response_with_its_final_output_tokens(tmp_path: Path) -> None:
    """50 input and 10 output tokens a response at $3/$15 per million: $0.0003 a response, so with a
    $0.0005 budget the turn ends once the 2nd response's call has resolved, before a 3rd model call. (Counting
    the output tokens a response's first line reports, 1, would let two more responses run.)"""
    parcels = carrier()
    model = scripted({"Watch FR-7731": [call("track_parcel", {"tracking_number": f"FR-{n}"}) for n in range(9)]})
    guard = RepeatGuardHooks(max_cost_usd=0.0005, cost=TokenPrices(3, 15))
    with FakeMessagesAPI(model, input_tokens=50, output_tokens=10) as api:
        (turn,) = await converse(
            guard, api, tmp_path, ["Watch FR-7731"], mcp_servers={"parcels": parcels.server}, allowed_tools=allowed()
        )
    assert parcels.count("track_parcel") == 2 and len(api.model_requests()) == 2
    stop = await stop_of(turn.result, guard=guard)
    assert stop is not None and stop.reason is StopReason.COST and turn.result.result == stop.message
    assert not any(isinstance(message, StreamEvent) for message in turn.messages)  # not asked for: hidden


T = TypeVar("T")


class DownStore:
    """A store whose server is gone: every update raises ``error`` (``StoreUnavailable``, or any other error)."""

    def __init__(self, error: type[Exception] = StoreUnavailable) -> None:
        self.error = error

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        raise self.error("redis at 127.0.0.1:1 refused the connection")

    async def load(self, key: str) -> GuardState | None:
        raise self.error("redis at 127.0.0.1:1 refused the connection")


@pytest.mark.parametrize(
    ("fail", "error"), [("open", StoreUnavailable), ("closed", StoreUnavailable), ("closed", ConnectionResetError)]
)
async def test_when_the_store_fails_calls_run_or_are_refused_as_chosen(
    tmp_path: Path, fail: Fail, error: type[Exception]
) -> None:
    """Any error of the store is an outage (not only ``StoreUnavailable``): ``fail`` decides, the same in every
    adapter. Closed: the tool does not run, and the model reads the store-down refusal; open: it runs."""
    parcels = carrier()
    model = scripted({"Where is FR-7731?": [call("track_parcel")]})
    guard = RepeatGuardHooks(store=DownStore(error), fail=fail)
    with FakeMessagesAPI(model) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Where is FR-7731?"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
        )
    assert turn.result.result == "done"
    if fail == "closed":
        assert parcels.count("track_parcel") == 0 and turn.seen == [STORE_DOWN_REFUSAL]
    else:
        assert parcels.count("track_parcel") == 1 and turn.seen == [TRACKED]
