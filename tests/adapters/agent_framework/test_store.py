"""``store=``, ``fail=``, ``on_stop="raise"`` and ``is_failure`` on Agent Framework's real loop: the counts live in a
``StateStore`` under the conversation (the session's ``session_id``, or ``repeat_hooks.kit.request``) and the agent's
name, a retried request names its turn (``request(turn_id=...)``), and the setups that cannot work fail loudly."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, AgentSession, tool
from repeat_hooks_agent_framework import GuardSetupError, RepeatGuardMiddleware, RepeatGuardStopped, read_state, stop_of
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, keep_calling, tool_results

from repeat_hooks import StopReason, StoreUnavailable
from repeat_hooks.kit import request
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stores import MemoryStore
from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, REFUSAL, SEED_004, STOPPED, Carrier, client_of, looping_agent

TRACK = [function_call("track_parcel", ARGS)]


async def test_the_counts_live_in_the_store_under_the_session_and_the_agent(carrier: Carrier) -> None:
    store = MemoryStore()
    agent = looping_agent(carrier, RepeatGuardMiddleware(SEED_004, store=store), name="parcels")
    session = agent.create_session(session_id="conv-1")

    response = await agent.run("Keep checking FR-7731", session=session)

    assert carrier.calls == ["FR-7731"] * 2 and client_of(agent).calls == 5
    assert (stop := stop_of(response)) is not None and stop.message == STOPPED
    state = await store.load("repeat_hooks:conv-1/parcels")
    assert state is not None and state.turn.refusals == 3 and state.turn.stop == stop
    assert session.state["repeat_hooks:parcels"] == {"in_store": "repeat_hooks:conv-1/parcels"}  # only where it is


async def test_stop_of_a_session_whose_state_is_in_the_store_says_where_to_read_it(carrier: Carrier) -> None:
    """With ``store=`` the session holds no state: reading the stop from it raises, saying where to read it, instead
    of answering ``None`` (no stop) after a stop; what the run returned carries the stop."""
    store = MemoryStore()
    agent = looping_agent(carrier, RepeatGuardMiddleware(SEED_004, store=store), name="parcels")
    session = agent.create_session(session_id="conv-1")

    response = await agent.run("Keep checking FR-7731", session=session)

    assert (stop := stop_of(response)) is not None and stop.reason is StopReason.IGNORED_REFUSALS
    said = r"keeps its state in its store=.*stop_of\(response\).*store\.load\('repeat_hooks:conv-1/parcels'\)"
    with pytest.raises(GuardSetupError, match=said):
        stop_of(session)
    with pytest.raises(GuardSetupError, match=said):
        read_state(session)
    state = await store.load("repeat_hooks:conv-1/parcels")
    assert state is not None and state.stop_of() == stop

    restored = AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))  # the mark travels with it
    with pytest.raises(GuardSetupError, match=said):
        stop_of(restored)
    plain = looping_agent(carrier, RepeatGuardMiddleware(SEED_004), name="parcels")  # the guard without its store
    assert stop_of(await plain.run("Again", session=restored)) is not None  # the mark reads as no state yet


async def test_two_guards_on_one_sqlite_store_share_a_retried_requests_turn(carrier: Carrier, tmp_path: Path) -> None:
    """Two processes' worth of guards (two stores on one file), no sessions: the caller names the conversation and
    the request it may retry."""
    path = tmp_path / "states.db"

    def agent(client: ScriptedClient) -> Agent[Any]:
        return Agent(
            client=client, tools=[carrier.tool], middleware=[RepeatGuardMiddleware(SEED_004, store=SQLiteStore(path))]
        )

    with request(conversation_id="customer-42", turn_id="request-1"):
        await agent(ScriptedClient(TRACK, "In transit.")).run("Keep checking FR-7731")
        retried = await agent(ScriptedClient(then=keep_calling("track_parcel", ARGS))).run("Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 2  # the retry's 1st call was the turn's 2nd: the next 3 were refused
    assert tool_results(retried)[1:] == [REFUSAL] * 3 and retried.text == STOPPED
    state = await SQLiteStore(path).load("repeat_hooks:customer-42")  # an agent with no name: the conversation
    assert state is not None and state.turn.id == "request-1" and state.turn.number == 1

    with request(conversation_id="customer-42", turn_id="request-2"):
        await agent(ScriptedClient(then=keep_calling("track_parcel", ARGS))).run("Keep checking FR-7731")
    assert len(carrier.calls) == 4  # a new request is a new turn: 2 more


async def test_a_batchs_decisions_are_in_the_store_before_its_tools_run() -> None:
    store = MemoryStore()
    seen: list[int] = []

    @tool
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        state = await store.load("repeat_hooks:conv-1")
        seen.append(state.turn.responses if state is not None else -1)
        return "in transit"

    agent = Agent(
        client=ScriptedClient(TRACK + TRACK, "Done."),
        tools=[track_parcel],
        middleware=[RepeatGuardMiddleware(store=store)],
    )
    with request(conversation_id="conv-1"):
        await agent.run("Where is FR-7731?")

    assert seen == [1, 1]  # both runs saw the response's decisions already committed


async def test_a_store_with_nothing_naming_the_conversation_fails_at_the_run(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardMiddleware(store=MemoryStore()))

    with pytest.raises(GuardSetupError, match=r"session=agent\.create_session\(\).*request\(conversation_id=\.\.\.\)"):
        await agent.run("Where is FR-7731?")
    assert client_of(agent).calls == 0 and carrier.calls == []


class DownStore(MemoryStore):
    """A store that goes down when ``down`` is set (as a Redis server that stops answering)."""

    down = False

    async def update(self, key: str, change: Any) -> Any:
        if self.down:
            raise StoreUnavailable("redis://10.0.0.1:6379: connection refused")
        return await super().update(key, change)


@pytest.mark.parametrize("fail", ["closed", "open"])
async def test_a_store_that_goes_down_fails_as_fail_says(carrier: Carrier, fail: str) -> None:
    store = DownStore()

    def track_then_down(client: ScriptedClient, messages: Any) -> list[Any]:
        store.down = True  # the store goes down between the model call and the tools
        return TRACK

    agent = Agent(
        client=ScriptedClient(track_then_down, "In transit."),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(store=store, fail=fail)],  # type: ignore[arg-type]
    )
    with request(conversation_id="conv-1"):
        response = await agent.run("Where is FR-7731?")

    if fail == "closed":  # the tool does not run, the model reads why, and the run ends
        assert carrier.calls == [] and tool_results(response) == [STORE_DOWN_REFUSAL]
        assert (stop := stop_of(response)) is not None and stop.reason is StopReason.STORE_UNAVAILABLE
        assert response.text == STORE_DOWN_STOP and client_of(agent).calls == 1
    else:  # the call runs and the run goes on
        assert carrier.calls == ["FR-7731"] and response.text == "In transit." and stop_of(response) is None


async def test_on_stop_raise_raises_out_of_the_run(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardMiddleware(SEED_004, on_stop="raise"))
    session = agent.create_session()

    with pytest.raises(RepeatGuardStopped) as raised:
        await agent.run("Keep checking FR-7731", session=session)

    stop = raised.value.stop
    assert stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED and stop_of(raised.value) == stop
    assert stop_of(session) == stop and carrier.calls == ["FR-7731"] * 2 and client_of(agent).calls == 5
    assert pickle.loads(pickle.dumps(raised.value)).stop == stop

    with pytest.raises(RepeatGuardStopped):
        async for _ in looping_agent(carrier, RepeatGuardMiddleware(SEED_004, on_stop="raise")).run("Go", stream=True):
            pass


async def test_is_failure_reads_what_the_model_reads() -> None:
    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now (a carrier that reports its errors as text)."""
        return f"{tracking_number}: carrier timeout, try later"

    def agent(**options: Any) -> Agent[Any]:
        numbers = iter(range(100))
        return Agent(
            client=ScriptedClient(
                then=lambda c, m: [function_call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})]
            ),
            tools=[track_parcel],
            middleware=[RepeatGuardMiddleware(max_errors_in_a_row=2, max_model_calls=6, **options)],
        )

    failing = agent(is_failure=lambda view: "timeout" in str(view))
    stop = stop_of(await failing.run("Where are my parcels?"))
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and client_of(failing).calls == 2

    unchecked = agent()
    stop = stop_of(await unchecked.run("Where are my parcels?"))
    assert stop is not None and stop.reason is StopReason.MAX_STEPS  # the SDK says success
