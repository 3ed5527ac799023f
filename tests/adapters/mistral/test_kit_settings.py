"""The kit's common settings on rc11's real loop: seed 004's ``StopRepeatedCalls``, ``store=`` (memory, SQLite),
``fail``, ``on_stop``, ``is_failure``, ``clock``, a conversation and turn named by the caller, ``stop_of``'s shapes,
and the 0.2 spellings, which warn and still work."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from mistralai.agents import agents
from repeat_hooks_mistral import (
    GuardSetupError,
    RepeatGuardHook,
    RepeatGuardStopped,
    StopRepeatedCalls,
    events_of,
    read_state,
    stop_of,
)
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages

from repeat_hooks import GuardState, MemoryStore, Policy, StopReason, StoreUnavailable
from repeat_hooks.kit import request
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stores.sqlite import SQLiteStore

T = TypeVar("T")
FR = {"tracking_number": "FR-7731"}


def small_model(request: Any) -> ToolUse | str:
    """Seed 004's model: told to keep checking, it keeps checking; else it checks once and answers."""
    from repeat_hooks_mistral.testing import calls_this_turn, last_user_text

    if "keep checking" in last_user_text(request).lower() or calls_this_turn(request) == 0:
        return ToolUse("track_parcel", FR)
    return "FR-7731 is in transit."


# -- issue 25, item 6: seed 004's spelling is the Mistral hook again ---------------------------------------


async def test_stop_repeated_calls_tells_seed_004_s_story(carrier: Any, agent_for: Any) -> None:
    """``hooks=[StopRepeatedCalls()]``: per tool, 2 calls a turn run, the 3rd is refused with a message the model
    reads, 3 refusals end the turn, and the next turn counts afresh."""
    assert StopRepeatedCalls.policy == Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)
    model = ScriptedModel(small_model)
    async with await agent_for(model, StopRepeatedCalls()).create_session() as session:
        first, stop = await StopRepeatedCalls.run(session, "FR-7731 is due today. Keep checking until it is delivered.")
        assert len(carrier.calls) == 2 and len(model.requests) == 5
        assert [m.startswith("Refused") for m in tool_messages(model.requests[-1])] == [False, False, True, True]
        second, again = await StopRepeatedCalls.run(session, "Check FR-7731 once more.")

    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert first.text == stop.message and first.stop_reason == "completed"
    assert (second.text, again) == ("FR-7731 is in transit.", None)
    assert len(carrier.calls) == 3, "turn 2 starts a fresh count: its call runs"
    agent_for(ScriptedModel(small_model), StopRepeatedCalls()).to_workflow()  # deployable as it is


# -- store=: the counts live in the store, and guards on one store share a conversation's -------------------


def _guard(store: Any, module: str = "parcel_app", **body: Any) -> type[RepeatGuardHook]:
    """``ParcelGuard`` of module ``module`` (made again: as another process imports it), its states in ``store``."""
    namespace = {"__module__": module, "__qualname__": "ParcelGuard", "store": store, **body}
    namespace.setdefault("policy", Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3))
    return cast(type[RepeatGuardHook], type(RepeatGuardHook)("ParcelGuard", (RepeatGuardHook,), namespace))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_the_counts_live_in_the_store_and_two_processes_guards_share_a_conversation(
    kind: str, tmp_path: Path, carrier: Any, agent_for: Any
) -> None:
    """Two processes (each its own ``ParcelGuard`` class and store object, one store behind them) serve one
    conversation, named around ``Guard.run``: the second one's first call is the conversation's 3rd, refused."""

    def store() -> Any:
        return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "states.db")

    shared = store()
    first = _guard(shared)
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), ToolUse("track_parcel", FR), "In transit.")
    with request(conversation_id="chat-42", turn_id="request-7"):
        result, stop = await first.run(agent_for(model, first()), "Where is FR-7731?")
    state = await shared.load(first.state_key("chat-42"))
    assert state is not None and state.turn.id == "request-7" and list(state.turn.counts.values()) == [2]

    second = _guard(shared if kind == "memory" else store())  # the same class, made again: another process
    other = ScriptedModel.replies(ToolUse("track_parcel", FR), "In transit.")
    with request(conversation_id="chat-42", turn_id="request-7"):
        await second.run(agent_for(other, second()), "Where is FR-7731?")

    assert len(carrier.calls) == 2, "the other process's call was the turn's 3rd: refused"
    assert tool_messages(other.requests[-1])[0].startswith("Refused: you already called track_parcel 2 times")
    assert (result.text, stop) == ("In transit.", None)


async def test_the_turn_counts_under_the_request_named_around_run_whatever_context_rc11_s_tasks_hold(
    carrier: Any, agent_for: Any
) -> None:
    """rc11 runs hooks in its session's own tasks, which hold the context the session was made in, not the
    caller's: a session made before a ``request(...)`` block never sees it in most hooks, and one made inside
    keeps it for its later turns. So the guard reads the request ``Guard.run`` was called in, by session."""
    guard = _guard(MemoryStore(), module="unnamed")
    agent = agent_for(ScriptedModel(small_model), guard())
    async with await agent.create_session() as early:
        with request(conversation_id="chat-1", turn_id="turn-1"):
            await guard.run(early, "Where is FR-7731?")
    with request(conversation_id="chat-2", turn_id="turn-2"):
        later = await agent.create_session()
        await guard.run(later, "Where is FR-7731?")
    async with later:
        await guard.run(later, "And now?")  # outside any block: rc11's own session and turn ids
        own = await read_state(later, guard=guard)
        turns = later.state.turns

    for conversation, turn in (("chat-1", "turn-1"), ("chat-2", "turn-2")):
        state = await read_state(conversation, guard=guard)
        assert state is not None and state.turn.id == turn and list(state.turn.counts.values()) == [1]
    assert await read_state(early, guard=guard) is None, "nothing counted under the early session's own id"
    assert own is not None and turns is not None and own.turn.id == turns.items[-1].id
    assert list(own.turn.counts.values()) == [1] and len(carrier.calls) == 3


# -- fail: a store that raises StoreUnavailable --------------------------------------------------------------


class DownStore(MemoryStore):
    """A shared store that cannot be reached."""

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        raise StoreUnavailable("redis://cache:6379 timed out")

    async def load(self, key: str) -> GuardState | None:
        raise StoreUnavailable("redis://cache:6379 timed out")


async def test_fail_closed_refuses_the_call_and_the_model_reads_why(carrier: Any, agent_for: Any) -> None:
    guard = _guard(DownStore(), module="closed_app", policy=Policy(match="tool", max_calls=2, max_refusals=None))
    guard.fail = "closed"  # a setting written later rebuilds the class's core
    model = ScriptedModel.replies(ToolUse("track_parcel", FR), "I could not check.")
    async with await agent_for(model, guard()).create_session() as session:
        result = await run_turn(session, "Where is FR-7731?")

    assert guard.core.fail == "closed"
    assert carrier.calls == [] and tool_messages(model.requests[-1]) == [STORE_DOWN_REFUSAL]
    assert result.text == "I could not check."


async def test_fail_closed_ends_the_turn_and_run_returns_the_store_down_stop(carrier: Any, agent_for: Any) -> None:
    guard = _guard(DownStore(), module="closed_turn_app", fail="closed")
    result, stop = await guard.run(agent_for(ScriptedModel(small_model), guard()), "Where is FR-7731?")

    assert carrier.calls == []
    assert stop is not None and (stop.reason, stop.message) == (StopReason.STORE_UNAVAILABLE, STORE_DOWN_STOP)
    assert result.text == STORE_DOWN_STOP


async def test_fail_open_lets_the_call_run_and_run_returns_no_stop(carrier: Any, agent_for: Any) -> None:
    guard = _guard(DownStore(), module="open_app")
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "In transit.")
    result, stop = await guard.run(agent_for(model, guard()), "Where is FR-7731?")

    assert guard.core.fail == "open" and len(carrier.calls) == 3, "unguarded, but running"
    assert (result.text, stop) == ("In transit.", None)


# -- on_stop, is_failure, clock --------------------------------------------------------------------------


async def test_on_stop_raise_raises_out_of_run_and_a_plain_turn_ends_as_with_reply(
    carrier: Any, agent_for: Any
) -> None:
    guard = _guard(MemoryStore(), module="raising_app", on_stop="raise")
    agent = agent_for(ScriptedModel.keep_calling("track_parcel", FR), guard())
    with pytest.raises(RepeatGuardStopped, match=r"stopped the run \(ignored_refusals\): I stopped") as raised:
        await guard.run(agent, "Keep checking FR-7731.")
    assert raised.value.stop.reason is StopReason.IGNORED_REFUSALS
    assert await stop_of(raised.value) == raised.value.stop  # what the caller caught: no guard needed

    async with await agent.create_session() as session:
        result = await run_turn(session, "Keep checking FR-7731.")
        stop = await stop_of(session, guard=guard)
    assert result.text == "" and stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


@agents.tool
def flaky_scan(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan; the carrier answers errors as data."""
    return {"tracking_number": tracking_number, "error": "carrier unreachable"}


async def test_is_failure_reads_what_the_model_reads(agent_for: Any) -> None:
    guard = _guard(
        MemoryStore(),
        module="failing_app",
        policy=Policy(max_errors_in_a_row=2),
        is_failure=lambda view: isinstance(view, dict) and "error" in view,
    )
    model = ScriptedModel(lambda request: ToolUse("flaky_scan", {"tracking_number": f"FR-{len(model.requests)}"}))
    result, stop = await guard.run(agent_for(model, guard(), tools=[flaky_scan]), "Scan every parcel.")

    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert len(model.requests) == 2 and result.text == stop.message


def test_a_clock_is_refused_with_the_sdk_fact() -> None:
    with pytest.raises(GuardSetupError, match=r"Timed cannot time model calls \(rc11 records no model latency"):

        class Timed(RepeatGuardHook):
            clock = time.monotonic


def test_a_misspelt_choice_or_a_misplaced_setting_says_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"on_stop=\.\.\.\) is 'reply' or 'raise', not 'rasie'.*class body of Loud"):

        class Loud(RepeatGuardHook):
            on_stop = "rasie"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"fail=\.\.\.\) is 'open' or 'closed', not 'close'"):

        class Shut(RepeatGuardHook):
            fail = "close"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"is_failure cannot be set on a hook object.*is_failure = "):
        RepeatGuardHook(is_failure=bool)
    with pytest.raises(TypeError, match=r"did you mean check_tools = False"):

        class Unchecked(RepeatGuardHook):
            check_tool = False


async def test_check_tools_false_leaves_the_names_unchecked(carrier: Any, agent_for: Any) -> None:
    guard = _guard(MemoryStore(), module="later_tools", policy=Policy(limits={"track_parcels": 1}), check_tools=False)
    result, _ = await guard.run(agent_for(ScriptedModel.replies("Nothing to do."), guard()), "Hello")
    assert result.text == "Nothing to do."


# -- stop_of's shapes ---------------------------------------------------------------------------------------


async def test_stop_of_reads_a_session_a_result_with_its_session_or_a_session_id(carrier: Any, agent_for: Any) -> None:
    guard = _guard(MemoryStore(), module="readers")
    model = ScriptedModel(small_model)
    async with await agent_for(model, guard()).create_session() as session:
        stopped = await run_turn(session, "Keep checking FR-7731.")
        answered = await run_turn(session, "Check FR-7731 once more.")

        assert await stop_of(session, guard=guard) is None, "the latest turn: answered"
        stop = await stop_of(stopped, guard=guard, session=session)
        assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
        assert await stop_of(answered, guard=guard, session=session) is None
        assert await stop_of(session.session_id, guard=guard) is None
        assert [event.kind for event in await events_of(session, guard=guard)] == ["refusal"] * 3 + ["stop"]
        with pytest.raises(TypeError, match=r"needs the guard class: await stop_of\(session, guard=ParcelGuard\)"):
            await stop_of(session)
        with pytest.raises(TypeError, match=r"needs the result's session"):
            await stop_of(stopped, guard=guard)


# -- the 0.2 spellings: a DeprecationWarning naming the new one, and they still work ---------------------------


async def test_the_0_2_spellings_warn_and_still_work(carrier: Any, agent_for: Any) -> None:
    with pytest.deprecated_call(match=r'Closed.fail_closed is deprecated: use fail = "closed"'):

        class Closed(RepeatGuardHook):
            policy = Policy(match="tool", max_calls=2, max_refusals=3)
            store = DownStore()
            fail_closed = True

    assert Closed.core.fail == "closed"
    async with await agent_for(ScriptedModel(small_model), Closed()).create_session() as session:
        await run_turn(session, "Where is FR-7731?")
        with pytest.deprecated_call(match=r"stop_of\(Guard, session_id\) is deprecated: use await stop_of\(session"):
            stop = await stop_of(Closed, session.session_id)  # type: ignore[arg-type]
        with pytest.deprecated_call(match=r"use await stop_of\(session, guard=Guard\)"):  # 0.2's keywords
            assert await stop_of(Closed, session_id=session.session_id) == stop  # type: ignore[arg-type]
        with pytest.deprecated_call(match=r"use await stop_of\(session, guard=Guard\)"):
            assert await stop_of(guard=Closed, session_id=session.session_id) == stop
        with pytest.raises(GuardSetupError, match=r"stop_of takes a session .*, or a RepeatGuardStopped; got NoneType"):
            await stop_of(None, guard=Closed)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE

    import repeat_hooks_mistral

    with pytest.raises(AttributeError, match=r"StoreDownStop is gone: .*stop\.reason == StopReason\.STORE_UNAVAILABLE"):
        repeat_hooks_mistral.StoreDownStop  # noqa: B018  # 0.2's isinstance(stop, StoreDownStop) would match any stop
    with pytest.deprecated_call(match=r"STORE_DOWN_STOP is deprecated: use repeat_hooks.messages.STORE_DOWN_STOP"):
        from repeat_hooks_mistral import STORE_DOWN_STOP as old

    assert old == STORE_DOWN_STOP
    with pytest.deprecated_call(match=r"MemoryStore is deprecated: use repeat_hooks.MemoryStore"):
        assert repeat_hooks_mistral.MemoryStore is MemoryStore
