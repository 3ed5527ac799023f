"""``guard_agent(..., store=...)``: the conversations' states in a store, on the real Runner loop.

With a store the run context holds no state: the conversation and the turn are named with
``repeat_hooks.kit.request(conversation_id=..., turn_id=...)`` (the SDK hands its hooks neither the session nor the
conversation id), the counts live under the conversation's id, two guards on one store share them, and a store
that cannot be reached fails open or closed as ``fail=`` says.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agents import Agent, Runner, function_tool
from repeat_hooks_openai_agents import (
    GuardSetupError,
    RepeatGuardStopped,
    StopReason,
    guard_agent,
    stop_of,
)
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import GuardState, MemoryStore, StoreUnavailable
from repeat_hooks.kit import request
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stores.sqlite import SQLiteStore

T = TypeVar("T")
ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."


class DownStore(MemoryStore):
    """A store whose every update fails, as a Redis or SQLite store does when it cannot be reached."""

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        raise StoreUnavailable("the store is down")


def tracker(model: ScriptedModel, carrier: Any, **options: Any) -> Agent[Any]:
    return guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **options)


async def test_the_counts_live_in_the_store_under_the_conversations_id(carrier: Any) -> None:
    store = MemoryStore()
    agent = tracker(ScriptedModel(then=keep_calling("track_parcel", ARGS)), carrier, store=store, **SEED_004)

    with request(conversation_id="chat-42"):
        result = await Runner.run(agent, "Keep checking FR-7731")  # no context: the state is the store's

    assert result.final_output == STOPPED and carrier.calls == ["FR-7731"] * 2
    assert stop_of(result) is not None and stop_of(result).reason is StopReason.IGNORED_REFUSALS  # type: ignore[union-attr]
    state = await store.load("chat-42/parcel-tracker")  # the conversation, and the agent guard_agent guarded
    assert state is not None and state.turn.id == "turn-1" and state.turn.refusals == 3
    assert state.turn.stop is not None and state.turn.stop.message == STOPPED

    with request(conversation_id="chat-42", turn_id="req-7"):  # a caller's turn id names the turn
        await Runner.run(agent, "And now?")
    state = await store.load("chat-42/parcel-tracker")
    assert state is not None and state.turn.id == "req-7" and state.turn.number == 2


async def test_two_guards_on_one_sqlite_store_share_a_conversations_counts(carrier: Any, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "states.db")
    first = tracker(
        ScriptedModel([tool_call("track_parcel", ARGS, "a1")], [message("In transit.")]), carrier, store=store
    )
    model = ScriptedModel([tool_call("track_parcel", ARGS, "b1")], [tool_call("track_parcel", ARGS, "b2")])
    second = tracker(model, carrier, store=store)  # another process's guard, say, serving the same request

    with request(conversation_id="chat-7", turn_id="req-1"):
        await Runner.run(first, "Where is FR-7731?")
        result = await Runner.run(second, "Where is FR-7731?")

    # The turn's 2nd identical call ran (max_calls=2), its 3rd was refused: both guards counted in one state.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model.outputs_received(2)["b2"].startswith(
        "Refused: you already called track_parcel with these exact arguments 2 times"
    )
    assert result.final_output == "Done."
    state = await store.load("chat-7/parcel-tracker")
    assert state is not None and state.turn.number == 1 and state.turn.refusals == 1


async def test_two_guarded_agents_serving_one_conversation_keep_their_counts_apart(
    carrier: Any, tmp_path: Path
) -> None:
    """A router's request: the tracker, then a billing agent with its own policy, one store, one conversation id.
    The billing agent must not answer with the tracker's stop."""
    store = SQLiteStore(tmp_path / "states.db")
    tracking = tracker(ScriptedModel(then=keep_calling("track_parcel", ARGS)), carrier, store=store, **SEED_004)
    refunds: list[str] = []

    @function_tool
    def refund(order: str) -> str:
        """Refund an order."""
        refunds.append(order)
        return f"refunded {order}"

    billing_model = ScriptedModel([tool_call("refund", {"order": "9"}, "r1")], [message("Refunded.")])
    billing = guard_agent(Agent(name="billing", model=billing_model, tools=[refund]), store=store, max_calls=1)
    with request(conversation_id="chat-1", turn_id="req-1"):
        stopped = await Runner.run(tracking, "Where is my parcel?")
        result = await Runner.run(billing, "Refund order 9")

    assert stop_of(stopped) is not None and stop_of(result) is None
    assert result.final_output == "Refunded." and refunds == ["9"]
    assert {await store.load("chat-1/parcel-tracker") is not None, await store.load("chat-1/billing") is not None} == {
        True
    }


async def test_a_store_that_is_down_fails_closed_the_tool_does_not_run(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = tracker(model, carrier, store=DownStore(), fail="closed")

    with request(conversation_id="chat-1"):
        result = await Runner.run(agent, "Where is FR-7731?")

    assert carrier.calls == []
    outputs = [item.raw_item["output"] for item in result.new_items if item.type == "tool_call_output_item"]
    assert outputs == [STORE_DOWN_REFUSAL]  # what the model reads of the refused call
    assert result.final_output == STORE_DOWN_STOP and model.calls == 1  # and the turn ends, no model call more
    assert stop_of(result) is not None and stop_of(result).reason is StopReason.STORE_UNAVAILABLE  # type: ignore[union-attr]


async def test_a_store_that_is_down_fails_open_the_tool_runs(carrier: Any) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In transit.")])
    agent = tracker(model, carrier, store=DownStore())  # fail="open", the default

    with request(conversation_id="chat-1"):
        result = await Runner.run(agent, "Where is FR-7731?")

    assert carrier.calls == ["FR-7731"] and result.final_output == "In transit." and stop_of(result) is None


async def test_on_stop_raise_with_a_store_raises_out_of_the_run(carrier: Any) -> None:
    agent = tracker(
        ScriptedModel(then=keep_calling("track_parcel", ARGS)),
        carrier,
        store=MemoryStore(),
        on_stop="raise",
        **SEED_004,
    )

    with request(conversation_id="chat-3"), pytest.raises(RepeatGuardStopped) as raised:
        await Runner.run(agent, "Keep checking")

    assert raised.value.stop.reason is StopReason.IGNORED_REFUSALS and stop_of(raised.value) == raised.value.stop


async def test_a_store_without_a_conversation_id_fails_before_the_model_is_called(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))

    with pytest.raises(GuardSetupError, match=r"store=.*names none.*repeat_hooks\.kit\.request\(conversation_id="):
        await Runner.run(tracker(model, carrier, store=MemoryStore()), "Track")
    assert model.calls == 0 and carrier.calls == []


def test_a_misspelt_or_misplaced_keyword_says_the_right_spelling(carrier: Any) -> None:
    agent = Agent(name="parcel-tracker", tools=[carrier.tool])

    with pytest.raises(TypeError, match=r"guard_agent\(fail=\.\.\.\) is 'open' or 'closed', not 'close'"):
        guard_agent(agent, fail="close")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"store=\.\.\.\) takes a repeat_hooks StateStore .* not dict"):
        guard_agent(agent, store={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'stores'.*did you mean store="):
        guard_agent(agent, stores=MemoryStore())
    with pytest.raises(TypeError, match=r"is_failure=\.\.\.\) takes a function"):
        guard_agent(agent, is_failure="ERROR")  # type: ignore[arg-type]
