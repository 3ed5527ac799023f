"""What the guard keeps in the run's ``Context`` against someone reading it, and what it does with input it did not
choose: with ``Policy(digest_key=...)`` the saved ``Context`` holds no digest of an argument one can test guesses
against (the batch's calls are named by the core's keyed ``call_key``, and dropped once settled); arguments no JSON
can hold (an object whose ``__str__`` raises, a cycle, mixed key types) are guarded like any other; and a value of
the user's under ``ctx.store["repeat_hooks"]`` is an outage, ``fail`` deciding, never a traceback."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow import Context
from repeat_hooks_llama_index import STATE_KEY, Policy, RepeatGuard, StopReason, read_state, stop_of
from repeat_hooks_llama_index.testing import Script, call, keep_calling, tool_results

from repeat_hooks import StateCorrupt
from repeat_hooks.call import call_key

from .conftest import ARGS, SEED_004, Carrier, looping_agent


@pytest.mark.filterwarnings("ignore:Skipping serialization of known unserializable key")
async def test_with_a_digest_key_no_pin_can_be_recovered_from_the_saved_context() -> None:
    seen: list[str] = []  # the guard's part of the Context, as saved while the call runs (a paused run's)

    async def check_pin(pin: str) -> str:
        """Checks a PIN."""
        seen.append(json.dumps(handler.ctx.to_dict()))
        return "wrong PIN"

    script = Script([call("check_pin", {"pin": "4821"})], "The PIN is wrong.")
    guard = RepeatGuard(Policy(digest_key=secrets.token_bytes(32)))
    agent = guard.agent(FunctionAgent(llm=script.llm(), tools=[check_pin], streaming=False))
    ctx = Context(agent)

    handler = agent.run(user_msg="Is 4821 my PIN?", ctx=ctx)
    await handler

    (during,) = seen
    assert '\\"batch\\": {\\"Agent\\": [[\\"check_pin\\"' in during  # the running call's entry is there
    for n in range(10_000):  # every 4-digit PIN, under the core's unkeyed key and the old digest
        pin = {"pin": f"{n:04d}"}
        old = hashlib.blake2b(json.dumps(pin, sort_keys=True).encode(), digest_size=12).hexdigest()
        assert call_key("check_pin", pin) not in during and old not in during
    after = json.loads(json.loads(json.dumps(ctx.to_dict()))["state"]["state_data"]["_data"][STATE_KEY])
    assert after["batch"] == {}  # settled: no entry is kept


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    __repr__ = __str__


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    "argument",
    [Unprintable(), _cycle(), {1: "a", "b": 2}],
    ids=["str-raises", "cycle", "mixed-keys"],
)
async def test_hostile_arguments_are_guarded_like_any_other(argument: object) -> None:
    ran: list[object] = []

    async def lookup(q: str) -> str:
        """Looks it up."""
        ran.append(q)
        return "nothing new"

    script = Script(then=keep_calling("lookup", {"q": argument}))
    agent = RepeatGuard(SEED_004).agent(FunctionAgent(llm=script.llm(), tools=[lookup], streaming=False))
    ctx = Context(agent)

    output = await agent.run(user_msg="Look it up", ctx=ctx)

    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS  # the run ended as the guard said
    assert len(ran) == 2 and script.calls == 5
    assert [text.startswith("Refused") for text in await tool_results(ctx)] == [False] * 2 + [True] * 3


FOREIGN = ["garbage", [1, 2], {"agents": []}, {"batch": "x"}, {"batch": {"parcel_tracker": [["x"]]}}, {"turn": 5}]


@pytest.mark.parametrize("value", FOREIGN, ids=repr)
async def test_a_foreign_value_with_fail_closed_ends_the_run_before_any_call(
    carrier: Carrier, value: object, caplog: pytest.LogCaptureFixture
) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(SEED_004, fail="closed"))
    ctx = Context(agent)
    await ctx.store.set(STATE_KEY, value)

    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        output = await agent.run(user_msg="Where is FR-7731?", ctx=ctx)

    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE
    assert script.calls == 0 and carrier.calls == []
    assert "ctx.store['repeat_hooks']" in caplog.text and "StateCorrupt" in caplog.text
    assert await ctx.store.get(STATE_KEY) == value  # the user's value is left as it is
    with pytest.raises(StateCorrupt, match=r"ctx\.store\['repeat_hooks'\] holds a"):
        await read_state(ctx, "parcel_tracker")


@pytest.mark.parametrize("value", FOREIGN[:2], ids=repr)
async def test_a_foreign_value_with_fail_open_lets_the_run_go_on_unguarded(
    carrier: Carrier, value: object, caplog: pytest.LogCaptureFixture
) -> None:
    track = [call("track_parcel", ARGS)]
    script = Script(track, track, track, "In transit.")
    guard = RepeatGuard(SEED_004)  # fail="open"
    agent = guard.agent(FunctionAgent(name="parcel_tracker", llm=script.llm(), tools=[carrier.tool], streaming=False))
    ctx = Context(agent)
    await ctx.store.set(STATE_KEY, value)

    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        output = await agent.run(user_msg="Where is FR-7731?", ctx=ctx)

    assert output.response.content == "In transit." and stop_of(output) is None
    assert carrier.calls == ["FR-7731"] * 3  # no state to count in: the 3rd is not refused
    assert "ctx.store['repeat_hooks']" in caplog.text and "failing open" in caplog.text
