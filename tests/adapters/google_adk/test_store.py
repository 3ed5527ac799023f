"""``store=``: the counts in a ``StateStore`` under ``<app>/<user>/<session id>``, so that Runners that share the
store (processes, hosts) share a conversation's counts; the turn named by ADK's invocation id or the caller's
``repeat_hooks.kit.request``; ``fail=`` when the store is down; ``on_stop="raise"``; misspelt keywords; the old
spellings, which still work with a warning."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import repeat_hooks_google_adk
from google.adk.agents import LlmAgent
from google.genai import types
from repeat_hooks_google_adk import (
    STATE_KEY,
    GuardSetupError,
    Policy,
    RepeatGuardPlugin,
    RepeatGuardStopped,
    StopReason,
    stop_of,
)
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call, keep_calling, text

from repeat_hooks import GuardState, MemoryStore, StoreUnavailable
from repeat_hooks.kit import request
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import APP, ARGS, STOPPED, USER, Carrier, Turn, new_session, run_turn, runner_for

T = TypeVar("T")
SEED_004 = Policy(match="tool", max_calls=2, max_refusals=3)


class FlakyStore(MemoryStore):
    """A ``MemoryStore`` that answers its first ``good`` updates, then is down."""

    def __init__(self, good: int) -> None:
        super().__init__()
        self.good = good

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        if self.good <= 0:
            raise StoreUnavailable("the store is down")
        self.good -= 1
        return await super().update(key, change)


def tracker(carrier: Carrier, model: ScriptedLlm) -> LlmAgent:
    return LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool])


async def run_invocation(runner: Any, session_id: str, invocation_id: str) -> Turn:
    message = types.Content(role="user", parts=[types.Part(text="Keep checking FR-7731")])
    events = runner.run_async(user_id=USER, session_id=session_id, new_message=message, invocation_id=invocation_id)
    return Turn([event async for event in events])


async def test_the_counts_live_in_the_store_under_the_sessions_key(carrier: Carrier) -> None:
    store = MemoryStore()
    runner = runner_for(
        tracker(carrier, ScriptedLlm(then=keep_calling("track_parcel", ARGS))), RepeatGuardPlugin(SEED_004, store=store)
    )
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 2 and turn.final_text == STOPPED
    state = await store.load(f"{APP}/{USER}/{session_id}")
    assert state is not None and state.turn.id == turn.invocation_id and state.turn.refusals == 3
    session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None and not any(key.startswith(STATE_KEY) for key in session.state)
    stop = stop_of(turn.final)  # the final event carries the whole Stop: no session state needed
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED


async def test_two_guards_on_one_sqlite_store_share_a_conversations_counts(tmp_path: Path) -> None:
    carrier = Carrier()
    first = ScriptedLlm([function_call("track_parcel", ARGS, "a1")], [text("In transit.")])
    second = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runners = [
        runner_for(tracker(carrier, model), RepeatGuardPlugin(SEED_004, store=SQLiteStore(tmp_path / "guard.db")))
        for model in (first, second)
    ]
    for runner in runners:  # two hosts, each with its own session service: the same session id
        await runner.session_service.create_session(app_name=APP, user_id=USER, session_id="s-1")

    answered = await run_invocation(runners[0], "s-1", "request-7")
    retried = await run_invocation(runners[1], "s-1", "request-7")  # the same invocation id: the same turn

    assert answered.final_text == "In transit."
    # The second host goes on counting the turn: its first lookup is the 2nd, then 3 refusals and the stop.
    assert carrier.calls == ["FR-7731"] * 2
    assert second.calls == 4 and retried.final_text == STOPPED
    state = await SQLiteStore(tmp_path / "guard.db").load(f"{APP}/{USER}/s-1")
    assert state is not None and state.turn.id == "request-7" and state.turn.number == 1


async def test_a_callers_request_names_the_conversation_and_the_turn(carrier: Carrier) -> None:
    store = MemoryStore()
    model = ScriptedLlm(
        [function_call("track_parcel", ARGS, "a1")], [text("In transit.")], then=keep_calling("track_parcel", ARGS)
    )
    runner = runner_for(tracker(carrier, model), RepeatGuardPlugin(SEED_004, store=store))

    with request(conversation_id="conv-9", turn_id="req-1"):
        await run_turn(runner, await new_session(runner), "Keep checking FR-7731")
        retried = await run_turn(runner, await new_session(runner), "Keep checking FR-7731")  # another session

    assert carrier.calls == ["FR-7731"] * 2 and retried.final_text == STOPPED
    state = await store.load(f"{APP}/{USER}/conv-9")
    assert state is not None and state.turn.id == "req-1" and state.turn.number == 1


@pytest.mark.parametrize("fail", ["closed", "open"])
async def test_a_store_that_is_down_refuses_the_call_or_lets_it_run(carrier: Carrier, fail: str) -> None:
    model = ScriptedLlm([function_call("track_parcel", ARGS, "c1")], [text("It is in Lyon.")])
    store = FlakyStore(good=1)  # the first model call's update goes through; the response's decisions do not
    runner = runner_for(tracker(carrier, model), RepeatGuardPlugin(SEED_004, store=store, fail=fail))  # type: ignore[arg-type]

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    if fail == "closed":
        assert carrier.calls == []
        assert turn.tool_responses == [{"error": STORE_DOWN_REFUSAL}]  # the call's answer, as the model reads it
        assert model.calls == 1 and turn.final_text == STORE_DOWN_STOP  # the next model call cannot be counted
        stop = stop_of(turn.final)
        assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE
    else:
        assert carrier.calls == ["FR-7731"]
        assert model.calls == 2 and turn.final_text == "It is in Lyon."


@pytest.mark.parametrize("store", [None, MemoryStore()], ids=["session_state", "store"])
async def test_on_stop_raise_raises_out_of_run_async(carrier: Carrier, store: MemoryStore | None) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(tracker(carrier, model), RepeatGuardPlugin(SEED_004, store=store, on_stop="raise"))

    with pytest.raises(RuntimeError, match="Error in plugin 'repeat_hooks' during 'before_model_callback'") as raised:
        await run_turn(runner, await new_session(runner), "Keep checking FR-7731")

    # ADK wraps what a plugin raises in a RuntimeError; the guard's error is its cause, and stop_of reads it.
    assert isinstance(raised.value.__cause__, RepeatGuardStopped)
    stop = stop_of(raised.value)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5


def test_misspelt_and_misplaced_keywords_say_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"RepeatGuardPlugin\(on_stop=\.\.\.\) is 'reply' or 'raise', not 'rasie'"):
        RepeatGuardPlugin(on_stop="rasie")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RepeatGuardPlugin\(fail=\.\.\.\) is 'open' or 'closed', not 'close'"):
        RepeatGuardPlugin(fail="close")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"store=\.\.\.\) takes a repeat_hooks StateStore .*not dict"):
        RepeatGuardPlugin(store={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"takes a repeat_hooks\.Policy, not MemoryStore"):
        RepeatGuardPlugin(MemoryStore())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unexpected keyword 'stor': did you mean store=\.\.\.\?"):
        RepeatGuardPlugin(stor=MemoryStore())
    with pytest.raises(TypeError, match=r"unexpected keyword 'state_ky': did you mean state_key=\.\.\.\?"):
        RepeatGuardPlugin(state_ky="repeat_hooks:mine")


async def test_the_old_stop_of_spelling_warns_and_still_works(carrier: Carrier) -> None:
    runner = runner_for(tracker(carrier, ScriptedLlm(then=keep_calling("track_parcel", ARGS))), RepeatGuardPlugin())
    session_id = await new_session(runner)
    turn = await run_turn(runner, session_id, "Keep checking FR-7731")
    session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None

    with pytest.warns(DeprecationWarning, match=r"use stop_of\(session, invocation_id=\.\.\.\)"):
        stop = stop_of(session, turn.invocation_id)

    assert stop is not None and stop == stop_of(turn.final)
    # 0.2's state key, positional or keyword, and its session= keyword: the stop is read from the events
    with pytest.warns(DeprecationWarning, match=r"use stop_of\(session, invocation_id=\.\.\.\) \(the stop is read"):
        assert stop_of(session, turn.invocation_id, STATE_KEY) == stop
    with pytest.warns(DeprecationWarning, match=r"whatever the state key"):
        assert stop_of(session, turn.invocation_id, key="repeat_hooks:other") == stop
    with pytest.warns(DeprecationWarning, match=r"use stop_of\(session, invocation_id=\.\.\.\)"):
        assert stop_of(session=session, invocation_id=turn.invocation_id) == stop
    with pytest.raises(TypeError, match=r"takes one positional argument"):
        stop_of(session, turn.invocation_id, STATE_KEY, "more")
    assert stop_of(collections.deque(session.events)) == stop  # any sequence of events
    with pytest.raises(GuardSetupError, match=r"stop_of takes what run_async handed you .*; got str"):
        stop_of(turn.final_text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "model_view",
        "tool_call",
        "read_only_hint",
        "Refused",
        "read_events",
        "write_state",
        "Scope",
        "stop_response",
        "FailureCheck",
    ],
)
def test_names_moved_out_of_the_front_door_warn_and_still_work(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"repeat_hooks_google_adk\.{name} is deprecated: use "):
        moved = getattr(repeat_hooks_google_adk, name)

    assert callable(moved) or moved is not None


async def test_an_agent_used_as_a_tool_counts_in_the_callers_conversation_in_the_store(carrier: Carrier) -> None:
    from google.adk.tools.agent_tool import AgentTool

    store = MemoryStore()
    tracker_model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    nested = LlmAgent(name="parcel_tracker", model=tracker_model, tools=[carrier.tool])
    desk_model = ScriptedLlm(
        [function_call("track_parcel", ARGS, "d1")],
        [function_call("parcel_tracker", {"request": "Keep checking FR-7731"}, "d2")],
        then=keep_calling("track_parcel", ARGS),
    )
    desk = LlmAgent(name="front_desk", model=desk_model, tools=[carrier.tool, AgentTool(nested)])
    runner = runner_for(desk, RepeatGuardPlugin(SEED_004, store=store))
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking FR-7731")

    # The nested run has a session of its own, but counts under the caller's key, in the caller's turn.
    assert carrier.calls == ["FR-7731"] * 2 and tracker_model.calls == 4
    assert desk_model.calls == 2 and turn.final_text == STOPPED
    state = await store.load(f"{APP}/{USER}/{session_id}")
    assert state is not None and state.turn.id == turn.invocation_id and state.turn.responses == 2 + 4
