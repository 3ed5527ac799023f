"""Reading a turn's stop (``run``, builtins), the tools' results reaching the core, a store that is down."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from mistralai.agents import agents
from repeat_hooks_mistral import STORE_DOWN_STOP, StopRepeatedCalls, StoreDownStop
from repeat_hooks_mistral.settings import hook_points
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages

from repeat_hooks import GuardState, MemoryStore, Policy, StopReason, ToolCall
from repeat_hooks.redis import RedisStore, StoreUnavailable

T = TypeVar("T")
FR = {"tracking_number": "FR-7731"}


class ParcelGuard(StopRepeatedCalls):
    policy = Policy(match="tool", max_calls=2, max_refusals=3)


# -- 16. Agent.run() loses the stop: the guard's run() returns it ------------------------------------------


async def test_run_returns_the_stop_that_agent_run_loses(carrier: Any, agent_for: Any) -> None:
    model = ScriptedModel.keep_calling("track_parcel", FR)
    agent = agent_for(model, ParcelGuard())

    lost = await agent.run("Keep checking FR-7731.")  # the SDK's own: empty text, no session id to ask
    result, stop = await ParcelGuard.run(agent, "Keep checking FR-7731.")

    assert (lost.stop_reason, lost.text) == ("completed", "")
    assert (result.stop_reason, result.text) == ("completed", "")
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert stop.message.startswith("I stopped: I kept calling track_parcel")
    assert len(carrier.calls) == 4, "each run is a new session: two calls each"


async def test_run_returns_no_stop_when_the_model_answers(carrier: Any, agent_for: Any) -> None:
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "FR-7731 is in transit.")
    result, stop = await ParcelGuard.run(agent_for(model, ParcelGuard()), "Where is FR-7731?")
    assert (result.text, stop) == ("FR-7731 is in transit.", None)


async def test_with_the_default_builtins_a_direct_tool_call_never_reaches_the_guard(
    carrier: Any, agent_for: Any
) -> None:
    """What the README says about default builtins: user tools sit behind run_typescript, so a model
    that calls one directly gets the SDK's InvalidToolCall, and the guard never sees the call."""
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "Done.")
    agent = agent_for(model, ParcelGuard(), builtins=agents.Builtins())
    async with await agent.create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")
        events = await ParcelGuard.events(session.session_id)

    offered = [tool.function.name for tool in model.requests[0].tools or []]
    assert "track_parcel" not in offered and "run_typescript" in offered
    assert all("InvalidToolCall" in message for message in tool_messages(model.requests[-1]))
    assert carrier.calls == [] and events == []


# -- issue 9: every tool's result reaches the core ---------------------------------------------------------

RESULTS: list[tuple[str, bool, Any]] = []


class SpyPolicy(Policy):
    """The core's policy, noting what ``record_tool_result`` receives (the rule itself is unchanged)."""

    def record_tool_result(
        self,
        state: GuardState,
        call: ToolCall,
        ok: bool,
        turn_id: str | None = None,
        delivery_id: str | None = None,
        *,
        result: Any = None,
    ) -> None:
        RESULTS.append((call.name, ok, result))
        super().record_tool_result(state, call, ok, turn_id, delivery_id, result=result)


class ResultGuard(StopRepeatedCalls):
    policy = SpyPolicy(match="tool", max_calls=5, count="progress")


async def test_each_tool_result_and_failure_reaches_the_core(carrier: Any, agent_for: Any) -> None:
    RESULTS.clear()
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), ToolUse("track_parcel", FR), "The carrier is down.")

    def fail_the_second_call(request: Any) -> Any:
        carrier.fail = len(carrier.calls) >= 1
        return model_script(request)

    model_script, model.script = model.script, fail_the_second_call
    async with await agent_for(model, ResultGuard()).create_session() as session:
        await run_turn(session, "Check FR-7731 twice.")

    scan = {"tracking_number": "FR-7731", "status": "in transit", "last_scan": "Lyon hub, 06:12"}
    assert RESULTS[0] == ("track_parcel", True, scan)
    assert RESULTS[1][:2] == ("track_parcel", False)
    assert "carrier unreachable" in RESULTS[1][2]
    assert len(RESULTS) == 2


def test_post_tool_call_is_bound_whenever_results_count() -> None:
    assert hook_points(Policy(count="progress"))["post_tool_call"]
    assert not hook_points(Policy(count="per_turn"))["post_tool_call"]
    assert ResultGuard.post_tool_call is not agents.Hook.post_tool_call


SCANS = itertools.count(1)


@agents.tool
def track_moving_parcel(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan: a new one at every call (the parcel moves)."""
    return {"tracking_number": tracking_number, "last_scan": f"scan {next(SCANS)}"}


class ProgressGuard(StopRepeatedCalls):
    policy = Policy(match="tool", max_calls=2, max_refusals=3, count="progress")


async def test_a_call_whose_result_keeps_changing_is_not_refused() -> None:
    model = ScriptedModel.replies(*[ToolUse("track_moving_parcel", FR)] * 4, "It moved four times.")
    agent = agents.Agent(
        model=model.name,
        completion=model.completion(),
        name="parcel-tracker",
        instructions="You track parcels.",
        builtins=agents.Builtins.none(),
        max_iterations=10,
        harness=agents.Harness(tools=[track_moving_parcel], hooks=[ProgressGuard()]),
    )
    result, stop = await ProgressGuard.run(agent, "Follow FR-7731.")
    assert [m.startswith("Refused") for m in tool_messages(model.requests[-1])] == [False] * 4
    assert (result.text, stop) == ("It moved four times.", None)


# -- 17. the store is down: the wait is the documented timeout, a fail-closed stop is readable ------------


async def test_a_hung_redis_costs_one_timeout_and_the_fail_closed_stop_is_readable(
    hung_redis: Any, carrier: Any, agent_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class HungGuard(StopRepeatedCalls):
        policy = Policy(match="tool", max_calls=2, max_refusals=3)
        store = RedisStore.from_url(hung_redis.url, timeout=0.2)
        fail_closed = True

    model = ScriptedModel.keep_calling("track_parcel", FR)
    try:
        with caplog.at_level(logging.ERROR, logger="repeat_hooks_mistral"):
            async with await agent_for(model, HungGuard()).create_session() as session:
                result = await run_turn(session, "Keep checking FR-7731.")
                stop = await HungGuard.last_stop(session.session_id)
                this_turn = await HungGuard.last_stop(session.session_id, stop.turn_id if stop else None)
                connections = len(hung_redis.connections)
                with pytest.raises(StoreUnavailable):
                    await HungGuard.events(session.session_id)  # only the stop is kept in memory
            with pytest.raises(StoreUnavailable):
                await HungGuard.last_stop("a-session-this-process-did-not-end")
    finally:
        await HungGuard.store.aclose()  # type: ignore[attr-defined]

    assert model.requests == [] and carrier.calls == [], "the first model call was skipped: the turn ended"
    assert (result.stop_reason, result.text) == ("completed", "")
    assert isinstance(stop, StoreDownStop)
    assert (stop.reason, stop.message) == ("store_unavailable", STORE_DOWN_STOP)
    assert this_turn == stop
    # One hook call, one request, no retry after its timeout (a retry would open a 2nd connection);
    # last_stop read the stop without asking the store.
    assert connections == 1
    assert "Timeout" in caplog.text


class SwitchStore(MemoryStore):
    """An in-process store that can be switched off, as a shared store goes down and comes back."""

    down = False

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        if self.down:
            raise StoreUnavailable("store unreachable")
        return await super().update(key, change)

    async def load(self, key: str) -> GuardState | None:
        if self.down:
            raise StoreUnavailable("store unreachable")
        return await super().load(key)


class SwitchGuard(StopRepeatedCalls):
    policy = Policy(match="tool", max_calls=2, max_refusals=3)
    store = SwitchStore()
    fail_closed = True


async def test_once_the_store_is_back_the_stored_state_says_what_happened(carrier: Any, agent_for: Any) -> None:
    store = SwitchGuard.store
    assert isinstance(store, SwitchStore)
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "FR-7731 is in transit.")
    async with await agent_for(model, SwitchGuard()).create_session() as session:
        store.down = True
        try:
            await run_turn(session, "Where is FR-7731?")
            down = await SwitchGuard.last_stop(session.session_id)
        finally:
            store.down = False
        second = await run_turn(session, "And now?")
        after = await SwitchGuard.last_stop(session.session_id)

    assert isinstance(down, StoreDownStop)
    assert second.text == "FR-7731 is in transit."
    assert after is None, "turn 2 ran on a working store: no stop"
    assert down.turn_id is not None and await SwitchGuard.last_stop(session.session_id, down.turn_id) is None

