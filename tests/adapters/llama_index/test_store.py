"""``store=``: the states in a shared ``StateStore`` (here a ``SQLiteStore``) under ``<conversation>/<agent>``,
the conversation named by ``repeat_hooks.kit.request(conversation_id=...)``; a retried request (the same
``turn_id``) continues its turn and its counts, in any process sharing the store."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.workflow import Context
from repeat_hooks_llama_index import STATE_KEY, RepeatGuard, StopReason, stop_of

from repeat_hooks.kit import request
from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import SEED_004, STOPPED, Carrier, looping_agent


async def test_conversations_keep_apart_in_the_store_and_nothing_in_the_context(
    carrier: Carrier, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "guard.db")
    agent, script = looping_agent(carrier, RepeatGuard(SEED_004, store=store))

    ctx = Context(agent)
    with request(conversation_id="chat-1"):
        first = await agent.run(user_msg="Keep checking FR-7731", ctx=ctx)
    with request(conversation_id="chat-2"):
        second = await agent.run(user_msg="Keep checking FR-7731")

    assert first.response.content == second.response.content == STOPPED
    assert carrier.calls == ["FR-7731"] * 4 and script.calls == 10  # each conversation ran its own 2
    one, two = await store.load("chat-1/parcel_tracker"), await store.load("chat-2/parcel_tracker")
    assert one is not None and two is not None and one.turn.refusals == two.turn.refusals == 3
    stop = stop_of(first)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert (await ctx.store.get(STATE_KEY)).get("agents") is None  # the states are the store's only


async def test_a_retried_request_continues_its_turn(carrier: Carrier, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "guard.db")
    agent, _ = looping_agent(carrier, RepeatGuard(SEED_004, store=store))
    with request(conversation_id="chat-1", turn_id="request-7"):
        await agent.run(user_msg="Keep checking FR-7731")
    fresh, fresh_script = looping_agent(carrier, RepeatGuard(SEED_004, store=store))  # another process, say

    with request(conversation_id="chat-1", turn_id="request-7"):
        output = await fresh.run(user_msg="Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 2  # the retry ran none: its turn had used both calls
    assert fresh_script.calls == 0 and output.response.content == STOPPED  # and had ended: no model call
    state = await store.load("chat-1/parcel_tracker")
    assert state is not None and state.turn.id == "request-7" and state.turn.number == 1
