"""``RepeatGuard(store=...)``: a conversation's counts live in a shared ``StateStore`` (``MemoryStore``, the
``SQLiteStore``) under the run's ``conversation_id``, the turn named by the run's ``run_id``; two guards on one store
share them; a store that is down fails open or closed as ``fail=`` says; a resumed run reads the store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pai_parcels import SEED_004, Carrier, guarded, status
from pydantic_ai import Agent, CallToolsNode
from repeat_hooks_pydantic_ai import GuardSetupError, RepeatGuard, RepeatGuardStopped, refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling, steps, tool_returns_of
from test_limits import FakeRunClock

from repeat_hooks import GuardState, MemoryStore, Policy, RefusalKind, StateStore, StopReason, StoreUnavailable
from repeat_hooks.kit import request
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stores.sqlite import SQLiteStore

T = TypeVar("T")
TRACK = [("track_parcel", {"parcel_id": "FR-7731"})]
STUCK = keep_calling("track_parcel", {"parcel_id": "FR-7731"})
ONCE = Policy(match="tool", max_calls=2, max_refusals=None)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "states.db")


async def test_the_counts_live_in_the_store_under_the_conversation_id(store: StateStore, carrier: Carrier) -> None:
    agent, model = guarded(STUCK, carrier, guard=RepeatGuard(SEED_004, store=store))
    result = await agent.run("Keep checking FR-7731", conversation_id="conv-1", run_id="req-1")
    stop = stop_of(result)  # synchronous: the whole Stop is in the result's messages
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and result.output == stop.message
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5
    saved = await store.load("conv-1")
    assert saved is not None and saved.turn.id == "req-1" and saved.turn.refusals == 3
    assert saved.stop_of("req-1") == stop


async def test_two_guards_on_one_store_share_a_conversations_counts(store: StateStore) -> None:
    """Two processes serving one conversation (two agents, two guards, one store): a retried request (the same
    conversation and run ids) goes on counting where the first left off."""
    first, second = Carrier(), Carrier()
    agent, _ = guarded(steps(TRACK, "In transit."), first, ONCE, guard=RepeatGuard(ONCE, store=store))
    await agent.run("Where is FR-7731?", conversation_id="conv-1", run_id="req-1")
    again, model = guarded(steps(TRACK, TRACK, "In transit."), second, guard=RepeatGuard(ONCE, store=store))
    result = await again.run("Where is FR-7731?", conversation_id="conv-1", run_id="req-1")
    assert first.calls == second.calls == ["FR-7731"]  # 2 of 2 in the turn; the 3rd is refused
    assert model.tool_returns(1) == [status("FR-7731")]
    assert [refusal.reason for _, refusal in refusals_of(result)] == [RefusalKind.REPEAT]
    # A new request id is a new turn, with fresh counts; another conversation has counts of its own.
    fresh, _ = guarded(steps(TRACK, "In transit."), second, ONCE, guard=RepeatGuard(ONCE, store=store))
    await fresh.run("Where is FR-7731 now?", conversation_id="conv-1", run_id="req-2")
    await fresh.run("Where is FR-7731 now?", conversation_id="conv-2", run_id="req-1")
    assert second.calls == ["FR-7731"] * 3


async def test_a_caller_names_the_conversation_and_turn_with_the_kits_request(store: StateStore) -> None:
    carrier = Carrier()
    for _ in range(2):  # the same request, retried: one turn
        agent, _ = guarded(steps(TRACK, TRACK, "In transit."), carrier, ONCE, guard=RepeatGuard(ONCE, store=store))
        with request(conversation_id="conv-9", turn_id="req-9"):
            await agent.run("Where is FR-7731?")
    assert carrier.calls == ["FR-7731"] * 2
    saved = await store.load("conv-9")
    assert saved is not None and saved.turn.id == "req-9" and saved.turn.refusals == 2


async def test_a_store_without_a_named_conversation_is_refused_before_any_model_call(carrier: Carrier) -> None:
    """pydantic-ai gives a run that names no conversation a fresh id, so with ``store=`` nothing would be shared (a
    retried request would count from zero): the run is refused, naming both spellings. A run given a named
    conversation's ``message_history`` inherits its id, and goes on in its state."""
    store = MemoryStore()
    agent, model = guarded(steps(TRACK, "In transit.", "Still in Lyon."), carrier, guard=RepeatGuard(ONCE, store=store))
    named = r"this run names none: pass agent\.run\(\.\.\., conversation_id=\.\.\.\).*kit\.request\(conversation_id="
    with pytest.raises(GuardSetupError, match=named):
        await agent.run("Where is FR-7731?")
    assert model.calls == 0 and carrier.calls == []
    first = await agent.run("Where is FR-7731?", conversation_id="conv-3")
    await agent.run("And now?", message_history=first.all_messages())
    saved = await store.load("conv-3")
    assert saved is not None and saved.turn.number == 2 and model.calls == 3


async def test_a_resumed_run_reads_the_store_not_the_history(store: StateStore, carrier: Carrier) -> None:
    """A run broken off mid-turn and resumed with only the last of its messages (a caller trimming its history):
    the store still holds the turn's counts, so the repeat is refused; without a store, the counts are rebuilt
    from the messages given, and the trimmed history lets it run again."""

    async def resumed(guard: RepeatGuard) -> list[str]:
        calls = Carrier()
        agent, _ = guarded(steps(TRACK, TRACK, TRACK, "In transit."), calls, ONCE, guard=guard)
        async with agent.iter("Keep checking FR-7731", conversation_id="conv-1") as run:
            async for node in run:
                if isinstance(node, CallToolsNode) and len(calls.calls) == 1:
                    messages = run.all_messages()
                    break
        await agent.run(message_history=messages[-1:])
        return calls.calls

    assert await resumed(RepeatGuard(ONCE, store=store)) == ["FR-7731"] * 2
    assert await resumed(RepeatGuard(ONCE)) == ["FR-7731"] * 3


class DownStore:
    """A store that works for its first ``works`` updates, then raises ``StoreUnavailable`` (a server gone)."""

    def __init__(self, works: int) -> None:
        self.inner, self.works = MemoryStore(), works

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        self.works -= 1
        if self.works < 0:
            raise StoreUnavailable("the store's server is unreachable")
        return await self.inner.update(key, change)

    async def load(self, key: str) -> GuardState | None:
        return await self.inner.load(key)


async def test_fail_closed_refuses_the_call_and_ends_the_turn_when_the_store_is_down(carrier: Carrier) -> None:
    """Down from the update that decides the first response's calls: the tool does not run, the model reads the
    store-down refusal, and the next model call is ended with the store-down stop."""
    guard = RepeatGuard(SEED_004, store=DownStore(works=2), fail="closed")
    agent, model = guarded(STUCK, carrier, guard=guard)
    result = await agent.run("Keep checking FR-7731", conversation_id="conv-1")
    assert carrier.calls == [] and tool_returns_of(result.all_messages()) == [STORE_DOWN_REFUSAL]
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE and result.output == STORE_DOWN_STOP
    assert model.calls == 1


async def test_fail_open_lets_the_calls_run_when_the_store_is_down(carrier: Carrier) -> None:
    guard = RepeatGuard(SEED_004, store=DownStore(works=2))  # fail="open", the default
    agent, model = guarded(steps(TRACK, TRACK, TRACK, "In transit."), carrier, guard=guard)
    result = await agent.run("Where is FR-7731?", conversation_id="conv-1")
    assert carrier.calls == ["FR-7731"] * 3  # max_calls=2 cannot be counted: every call runs
    assert result.output == "In transit." and stop_of(result) is None and model.calls == 4


async def test_on_stop_raise_raises_out_of_the_run_with_a_store(carrier: Carrier) -> None:
    store = MemoryStore()
    agent, _ = guarded(STUCK, carrier, guard=RepeatGuard(SEED_004, store=store, on_stop="raise"))
    with pytest.raises(RepeatGuardStopped, match="ignored_refusals") as raised:
        await agent.run("Keep checking FR-7731", conversation_id="conv-1")
    assert stop_of(raised.value) == (await store.load("conv-1") or GuardState()).stop_of()


async def test_a_store_under_durable_execution_fails_loudly(carrier: Carrier) -> None:
    """Durable execution runs the hooks in workflow code, which must do no I/O: the run says so at its start."""
    model = ScriptedModel(STUCK)
    guard = RepeatGuard(SEED_004, store=MemoryStore())
    agent = Agent(model, tools=[carrier.tool], capabilities=[FakeRunClock(), guard])
    with pytest.raises(GuardSetupError, match=r"store=\.\.\.\) cannot run under durable execution.*store=None"):
        await agent.run("Keep checking FR-7731")
    assert model.calls == 0


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"store": "sqlite:///states.db"}, TypeError, r"store=\.\.\.\) takes a repeat_hooks StateStore"),
        ({"fail": "close"}, TypeError, r"fail=\.\.\.\) is 'open' or 'closed', not 'close'"),
        ({"on_stop": "output_text"}, TypeError, r"on_stop=\.\.\.\) is 'reply' or 'raise'"),
        ({"is_failure": "error"}, TypeError, r"is_failure=\.\.\.\) takes a function of what the model reads"),
        ({"max_call": 2}, TypeError, r"unknown setting 'max_call' \(did you mean max_calls\?\)"),
        ({"stor": MemoryStore()}, TypeError, r"unexpected keyword 'stor': did you mean store=\.\.\.\?"),
        ({"on_stopp": "raise"}, TypeError, r"unexpected keyword 'on_stopp': did you mean on_stop=\.\.\.\?"),
    ],
)
def test_a_misspelt_keyword_says_the_right_spelling(keywords: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        RepeatGuard(**keywords)
