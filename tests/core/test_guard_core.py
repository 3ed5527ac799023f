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
    Refusal,
    RefusalKind,
    StateCorrupt,
    Stop,
    StopReason,
    StoreUnavailable,
    ToolCall,
)
from repeat_hooks.kit import GuardCore, Request, current_request, hints, request, tool_call
from repeat_hooks.kit.states import ParsedStates
from repeat_hooks.observe import Observation, Outage, Scope, ToolCallDecided, add_observer, current_scope, scope
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
    assert [record.getMessage() for record in caplog.records] == [
        "repeat_hooks: Guard's is_failure raised AttributeError: 'str' object has no attribute 'get' on a str result; "
        "the call counts as the SDK says (succeeded)"
    ] * 2
    assert [record.exc_info is not None for record in caplog.records] == [True, False]


async def test_an_async_update_of_the_sdks_slot_decides_writes_back_and_is_heard(heard: list[Observation]) -> None:
    core = GuardCore(owner="Guard")
    slot = Slot()
    decided = [
        await core.update(slot, lambda state: core.policy.decide_tool_call(state, CALL), outage=None) for _ in "abc"
    ]
    assert [refusal is None for refusal in decided] == [True, True, False]
    assert slot.writes == 3 and Slot(slot.raw).read().turn.refusals == 1
    assert [type(seen).__name__ for seen in heard].count("ToolCallDecided") == 3
    broken = Slot("not a state")
    assert await core.update(broken, lambda state: core.policy.decide_tool_call(state, CALL), outage="down") == "down"


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


async def test_a_change_that_raises_through_a_store_that_tells_nobody_leaves_it_heard_next_time() -> None:
    class KeepingStore(DictStore):  # keeps its state objects, as an in-memory store of a user's may
        def __init__(self) -> None:
            super().__init__()
            self.states: dict[str, GuardState] = {}

        async def update(self, key: str, change: Any) -> Any:
            return change(self.states.setdefault(key, GuardState()))

    store = KeepingStore()
    core = GuardCore(owner="Guard", store=store)  # type: ignore[arg-type]
    heard: list[Observation] = []
    remove = add_observer(heard.append)

    def broken(state: GuardState) -> None:
        core.policy.decide_tool_call(state, CALL)
        raise KeyError("adapter bug")

    try:
        with pytest.raises(KeyError):
            await core.update("c1", broken, outage=None)
        assert heard == [] and store.states["c1"].news is None  # nothing told, no longer listening
        await core.update("c1", lambda state: core.policy.decide_tool_call(state, CALL), outage=None)
    finally:
        remove()
    assert [type(seen).__name__ for seen in heard] == ["ToolCallDecided"]


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
        Outage("k", "StoreUnavailable: redis://10.0.0.1: connection refused", "open", "conv-7"),
        Outage("k", "StoreUnavailable: redis://10.0.0.1: connection refused", "closed", "conv-7"),
        Outage("k", "StoreUnavailable: redis://10.0.0.1: connection refused", "closed", "conv-7"),
    ]
    assert "could not reach the state of k: StoreUnavailable" in caplog.text
    assert "failing closed [conversation=conv-7]" in caplog.text


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
    with request(conversation_id="chat-A", turn_id="req-1"):
        with request(conversation_id="chat-B"):  # another conversation: not chat-A's turn
            assert current_request() == Request("chat-B", None)
        with request(conversation_id="chat-A"), request(turn_id=None):
            assert current_request() == Request("chat-A", "req-1")


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
    named = tool_call("track", {"id": 7}, call_id="c3")
    assert (named.name, named.arguments, named.call_id) == ("track", {"id": 7}, "c3")

    class Hostile:
        @property
        def readOnlyHint(self) -> bool:
            raise RuntimeError("no")

        destructiveHint = True

    class Partial:  # only the last hint set: each is read, whatever came before
        idempotentHint = True

    assert hints(Hostile()) == {"destructive": True} and hints(Partial()) == {"idempotent": True}


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


def test_a_batch_hands_out_outcomes_in_the_responses_order_whatever_order_its_calls_finish_in() -> None:
    from repeat_hooks.kit import Batch

    batch = Batch()
    first, second, third = batch.decided([ToolCall("track", {"n": n}) for n in range(3)], [None] * 3)
    second.outcome, second.settled = "b", True  # parallel calls: the second finished first
    assert batch.in_order() == [] and not batch.over  # the first still runs: nothing may be recorded before it
    first.outcome, first.settled = "a", True
    assert batch.in_order() == ["a", "b"] and batch.in_order() == []  # each once
    assert batch.in_order(everything=True) == [] and not batch.over  # the third has no outcome (None): left out
    third.settled = True
    assert batch.over
    batch.decided([ToolCall("track", {})], [None])[0].outcome = "c"  # a new response starts over
    assert batch.in_order() == [] and batch.in_order(everything=True) == ["c"]


def test_a_batch_find_reads_a_decision_without_taking_it() -> None:
    from repeat_hooks.kit import Batch

    batch = Batch()
    first, second = batch.decided(
        [ToolCall("track", {"n": 1}, call_id="c1"), ToolCall("track", {"n": 2})], [None, None]
    )
    assert batch.find("track", "c1") is first and batch.find("track", "c1") is first  # read, not taken
    assert batch.claim("track", "c1") is first and batch.find("track", "c1") is first  # claimed: still found
    assert batch.find("track", None, {"n": 2}) is second and batch.find("track", "", {"n": 2}) is second
    assert batch.find("track", "c1", {"n": 9}) is first  # no exact arguments: the first of the id
    assert batch.find("other", "c1") is None and batch.find("track", "c7") is None


def test_the_tool_names_are_checked_once_per_set_and_never_with_check_tools_false() -> None:
    core = GuardCore(Policy(limits={"track": 1}), owner="Guard")
    core.check_tool_names(["track", "ship"])
    with pytest.raises(GuardSetupError, match="track"):
        core.check_tool_names(["ship"])
    with pytest.raises(GuardSetupError, match="track"):  # a failed set is not remembered as checked
        core.check_tool_names(["ship"])
    GuardCore(Policy(limits={"track": 1}), owner="Guard", check_tools=False).check_tool_names(["ship"])

    class Own(GuardSetupError):
        pass

    with pytest.raises(Own):
        GuardCore(Policy(limits={"track": 1}), owner="Guard", error=Own).check_tool_names(["ship"])


def test_a_stop_raises_only_with_on_stop_raise_and_survives_pickling() -> None:
    import pickle

    from repeat_hooks.kit import GuardStopped

    stop = Stop(message="I stopped.", reason=StopReason.MAX_STEPS)
    assert GuardCore(owner="Guard").stopped(stop, GuardStopped) is None
    raised = GuardCore(owner="Guard", on_stop="raise").stopped(stop, GuardStopped, "detail")
    assert isinstance(raised, GuardStopped) and raised.stop == stop and raised.args[1:] == ("detail",)
    assert "(max_steps): I stopped." in str(raised)
    again = pickle.loads(pickle.dumps(raised))  # as a worker process hands it back
    assert type(again) is GuardStopped and again.stop == stop and again.args == raised.args


def test_cost_of_prices_a_response_and_is_zero_without_prices() -> None:
    from repeat_hooks import TokenPrices

    class Usage:
        input_tokens, output_tokens = 1_000_000, 500_000

    assert GuardCore(owner="Guard").cost_of(Usage()) == 0.0
    priced = GuardCore(Policy(max_cost_usd=1.0), owner="Guard", cost=TokenPrices(2.0, 4.0))
    assert priced.cost_of(Usage()) == pytest.approx(4.0)


def test_scope_names_the_conversation_and_agent_as_text_only_for_observers(heard: list[Observation]) -> None:
    core = GuardCore(owner="Guard")
    with core.scope(42, "tracker"):
        assert (current_scope().conversation_id, current_scope().agent_name) == ("42", "tracker")
    with core.scope("", None):
        assert (current_scope().conversation_id, current_scope().agent_name) == (None, None)


def test_every_log_line_of_a_hook_call_names_its_conversation_and_agent(caplog: pytest.LogCaptureFixture) -> None:
    """With no observer at all: an operator reading the log ties each refusal and stop to its conversation."""
    core = GuardCore(Policy(max_refusals=1), owner="Guard", store=MemoryStore())

    def call(state: GuardState) -> object:
        return core.policy.decide_tool_call(state, CALL, turn_id="t1")

    def model(state: GuardState) -> object:
        return core.policy.decide_model_call(state, turn_id="t1")

    with caplog.at_level(logging.INFO, logger="repeat_hooks"), core.scope("chat-42", "parcel-tracker"):
        for _ in range(3):
            core.update_now("chat-42", call, outage=None)
        assert core.update_now("chat-42", model, outage=None) is not None
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(":")[0] for line in lines] == ["repeat_hooks refusal", "repeat_hooks stop"]
    assert all(line.endswith(" turn=t1 [conversation=chat-42 agent=parcel-tracker]") for line in lines), lines
    assert {(record.conversation_id, record.agent_name) for record in caplog.records} == {("chat-42", "parcel-tracker")}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="repeat_hooks"):  # outside any hook call: the line as it was
        for _ in range(3):
            core.update_now("chat-9", call, outage=None)
    assert [record.getMessage().endswith(" turn=t1") for record in caplog.records] == [True]


def test_a_log_line_without_arguments_keeps_its_percent_signs_and_a_scope_reads_its_outer_one_when_entered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("repeat_hooks")
    agent = scope(agent_name="tracker")  # made before the conversation's scope is entered, entered within it
    with caplog.at_level(logging.INFO, logger="repeat_hooks"), scope(conversation_id="chat-1"), agent as inner:
        logger.info("100% done")
        logger.info("%d%% of %s", 50, "it")
    assert (inner.conversation_id, inner.agent_name) == ("chat-1", "tracker")
    assert [record.getMessage() for record in caplog.records] == [
        "100% done [conversation=chat-1 agent=tracker]",
        "50% of it [conversation=chat-1 agent=tracker]",
    ]
    with agent, agent:  # entered twice, left twice: the scope outside is back
        assert current_scope().agent_name == "tracker"
    assert current_scope() == Scope()


def test_parsed_states_forget_drops_what_was_kept() -> None:
    states = ParsedStates(size=4)
    state = GuardState()
    raw = state.model_dump_json()
    states.keep(raw, state)
    states.forget(raw)
    assert len(states) == 0 and states.take(raw, where="x") is not state
    states.forget("never kept")  # nothing to drop: no error


def test_common_takes_every_common_keyword_but_the_policy() -> None:
    from repeat_hooks.kit import COMMON, common

    given = {name: object() for name in COMMON} | {"self": object(), "state_key": "k"}
    taken = common(given)
    assert list(taken) == list(COMMON[1:]) and all(taken[name] is given[name] for name in taken)


class FlakyStore(MemoryStore):
    """A ``MemoryStore`` that can be down, then back; it counts which path each update took."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.paths: list[str] = []

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("x" * 900)

    async def update(self, key: str, change: Any) -> Any:
        self._check()
        self.paths.append("update")
        return super().update_now(key, change)

    def update_now(self, key: str, change: Any) -> Any:
        self._check()
        self.paths.append("update_now")
        return super().update_now(key, change)

    async def load(self, key: str) -> GuardState | None:
        self._check()
        return await super().load(key)


def ending(core: GuardCore) -> Any:
    """The change of a model call (it ends nothing under the default policy: ``None``)."""
    return core.policy.decide_model_call


async def test_a_turn_ended_by_an_outage_reads_as_that_stop_until_the_store_is_back() -> None:
    store = FlakyStore()
    core = GuardCore(owner="Guard", store=store, fail="closed")
    store.down = True
    with request(turn_id="t1"):
        stop = await core.update("k", ending(core), outage=core.ended)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE
    assert await core.stop_of("k") == stop and await core.stop_of("k", "t1") == stop
    with pytest.raises(StoreUnavailable):
        await core.stop_of("k", "t2")  # another turn: not this process's stop, and the store is down
    store.down = False
    assert await core.update("k", ending(core), outage=core.ended) is None  # back: the policy decides
    assert await core.stop_of("k") is None  # the outage's stop is forgotten once the store answered
    store.down = True
    sync_stop = core.update_now("k", ending(core), outage=core.ended)
    assert sync_stop is not None and sync_stop.reason is StopReason.STORE_UNAVAILABLE
    assert await core.stop_of("k") == sync_stop
    store.down = False
    core.update_now("k", ending(core), outage=core.ended)
    assert await core.stop_of("k") is None
    assert store.paths == ["update", "update_now"]  # a store with update_now is used on the caller's thread


async def test_a_stopped_turn_is_read_from_the_store_by_turn() -> None:
    store = MemoryStore()
    core = GuardCore(Policy(max_model_calls=1), owner="Guard", store=store)

    def model_call(state: GuardState) -> Stop | None:
        stop = core.policy.decide_model_call(state)
        core.policy.record_model_call(state)
        return stop

    assert await core.update("k", model_call, outage=core.ended) is None
    stop = await core.update("k", model_call, outage=core.ended)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert await core.stop_of("k") == stop and await core.stop_of("missing") is None


async def test_outages_kept_for_stop_of_are_bounded_oldest_first() -> None:
    store = FlakyStore()
    core = GuardCore(owner="Guard", store=store, fail="closed")
    store.down = True
    for n in range(1025):
        core.update_now(f"k{n}", ending(core), outage=core.ended)
    with pytest.raises(StoreUnavailable):
        await core.stop_of("k0")  # the oldest of 1025: forgotten
    assert await core.stop_of("k1") is not None and await core.stop_of("k1024") is not None


async def test_a_key_without_a_store_is_a_setup_error_naming_the_conversation() -> None:
    class Own(GuardSetupError):
        pass

    core = GuardCore(owner="Guard", error=Own)
    with pytest.raises(Own, match=r"Guard: no store= to keep conversation 'k' in"):
        await core.update("k", ending(core), outage=None)
    with pytest.raises(Own, match=r"Guard: no store= to keep conversation 'k' in"):
        core.update_now("k", ending(core), outage=None)
    with pytest.raises(Own, match=r"Guard: no store= to read conversation 'k' from"):
        await core.stop_of("k")


def test_an_async_only_store_serves_a_sync_hook_and_its_outage_decides_as_fail_says() -> None:
    core = GuardCore(Policy(max_calls=1), owner="Guard", store=DictStore())  # type: ignore[arg-type]
    decide = lambda state: core.policy.decide_tool_call(state, CALL)  # noqa: E731
    assert core.update_now("k", decide, outage=core.refused) is None
    refusal = core.update_now("k", decide, outage=core.refused)
    assert refusal is not None and refusal.reason is RefusalKind.REPEAT
    closed = GuardCore(owner="Guard", store=BrokenStore(), fail="closed")  # type: ignore[arg-type]
    down = closed.update_now("k", decide, outage=closed.refused)
    assert down is not None and down.reason is RefusalKind.STORE_UNAVAILABLE


def test_an_outage_log_names_the_guard_the_key_and_the_error_and_the_observers_get_500_chars(
    heard: list[Observation], caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore()
    store.down = True
    core = GuardCore(owner="Tracker guard", store=store)
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"), request(conversation_id="conv-3"):
        assert core.update_now("key-9", ending(core), outage=core.ended) is None
    line = caplog.records[-1].getMessage()
    assert line.startswith("repeat_hooks: Tracker guard could not reach the state of key-9: StoreUnavailable: xxx")
    assert line.endswith("; failing open [conversation=conv-3]") and caplog.records[-1].exc_info is None
    assert caplog.records[-1].conversation_id == "conv-3"
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="repeat_hooks"):
        core.update_now("key-9", ending(core), outage=core.ended)
    assert caplog.records[-1].exc_info is not None  # the traceback at DEBUG
    outages = [seen for seen in heard if isinstance(seen, Outage)]
    assert outages[0].key == "key-9" and len(outages[0].error) == 500 and outages[0].fail == "open"


def test_a_slot_that_cannot_be_read_is_an_outage_named_by_the_slot(caplog: pytest.LogCaptureFixture) -> None:
    class Unreadable(Slot):
        def read(self) -> GuardState:
            raise StoreUnavailable("the session service is down")

    core = GuardCore(owner="Guard", fail="closed")
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        refusal = core.update_now(
            Unreadable(), lambda state: core.policy.decide_tool_call(state, CALL), outage=core.refused
        )
    assert refusal is not None and refusal.reason is RefusalKind.STORE_UNAVAILABLE
    assert "could not reach the state of agent.state['repeat_hooks']" in caplog.text


def test_a_slot_is_written_with_what_the_change_did_and_its_result_returned() -> None:
    core = GuardCore(Policy(max_calls=1), owner="Guard")
    slot = Slot()
    decide = lambda state: core.policy.decide_tool_call(state, CALL)  # noqa: E731
    assert core.update_now(slot, decide, outage=None) is None
    refusal = core.update_now(slot, decide, outage=None)
    assert refusal is not None and refusal.reason is RefusalKind.REPEAT and slot.writes == 2
    assert GuardState.model_validate_json(slot.raw).turn.refusals == 1


def test_a_guard_stop_is_found_through_the_errors_an_sdk_wraps_it_in() -> None:
    from repeat_hooks.kit import GuardStopped

    stop = Stop(message="I stopped.", reason=StopReason.MAX_STEPS)

    def wrapped(how: str) -> BaseException:
        try:
            try:
                raise GuardStopped(stop)
            except GuardStopped as inner:
                if how == "cause":
                    raise RuntimeError("the SDK's wrapper") from inner
                raise RuntimeError("raised while handling")  # noqa: B904 - __context__ only
        except RuntimeError as outer:
            return outer
        raise AssertionError

    assert GuardStopped.of(wrapped("cause")) == stop and GuardStopped.of(wrapped("context")) == stop
    assert GuardStopped.of(None) is None and GuardStopped.of(RuntimeError("other")) is None
    looped = RuntimeError("a")
    looped.__context__ = RuntimeError("b")
    looped.__context__.__context__ = looped  # a cycle: read once, no hang
    assert GuardStopped.of(looped) is None
    assert GuardStopped(stop).message == "I stopped."


def test_the_guard_keeps_its_keywords_and_what_its_policy_needs_fed() -> None:
    from repeat_hooks import TokenPrices
    from repeat_hooks.kit import monotonic

    prices = TokenPrices(1.0, 2.0)
    core = GuardCore(Policy(max_cost_usd=1.0, max_model_seconds=60), owner="Guard", cost=prices, on_stop="raise")
    assert (core.cost, core.clock, core.check_tools, core.on_stop, core.fail) == (
        prices,
        monotonic,
        True,
        "raise",
        "open",
    )
    assert core.records_outcomes and core.records_model_calls  # progress needs outcomes; budgets, model calls
    plain = GuardCore(Policy(count="per_turn", max_errors_in_a_row=None, max_refusals=None), owner="Guard")
    assert not plain.records_outcomes and not plain.records_model_calls
    with pytest.raises(GuardSetupError, match="none of Guard's agent's tools"):
        GuardCore(Policy(limits={"track": 1}), owner="Guard").check_tool_names(["ship"])  # checked by default


def test_setup_mistakes_raise_the_adapters_error_with_its_spelling() -> None:
    class Own(GuardSetupError):
        pass

    with pytest.raises(TypeError, match=r"not the class Policy: pass guard_agent\(agent, Policy\(\.\.\.\)\)"):
        GuardCore(Policy, owner="Guard", spelling="guard_agent(agent, Policy(...))")  # type: ignore[arg-type]
    with pytest.raises(Own, match="max_cost_usd"):  # a budget nobody feeds: the adapter's error too
        GuardCore(Policy(max_cost_usd=1.0), owner="Guard", error=Own)
    with pytest.raises(Own, match="max_model_seconds"):
        GuardCore(Policy(max_model_seconds=5), owner="Guard", clock=None, error=Own)
    with pytest.raises(TypeError, match="got str"):
        GuardCore(owner="Guard", is_failure="error")  # type: ignore[arg-type]


def test_ids_are_kept_as_text_and_long_or_odd_ones_as_their_stable_text() -> None:
    from repeat_hooks.call import as_text

    long, odd = "c" * 1001, "conversación"
    for given in ("c" * 1000, long, odd, 42):
        with request(conversation_id=given):  # type: ignore[arg-type]
            assert current_request().conversation_id == as_text(given)
    assert as_text(long) != long and as_text("c" * 1000) == "c" * 1000


def test_a_batch_keeps_each_calls_decision_object_and_tag_under_a_unique_id() -> None:
    from repeat_hooks.kit import Batch

    refusal = Refusal(message="no", reason=RefusalKind.REPEAT)
    calls = [ToolCall("track", {"n": 1}, call_id="c1"), ToolCall("track", {"n": 2}, call_id="c1"), ToolCall("ship", {})]
    batch = Batch()
    decided = batch.decided(calls, [None, refusal, None], given=["block-0"], tags=["t0", "t1"])
    assert [(entry.refusal, entry.given, entry.tag) for entry in decided] == [
        (None, "block-0", "t0"),
        (refusal, None, "t1"),
        (None, None, None),  # given and tags shorter than the calls: None
    ]
    assert decided[0].call is calls[0] and decided[1].call.call_id == "c1#1" and decided[1].model_id == "c1"
    with pytest.raises(ValueError):
        batch.decided(calls, [None])  # one decision a call, or a mistake
    added = batch.add(ToolCall("ship_v2", {}, call_id="c5"), refusal, given="block-5", tag="t5")
    assert (added.refusal, added.given, added.tag, added.model_id) == (refusal, "block-5", "t5", "c5")


def test_a_batch_claims_by_arguments_and_settles_by_the_object_the_sdk_hands_back() -> None:
    from repeat_hooks.kit import Batch

    batch = Batch()
    calls = [ToolCall("track", {"n": n}, call_id="same") for n in range(3)]
    decided = batch.decided(calls, [None, None, None])
    block = object()
    assert batch.claim("track", "same", {"n": 2}, given=block) is decided[2]  # the arguments pick the call
    assert decided[2].given is block
    assert batch.claim("track", "same", {"n": 9}) is decided[0]  # none exact: the first unclaimed of the id
    assert batch.settle("track", "other-id", given=block) is decided[2]  # the very object, whatever the id says
    assert batch.settle("track", "same", {"n": 0}) is decided[0]
    assert batch.settle("track", "same", claimed=False) is decided[1]  # a post hook with no pre hook before


def test_a_store_key_names_the_conversation_and_the_guarded_agent() -> None:
    assert GuardCore.key("chat-1", "billing") == "chat-1/billing"
    assert GuardCore.key("chat-1", None) == "chat-1" and GuardCore.key("chat-1", "") == "chat-1"
    assert GuardCore.key(None, "billing") is None and GuardCore.key("chat-1", 7) == "chat-1/7"


def test_parsed_states_read_what_was_written_else_parse_and_say_where() -> None:
    states = ParsedStates()
    assert states.size == 1024
    state = GuardState()
    raw = state.model_dump_json()
    states.keep(raw, state, version=1)
    assert states.peek(raw, where="x", version=1) is state and states.peek(raw, where="x", version=1) is state
    assert states.peek(raw, where="x", version=2) is not state  # another version: parsed
    same_text = "".join(raw)  # equal text, another object: parsed, never taken for the kept one
    assert same_text is not raw and states.take(same_text, where="x", version=1) is not state
    assert states.take(raw, where="x", version=1) is state
    for method in (states.take, states.peek):
        with pytest.raises(StateCorrupt, match=r"^repeat-hooks: agent\.state\['repeat_hooks'\]: the stored"):
            method("not a state", where="agent.state['repeat_hooks']")
    states.keep(raw, state)
    states.keep(raw, GuardState())  # kept again: replaces, not a second entry
    assert len(states) == 1
