"""Reading a turn's stop (``run``, builtins), the tools' results reaching the core, a store that is down."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from mistralai.agents import agents
from repeat_hooks_mistral import RepeatGuardHook, events_of, stop_of
from repeat_hooks_mistral.settings import hook_points
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages

from repeat_hooks import GuardState, MemoryStore, Policy, StopReason, ToolCall
from repeat_hooks.messages import STORE_DOWN_STOP
from repeat_hooks.stores.redis import RedisStore, StoreUnavailable

T = TypeVar("T")
FR = {"tracking_number": "FR-7731"}


class ParcelGuard(RepeatGuardHook):
    policy = Policy(match="tool", max_calls=2, max_refusals=3)


# -- 16. Agent.run() loses the stop: the guard's run() returns it ------------------------------------------


async def test_run_returns_the_stop_that_agent_run_loses(carrier: Any, agent_for: Any) -> None:
    model = ScriptedModel.keep_calling("track_parcel", FR)
    agent = agent_for(model, ParcelGuard())

    lost = await agent.run("Keep checking FR-7731.")  # the SDK's own: empty text, no session id to ask
    result, stop = await ParcelGuard.run(agent, "Keep checking FR-7731.")

    assert (lost.stop_reason, lost.text) == ("completed", "")
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert stop.message.startswith("I stopped: I kept calling track_parcel")
    assert (result.stop_reason, result.text) == ("completed", stop.message), "the caller reads the stop message"
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
        events = await events_of(session, guard=ParcelGuard)

    offered = [tool.function.name for tool in model.requests[0].tools or []]
    assert "track_parcel" not in offered and "run_typescript" in offered
    assert all("InvalidToolCall" in message for message in tool_messages(model.requests[-1]))
    assert carrier.calls == [] and events == []


# -- issue 9: the tools' results reach the core (what they carry: test_model_view.py) --------------------------


def test_post_tool_call_is_bound_whenever_results_count() -> None:
    assert hook_points(Policy(count="progress"))["post_tool_call"]
    assert not hook_points(Policy(count="per_turn"))["post_tool_call"]
    assert ParcelGuard.post_tool_call is not agents.Hook.post_tool_call, "Policy() counts by progress"


# -- 17. the store is down: the wait is the documented timeout, a fail-closed stop is readable ------------


async def test_a_hung_redis_costs_one_timeout_and_the_fail_closed_stop_is_readable(
    hung_redis: Any, carrier: Any, agent_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class HungGuard(RepeatGuardHook):
        policy = Policy(match="tool", max_calls=2, max_refusals=3)
        store = RedisStore.from_url(hung_redis.url, timeout=0.2)
        fail = "closed"

    model = ScriptedModel.keep_calling("track_parcel", FR)
    try:
        with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
            async with await agent_for(model, HungGuard()).create_session() as session:
                result = await run_turn(session, "Keep checking FR-7731.")
                stop = await stop_of(session, guard=HungGuard)
                turns = session.state.turns
                assert turns is not None
                this_turn = await stop_of(session, guard=HungGuard, turn_id=turns.items[-1].id)
                connections = len(hung_redis.connections)
                with pytest.raises(StoreUnavailable):
                    await events_of(session, guard=HungGuard)  # only the stop is kept in memory
            with pytest.raises(StoreUnavailable):
                await stop_of("a-session-this-process-did-not-end", guard=HungGuard)
    finally:
        await HungGuard.store.aclose()  # type: ignore[attr-defined]

    assert model.requests == [] and carrier.calls == [], "the first model call was skipped: the turn ended"
    assert (result.stop_reason, result.text) == ("completed", "")
    assert stop is not None and (stop.reason, stop.message) == (StopReason.STORE_UNAVAILABLE, STORE_DOWN_STOP)
    assert this_turn == stop
    # One hook call, one request, no retry after its timeout (a retry would open a 2nd connection);
    # stop_of read the stop without asking the store.
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


class SwitchGuard(RepeatGuardHook):
    policy = Policy(match="tool", max_calls=2, max_refusals=3)
    store = SwitchStore()
    fail = "closed"


async def test_once_the_store_is_back_the_stored_state_says_what_happened(carrier: Any, agent_for: Any) -> None:
    store = SwitchGuard.store
    assert isinstance(store, SwitchStore)
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "FR-7731 is in transit.")
    async with await agent_for(model, SwitchGuard()).create_session() as session:
        store.down = True
        try:
            await run_turn(session, "Where is FR-7731?")
            down = await stop_of(session, guard=SwitchGuard)
            turns = session.state.turns
            assert turns is not None
            first_turn = turns.items[-1].id
        finally:
            store.down = False
        second = await run_turn(session, "And now?")
        after = await stop_of(session, guard=SwitchGuard)

    assert down is not None and down.reason is StopReason.STORE_UNAVAILABLE
    assert second.text == "FR-7731 is in transit."
    assert after is None, "turn 2 ran on a working store: no stop"
    assert await stop_of(session, guard=SwitchGuard, turn_id=first_turn) is None, "the store never kept that stop"


class KeyedGuard(RepeatGuardHook):
    policy = Policy(match="tool", max_calls=2, digest_key="a secret of sixteen+ chars")
    store = MemoryStore()


async def test_a_worker_with_another_digest_key_fails_loudly_not_as_an_outage(carrier: Any, agent_for: Any) -> None:
    """A session whose stored state was written without a key (another worker, an older deployment), served by
    a guard with one: the turn fails with ``GuardSetupError``'s message naming ``digest_key`` (rc11 wraps a
    hook's exception in ``TurnFailedError``): a setup mistake, not a store outage to fail open on. The call
    does not run."""
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "FR-7731 is in transit.")
    store = KeyedGuard.store
    assert isinstance(store, MemoryStore)
    async with await agent_for(model, KeyedGuard()).create_session() as session:
        unkeyed = Policy(match="tool", max_calls=2)
        store.update_now(
            KeyedGuard.state_key(session.session_id),
            lambda state: unkeyed.decide_tool_call(state, ToolCall("track_parcel", FR), turn_id="earlier"),
        )
        with pytest.raises(agents.TurnFailedError, match=r"written under no digest_key.*Policy\(digest_key=\.\.\.\)"):
            await run_turn(session, "Where is FR-7731?")
    assert len(carrier.calls) == 0
