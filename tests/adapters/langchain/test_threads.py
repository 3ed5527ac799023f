"""One compiled agent serves many threads: each thread's counts are its own, also concurrently."""

from __future__ import annotations

import asyncio

from langchain_parcels import ARGS, STOPPED, USER, Carrier, parcel_agent, seed_004, thread
from repeat_hooks_langchain import RepeatGuardMiddleware, guard_state_of
from repeat_hooks_langchain.testing import ScriptedChatModel, keep_calling


async def test_concurrent_threads_on_one_agent_are_kept_apart(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)

    results = await asyncio.gather(*(agent.ainvoke(USER, thread(f"t{n}")) for n in range(4)))

    assert [r["messages"][-1].content for r in results] == [STOPPED] * 4
    assert len(carrier.calls) == 8  # 2 per thread, none refused because of another thread's calls
    assert model.calls == 20
    for result in results:
        state = guard_state_of(result)
        assert (state.turn.number, state.turn.refusals, state.turn.model_calls) == (1, 3, 5)


def test_a_thread_stopped_by_the_guard_does_not_affect_a_new_thread(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = parcel_agent(model, carrier)

    agent.invoke(USER, thread("busy"))
    assert len(carrier.calls) == 2
    agent.invoke(USER, thread("fresh"))
    assert len(carrier.calls) == 4  # the fresh thread's first two calls ran


def test_the_middleware_object_is_unchanged_by_serving_threads(carrier: Carrier) -> None:
    guard = RepeatGuardMiddleware(seed_004())
    before = dict(vars(guard))
    agent = parcel_agent(ScriptedChatModel(then=keep_calling("track_parcel", ARGS)), carrier, middleware=[guard])

    agent.invoke(USER, thread("a"))
    agent.invoke(USER, thread("b"))

    assert vars(guard) == before  # settings only: the counts are in each thread's checkpoint
