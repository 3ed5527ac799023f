"""``store=``: the counts live in a ``StateStore`` under the thread id, so guards in other processes (here: other
agents, other checkpointers) serve one conversation; the outage policy (``fail=``) when the store is down; and the
other common keywords new here (``on_stop="raise"``, ``is_failure``) with their mistakes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langchain_parcels import ARGS, IN_TRANSIT, REFUSAL, STOPPED, USER, Carrier, parcel_agent, seed_004, thread
from repeat_hooks_langchain import (
    GuardSetupError,
    Policy,
    RepeatGuardMiddleware,
    RepeatGuardStopped,
    StopReason,
    guard_state_of,
    stop_of,
)
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, keep_calling

from repeat_hooks import GuardState, MemoryStore, StateStore, StoreUnavailable
from repeat_hooks.kit import GuardStopped, request
from repeat_hooks.messages import STORE_DOWN_REFUSAL
from repeat_hooks.stores.sqlite import SQLiteStore

T = TypeVar("T")
TRACK = keep_calling("track_parcel", ARGS)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "states.db")


def guarded(model: ScriptedChatModel, carrier: Carrier, store: StateStore | None, **options: Any) -> Any:
    """The parcel agent with seed 004's guard keeping its counts in ``store``, on a checkpointer of its own."""
    return parcel_agent(model, carrier, middleware=[RepeatGuardMiddleware(seed_004(), store=store, **options)])


def loaded(store: StateStore, key: str) -> GuardState:
    state = asyncio.run(store.load(key))
    assert state is not None
    return state


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_the_counts_live_in_the_store_under_the_thread_id(
    store: StateStore, carrier: Carrier, asynchronous: bool
) -> None:
    agent = guarded(ScriptedChatModel(then=TRACK), carrier, store)

    result = asyncio.run(agent.ainvoke(USER, thread("t1"))) if asynchronous else agent.invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731"] * 2 and result["messages"][-1].content == STOPPED
    state = loaded(store, "t1")
    assert (state.turn.number, state.turn.refusals, state.turn.model_calls) == (1, 3, 5)
    assert "repeat_guard" not in result  # not in the graph state: only the stop travels with the result
    stop = stop_of(result)
    assert stop is not None and stop == state.turn.stop and stop.reason is StopReason.IGNORED_REFUSALS
    with pytest.raises(GuardSetupError, match=r"keeps its state in its store=.*await store.load\(thread_id\)"):
        guard_state_of(result)
    assert stop_of(agent.invoke({"messages": [("user", "Thanks")]}, thread("t1"))) is not None  # a new turn


def test_two_guards_on_one_store_share_a_conversations_counts(store: StateStore, carrier: Carrier) -> None:
    # Two agents with a guard and a checkpointer each (two workers): the second serves the same turn again (the
    # same thread id and run id, a retried request), and its calls count on from the first's.
    first = guarded(ScriptedChatModel(replies=[TRACK, TRACK, answer("in transit")]), carrier, store)
    second_model = ScriptedChatModel(replies=[TRACK, answer("still in transit")])
    second = guarded(second_model, carrier, store)
    config = {**thread("conv-1"), "run_id": uuid.uuid4()}

    first.invoke(USER, config)
    result = asyncio.run(second.ainvoke(USER, config))

    assert carrier.calls == ["FR-7731"] * 2
    assert second_model.tool_results(1) == [REFUSAL]
    assert result["messages"][-1].content == "still in transit" and stop_of(result) is None
    assert loaded(store, "conv-1").turn.refusals == 1


def test_a_callers_request_names_the_conversation_and_the_turn_without_a_thread_id(carrier: Carrier) -> None:
    store = MemoryStore()
    model = ScriptedChatModel(replies=[TRACK, TRACK, answer("in transit"), TRACK, answer("still")])
    agent = create_plain_agent(model, carrier, store)

    with request(conversation_id="customer-9", turn_id="req-1"):
        agent.invoke(USER)
        agent.invoke(USER)  # the request retried: the same turn

    assert carrier.calls == ["FR-7731"] * 2 and model.tool_results(4) == [REFUSAL]
    assert loaded(store, "customer-9").turn.number == 1


def create_plain_agent(model: ScriptedChatModel, carrier: Carrier, store: StateStore) -> Any:
    from langchain.agents import create_agent

    return create_agent(model, tools=[carrier.tool], middleware=[RepeatGuardMiddleware(seed_004(), store=store)])


def test_a_store_with_no_conversation_named_fails_at_the_first_call_with_the_spelling(carrier: Carrier) -> None:
    agent = create_plain_agent(ScriptedChatModel(then=TRACK), carrier, MemoryStore())

    with pytest.raises(GuardSetupError, match=r'config=\{"configurable": \{"thread_id": \.\.\.\}\}.*request\('):
        agent.invoke(USER)
    assert carrier.calls == []


class AsyncOnlyStore(MemoryStore):
    """A store with no ``update_now`` (as ``RedisStore``): the sync hooks reach it on the guard's own loop."""

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        await asyncio.sleep(0)
        return super().update_now(key, change)

    update_now = None  # type: ignore[assignment]


def test_invoke_reaches_an_async_only_store(carrier: Carrier) -> None:
    store = AsyncOnlyStore()

    guarded(ScriptedChatModel(then=TRACK), carrier, store).invoke(USER, thread("t1"))

    assert carrier.calls == ["FR-7731"] * 2 and loaded(store, "t1").turn.refusals == 3


class DownOnce(MemoryStore):
    """A store that fails (``StoreUnavailable``) on the update after ``arm()``, then works again."""

    down = False

    def arm(self, reply: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def armed(messages: Any) -> Any:
            self.down = True  # the model's response is decided in the update that follows
            return reply(messages)

        return armed

    def update_now(self, key: str, change: Callable[[GuardState], T]) -> T:
        if self.down:
            self.down = False
            raise StoreUnavailable("redis: connection refused")
        return super().update_now(key, change)


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_a_store_down_when_a_response_is_decided_fails_open_or_closed(
    carrier: Carrier, fail: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = DownOnce()
    model = ScriptedChatModel(replies=[store.arm(TRACK), answer("done")])

    result = guarded(model, carrier, store, fail=fail).invoke(USER, thread("t1"))

    assert "could not reach the state of t1" in caplog.text and "StoreUnavailable: redis" in caplog.text
    if fail == "open":  # the call runs, the model reads its result
        assert carrier.calls == ["FR-7731"] and model.tool_results(1) == [IN_TRANSIT]
    else:  # the call does not run, the model reads the store-down refusal
        assert carrier.calls == [] and model.tool_results(1) == [STORE_DOWN_REFUSAL]
    assert result["messages"][-1].content == "done"


class Down(MemoryStore):
    """A store that never answers."""

    def update_now(self, key: str, change: Callable[[GuardState], T]) -> T:
        raise StoreUnavailable("redis: connection refused")


def test_a_store_down_before_a_model_call_ends_the_turn_when_it_fails_closed(carrier: Carrier) -> None:
    # The turn's start is a record (it goes on without it); the model call's decision ends the turn.
    store, model = Down(), ScriptedChatModel(then=TRACK)

    result = guarded(model, carrier, store, fail="closed").invoke(USER, thread("t1"))

    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE
    assert result["messages"][-1].content == stop.message and model.calls == 0 and carrier.calls == []


@pytest.mark.parametrize("store_kind", ["graph state", "store"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_on_stop_raise_raises_the_stop_out_of_invoke(carrier: Carrier, asynchronous: bool, store_kind: str) -> None:
    store = MemoryStore() if store_kind == "store" else None
    model = ScriptedChatModel(then=TRACK)
    agent = guarded(model, carrier, store, on_stop="raise")

    with pytest.raises(RepeatGuardStopped) as raised:
        asyncio.run(agent.ainvoke(USER, thread("t1"))) if asynchronous else agent.invoke(USER, thread("t1"))

    assert isinstance(raised.value, GuardStopped)
    assert raised.value.stop.reason is StopReason.IGNORED_REFUSALS and raised.value.message == STOPPED
    assert stop_of(raised.value) == raised.value.stop  # what the caller caught reads as every other stop_of
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5  # no model call after the stop


def test_on_stop_raise_reaches_a_stream(carrier: Carrier) -> None:
    agent = guarded(ScriptedChatModel(then=TRACK), carrier, None, on_stop="raise")

    with pytest.raises(RepeatGuardStopped, match=r"repeat-hooks stopped the run \(ignored_refusals\)"):
        list(agent.stream(USER, thread("t1"), stream_mode="updates"))


def test_is_failure_counts_a_result_the_model_reads_as_an_error(carrier: Carrier) -> None:
    from langchain_core.tools import tool

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        carrier.calls.append(tracking_number)
        return f"ERROR: carrier timeout ({len(carrier.calls)})"  # a new text each time: no repeat

    model = ScriptedChatModel(then=TRACK)
    guard = RepeatGuardMiddleware(Policy(max_errors_in_a_row=3), is_failure=lambda view: view.startswith("ERROR"))
    from langchain.agents import create_agent

    result = create_agent(model, tools=[track_parcel], middleware=[guard]).invoke(USER)

    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and len(carrier.calls) == 3


def test_an_is_failure_written_for_another_form_leaves_the_sdks_word(carrier: Carrier) -> None:
    """The model reads text here: a check written for a dict raises, and the calls that succeeded stay successes
    (no turn ended for "errors in a row")."""

    def for_dicts(view: Any) -> bool:
        return bool(view.get("status") == "error")

    model = ScriptedChatModel(replies=[TRACK, TRACK, answer("done")])
    middleware = RepeatGuardMiddleware(Policy(max_errors_in_a_row=2), is_failure=for_dicts)
    result = parcel_agent(model, carrier, middleware=[middleware]).invoke(USER, thread("t1"))

    assert guard_state_of(result).turn.errors_in_a_row == 0 and guard_state_of(result).turn.stop is None
    assert result["messages"][-1].content == "done"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_stop": "output"}, r"RepeatGuardMiddleware\(on_stop=\.\.\.\) is 'reply' or 'raise', not 'output'"),
        ({"fail": "closd"}, r"RepeatGuardMiddleware\(fail=\.\.\.\) is 'open' or 'closed', not 'closd'"),
        ({"store": {}}, r"store=\.\.\.\) takes a repeat_hooks StateStore \(MemoryStore, SQLiteStore, RedisStore\)"),
        ({"is_failure": "ERROR"}, r"is_failure=\.\.\.\) takes a function of what the model reads"),
        ({"store": MemoryStore}, r"takes a store, not the class: RepeatGuardMiddleware\(store=MemoryStore\(\.\.\.\)\)"),
        ({"stor": MemoryStore()}, r"RepeatGuardMiddleware got an unexpected keyword 'stor': did you mean store="),
        ({"max_call": 2}, r"unknown setting 'max_call' \(did you mean max_calls\?\)"),
    ],
    ids=["on_stop", "fail", "store", "is_failure", "store-class", "misspelt-keyword", "misspelt-setting"],
)
def test_a_misspelt_or_misplaced_keyword_fails_with_the_right_spelling(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        RepeatGuardMiddleware(**options)
