"""The adapter kit's ``GuardCore``: the common keywords checked once, the one path to a conversation's state (a
store key or the SDK's slot) with the outage policy, the observers told after the commit, and a caller's request."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from repeat_hooks import (
    GuardSetupError,
    GuardState,
    MemoryStore,
    Policy,
    RefusalKind,
    StopReason,
    StoreUnavailable,
    ToolCall,
)
from repeat_hooks.kit import GuardCore, Request, current_request, hints, request, tool_call
from repeat_hooks.kit.states import ParsedStates
from repeat_hooks.observe import Observation, Outage, ToolCallDecided, add_observer, current_scope, scope
from repeat_hooks.stop_rules import Feed

CALL = ToolCall("track", {"id": "FR-1"})


@pytest.fixture
def heard() -> Iterator[list[Observation]]:
    seen: list[Observation] = []
    remove = add_observer(seen.append)
    yield seen
    remove()


class BrokenStore:
    """A store that is down."""

    async def update(self, key: str, change: Any) -> Any:
        raise StoreUnavailable("redis://10.0.0.1: connection refused")

    async def load(self, key: str) -> GuardState | None:
        raise StoreUnavailable("redis://10.0.0.1: connection refused")


class Slot:
    """A state kept by the SDK, as an adapter would hand it over."""

    def __init__(self, raw: Any = None) -> None:
        self.raw = raw
        self.writes = 0

    def read(self) -> GuardState:
        from repeat_hooks.kit import load

        return load(self.raw, where="agent.state['repeat_hooks']")

    def write(self, state: GuardState) -> None:
        self.raw = state.model_dump_json()
        self.writes += 1

    def __repr__(self) -> str:
        return "agent.state['repeat_hooks']"


def test_the_common_keywords_are_checked_once_with_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"Guard\(on_stop=\.\.\.\) is 'reply' or 'raise', not 'output'"):
        GuardCore(owner="Guard", on_stop="output")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Guard\(fail=\.\.\.\) is 'open' or 'closed', not True"):
        GuardCore(owner="Guard", fail=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Guard\(check_tools=\.\.\.\) is True or False, not 'no'"):
        GuardCore(owner="Guard", check_tools="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"is_failure=\.\.\.\) takes a function"):
        GuardCore(owner="Guard", is_failure="error")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"store=\.\.\.\) takes a repeat_hooks StateStore .* not dict"):
        GuardCore(owner="Guard", store={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unknown setting 'max_cals' .did you mean max_calls"):
        GuardCore(None, {"max_cals": 2}, owner="Guard")
    with pytest.raises(GuardSetupError, match=r"cost=TokenPrices"):
        GuardCore(Policy(max_cost_usd=1.0), owner="Guard")
    with pytest.raises(TypeError, match=r"Guard got an unexpected keyword 'stor': did you mean store=\.\.\.\?"):
        GuardCore(None, {"stor": MemoryStore()}, owner="Guard")
    with pytest.raises(TypeError, match=r"Guard got an unexpected keyword 'state_kye': did you mean state_key="):
        GuardCore(None, {"state_kye": "x"}, owner="Guard", keywords=("state_key",))
    with pytest.raises(TypeError, match=r"takes a store, not the class: Guard\(store=MemoryStore\(\.\.\.\)\)"):
        GuardCore(owner="Guard", store=MemoryStore)  # type: ignore[arg-type]


def test_a_clock_the_sdk_cannot_feed_is_refused_and_its_budget_too() -> None:
    why = {Feed.SECONDS: "the CLI reports no model time"}
    GuardCore(owner="Cli", clock=None, why=why)  # such an adapter's clock= defaults to None
    with pytest.raises(GuardSetupError, match=r"Cli cannot time model calls \(the CLI reports no model time\)"):
        GuardCore(owner="Cli", clock=time.monotonic, why=why)  # given anyway, even the usual clock: refused
    with pytest.raises(GuardSetupError, match=r"max_model_seconds=.*the CLI reports no model time"):
        GuardCore(Policy(max_model_seconds=5), owner="Cli", clock=None, why=why)
    how = {Feed.COST: "class Guard(RepeatGuardHook): cost = TokenPrices(...)"}
    with pytest.raises(GuardSetupError, match=r"set it up with class Guard\(RepeatGuardHook\): cost = TokenPrices"):
        GuardCore(Policy(max_cost_usd=1.0), owner="Guard", how=how)


def test_is_failure_reads_what_the_model_reads_and_a_broken_one_leaves_the_sdks_word(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = GuardCore(owner="Guard", is_failure=lambda view: "ERROR" in str(view))
    assert core.ok(True, "fine") and not core.ok(True, "ERROR: no such parcel") and not core.ok(False, "fine")

    def for_dicts(view: Any) -> bool:
        return bool(view.get("status") == "error")  # written for a dict; this SDK hands the model text

    broken = GuardCore(owner="Guard", is_failure=for_dicts)
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        assert broken.ok(True, '{"status": "ok"}') is True  # a success stays one: no false "errors in a row"
        assert broken.ok(True, '{"status": "ok"}') is True
        assert broken.ok(False, '{"status": "ok"}') is False
    assert "is_failure raised AttributeError" in caplog.text and "on a str result" in caplog.text
    assert caplog.text.count("Traceback") == 1  # the trace once, a line a call after


async def test_a_store_key_is_decided_and_committed_then_observed(heard: list[Observation]) -> None:
    store = MemoryStore()
    core = GuardCore(owner="Guard", store=store)
    for _ in range(3):
        refusal = await core.update("c1", lambda state: core.policy.decide_tool_call(state, CALL), outage=core.refused)
    assert refusal is not None and refusal.reason is RefusalKind.REPEAT
    assert [type(seen).__name__ for seen in heard] == ["ToolCallDecided"] * 3
    assert core.update_now("c1", lambda state: core.policy.decide_tool_call(state, CALL), outage=None) is not None


class DictStore:
    """A user's store written to the bare ``StateStore`` protocol: it commits, and tells no observer."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.committed: list[str] = []  # what was in the row when an observer heard

    async def update(self, key: str, change: Any) -> Any:
        state = GuardState.model_validate_json(self.rows[key]) if key in self.rows else GuardState()
        result = change(state)
        self.rows[key] = state.model_dump_json()
        return result

    async def load(self, key: str) -> GuardState | None:
        return GuardState.model_validate_json(self.rows[key]) if key in self.rows else None


async def test_a_store_that_tells_nobody_is_heard_through_the_core_after_it_committed() -> None:
    store = DictStore()
    core = GuardCore(Policy(max_calls=1), owner="Guard", store=store)  # type: ignore[arg-type]
    heard: list[tuple[str, bool]] = []
    remove = add_observer(lambda seen: heard.append((type(seen).__name__, "c1" in store.rows)))
    try:
        await core.update("c1", lambda state: core.policy.decide_tool_call(state, CALL), outage=None)
        refusal = core.update_now("c1", lambda state: core.policy.decide_tool_call(state, CALL), outage=None)
    finally:
        remove()
    assert refusal is not None and refusal.reason is RefusalKind.REPEAT
    assert heard == [("ToolCallDecided", True)] * 2  # once each, and only once the row was written


async def test_an_outage_fails_open_or_closed_and_is_logged_and_observed(
    heard: list[Observation], caplog: pytest.LogCaptureFixture
) -> None:
    opened = GuardCore(owner="Guard", store=BrokenStore())  # type: ignore[arg-type]
    closed = GuardCore(owner="Guard", store=BrokenStore(), fail="closed")  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"), scope(conversation_id="conv-7"):
        allowed = await opened.update("k", lambda s: opened.policy.decide_tool_call(s, CALL), outage=opened.refused)
        refusal = await closed.update("k", lambda s: closed.policy.decide_tool_call(s, CALL), outage=closed.refused)
        stop = await closed.update("k", closed.policy.decide_model_call, outage=closed.ended)
    assert allowed is None
    assert refusal is not None and refusal.reason is RefusalKind.STORE_UNAVAILABLE
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE
    assert await closed.stop_of("k") == stop  # kept in this process: the store could not keep it
    with pytest.raises(StoreUnavailable):
        await opened.stop_of("k")  # nothing kept, and the store is down: the guard cannot know
    assert [seen for seen in heard if isinstance(seen, Outage)] == [
        Outage("k", "StoreUnavailable: redis://10.0.0.1: connection refused", "open"),
        Outage("k", "StoreUnavailable: redis://10.0.0.1: connection refused", "closed"),
        Outage("k", "StoreUnavailable: redis://10.0.0.1: connection refused", "closed"),
    ]
    assert "could not reach the state of k (conversation conv-7)" in caplog.text and "failing closed" in caplog.text


async def test_a_mistake_is_no_outage_and_a_change_that_raises_reaches_the_caller() -> None:
    keyed = Policy(digest_key=b"k" * 32)
    store = MemoryStore()
    core = GuardCore(owner="Guard", store=store)
    await core.update("c", lambda state: core.policy.decide_tool_call(state, CALL), outage=None)
    other = GuardCore(keyed, owner="Guard", store=store)
    with pytest.raises(GuardSetupError, match="digest_key"):
        await other.update("c", lambda state: other.policy.decide_tool_call(state, CALL), outage=None)

    def broken(state: GuardState) -> None:
        raise KeyError("adapter bug")

    with pytest.raises(KeyError, match="adapter bug"):
        await core.update("c", broken, outage=None)
    with pytest.raises(KeyError, match="adapter bug"):
        core.update_now("c", broken, outage=None)


def test_a_slot_is_read_changed_written_then_observed(heard: list[Observation]) -> None:
    core = GuardCore(owner="Guard")
    slot = Slot()
    for _ in range(3):
        refusal = core.update_now(slot, lambda state: core.policy.decide_tool_call(state, CALL), outage=None)
    assert refusal is not None and slot.writes == 3 and len(heard) == 3


def test_a_slot_holding_no_guard_state_is_an_outage_that_names_where(caplog: pytest.LogCaptureFixture) -> None:
    core = GuardCore(owner="Guard", fail="closed")
    slot = Slot({"hello": "world"})
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        refusal = core.update_now(slot, lambda state: core.policy.decide_tool_call(state, CALL), outage=core.refused)
    assert refusal is not None and refusal.reason is RefusalKind.STORE_UNAVAILABLE and slot.writes == 0
    assert "agent.state['repeat_hooks']: the stored guard state is not a repeat-hooks GuardState" in caplog.text


class AsyncOnlyStore(MemoryStore):
    """A store without a synchronous update (as RedisStore): a sync hook waits on the guard's own loop."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    async def update(self, key: str, change: Any) -> Any:
        self.threads.add(threading.current_thread().name)
        await asyncio.sleep(0)
        return super().update_now(key, change)

    update_now = None  # type: ignore[assignment]


def test_a_sync_hook_uses_an_async_store_on_the_guards_own_loop_in_the_callers_scope(
    heard: list[Observation],
) -> None:
    store = AsyncOnlyStore()
    core = GuardCore(owner="Guard", store=store)
    with scope(conversation_id="conv-3"):
        seen_scope: list[str | None] = []
        remove = add_observer(lambda seen: seen_scope.append(current_scope().conversation_id))
        try:
            for _ in range(3):
                decided = core.update_now("c", lambda state: core.policy.decide_tool_call(state, CALL), outage=None)
        finally:
            remove()
    assert decided is not None and store.threads == {"repeat-hooks Guard"}
    assert seen_scope == ["conv-3"] * 3
    assert [type(seen) for seen in heard] == [ToolCallDecided] * 3


def test_a_request_names_the_conversation_and_turn_over_the_sdks_own() -> None:
    core = GuardCore(owner="Guard")
    assert (core.conversation_id("sdk-session"), core.turn_id(42), core.turn_id("")) == ("sdk-session", "42", None)
    with request(conversation_id="conv-9", turn_id="req-1") as given:
        assert given == current_request()
        assert (core.conversation_id("sdk-session"), core.turn_id("sdk-turn")) == ("conv-9", "req-1")
    assert current_request().turn_id is None
    with request(turn_id="req-2"), request(conversation_id="conv-10"):  # an inner block keeps the outer's turn
        assert current_request() == Request("conv-10", "req-2")


def test_hints_are_only_what_annotations_say_explicitly() -> None:
    class Annotations:
        readOnlyHint = True
        destructiveHint = None
        idempotentHint = "yes"

    assert hints({"readOnlyHint": False, "destructiveHint": True}) == {"read_only": False, "destructive": True}
    assert hints(Annotations()) == {"read_only": True}
    assert hints(None) == {} and hints(42) == {}
    call = tool_call("Read", {"path": "a"}, call_id="", annotations={"idempotentHint": True}, read_only=True)
    assert (call.call_id, call.read_only, call.idempotent, call.destructive) == (None, True, True, None)
    assert tool_call("Read", annotations={"readOnlyHint": False}, read_only=True).read_only is False


def test_parsed_states_are_used_once_by_the_identity_of_what_was_written() -> None:
    states = ParsedStates(size=2)
    state = GuardState()
    raw = state.model_dump_json()
    states.keep(raw, state, version=1)
    assert states.peek(raw, where="x", version=1) is state
    assert states.take(raw, where="x", version=2) is not state  # changed in place since: parsed again
    states.keep(raw, state)
    assert states.take(raw, where="x") is state and states.take(raw, where="x") is not state  # once
    for n in range(3):
        states.keep(f"{raw} ", GuardState(), version=n)  # bounded
    assert len(states) == 2


def test_a_batch_finds_each_decided_call_once_by_object_then_id_and_arguments_then_id() -> None:
    from repeat_hooks.kit import ANY, Batch

    blocks = [{"id": "c1"}, {"id": "c1"}, {"id": "c2"}]  # one id used twice in the response
    calls = [ToolCall("track", {"n": n}, call_id=block["id"]) for n, block in enumerate(blocks)]
    refused = GuardCore(owner="Guard").refused  # None: "open"
    batch = Batch()
    decided = batch.decided(calls, [None, None, refused], given=blocks, tags=["a", "b", "c"])
    assert [entry.call.call_id for entry in decided] == ["c1", "c1#1", "c2"]  # as decide_tool_calls names them
    assert batch.claim("track", "c1", given=blocks[1]) is decided[1]  # the very object first
    assert batch.claim("track", "c1", {"n": 0}) is decided[0]  # then id, name and arguments
    assert batch.claim("track", "c1") is None  # each taken once
    assert batch.settle("track", "c2") is None  # not claimed yet
    assert batch.claim("track", "c2", ANY) is decided[2] and batch.settle("track", "c2") is decided[2]
    assert batch.settle("track", "c2") is None
    renamed = batch.add(ToolCall("track_v2", {}, call_id="c9"), None)
    assert renamed.claimed and batch.settle("track_v2", "c9") is renamed
    batch.clear()
    assert batch.calls == []


def test_what_an_adapter_keeps_beside_an_sdk_object_goes_with_it() -> None:
    import gc
    from dataclasses import dataclass

    from repeat_hooks.kit import Beside

    @dataclass
    class Usage:  # unhashable, as the OpenAI Agents SDK's is
        requests: int = 0

    beside: Beside[list[str]] = Beside()
    usage = Usage()
    kept = beside.setdefault(usage, list)
    assert beside.setdefault(usage, list) is kept and beside.get(usage) is kept and beside.get(Usage()) is None
    del usage
    gc.collect()
    assert len(beside) == 0
    other = Usage()
    beside.setdefault(other, list)
    assert beside.pop(other) == [] and beside.pop(other) is None


def test_a_moved_name_warns_with_its_new_spelling_and_still_works() -> None:
    from repeat_hooks.kit import moved

    forwarded = moved("repeat_hooks_example", {"old_name": "repeat_hooks.kit:Batch"})
    with pytest.deprecated_call(match=r"repeat_hooks_example.old_name is deprecated: use repeat_hooks.kit.Batch"):
        from repeat_hooks.kit import Batch

        assert forwarded("old_name") is Batch
    with pytest.raises(AttributeError, match="module 'repeat_hooks_example' has no attribute 'nothing'"):
        forwarded("nothing")


def test_the_events_since_one_are_the_ones_a_change_added() -> None:
    from repeat_hooks import StopRepeatedCalls

    guard = StopRepeatedCalls(max_calls=2)
    before = guard.state.events[-1] if guard.state.events else None
    for _ in range(3):
        guard.pre_tool_call(ToolCall("track"))
    added = guard.state.events_since(before)
    assert [event.reason for event in added] == [RefusalKind.REPEAT] and guard.state.events_since(added[-1]) == []
    assert guard.state.events_since(None) == guard.state.events


def test_a_stop_wrapped_by_an_sdk_is_found_in_the_chain_and_empty_stores_are_stores(tmp_path: Any) -> None:
    from repeat_hooks import Stop
    from repeat_hooks.kit import GuardStopped
    from repeat_hooks.stores.sqlite import SQLiteStore

    stop = Stop(message="I stopped.", reason=StopReason.MAX_STEPS)
    try:
        try:
            raise GuardStopped(stop)
        except GuardStopped as inner:
            raise RuntimeError("a plugin failed") from inner
    except RuntimeError as wrapped:
        assert GuardStopped.of(wrapped) == stop
    assert GuardStopped.of(ValueError("other")) is None and GuardStopped.of(None) is None
    assert bool(MemoryStore()) and bool(SQLiteStore(tmp_path / "s.db"))  # `store or default` keeps an empty one
