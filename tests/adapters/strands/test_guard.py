"""The guard on Strands' real agent loop, as the caller and the model see it: refusals, stops, turns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from repeat_hooks_strands import STOP_KEY, GuardSetupError, RepeatGuardHooks, read_state, stop_of
from repeat_hooks_strands.testing import ScriptedModel, final_text, tool_results, tool_use
from strands import Agent, tool
from strands.hooks import AfterModelCallEvent, BeforeToolCallEvent, HookProvider, HookRegistry

from repeat_hooks import Policy, StopReason

from .conftest import ARGS, REFUSAL, SEED_004, STOPPED, Carrier, looping_agent, model_of


def test_seed_004_refuses_the_third_call_and_ends_the_turn_after_three_refusals(carrier: Carrier) -> None:
    agent = looping_agent(carrier)

    result = agent("Keep checking FR-7731 until it is delivered")

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model_of(agent).calls == 5  # 2 calls ran, 3 were refused, no 6th model call
    assert result.stop_reason == "end_turn"
    assert str(result).strip() == STOPPED
    assert result.message["role"] == "assistant" and result.message["content"] == [{"text": STOPPED}]
    assert result.state[STOP_KEY] == "ignored_refusals"
    stop = stop_of(agent)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    # The model read each refusal as the call's (error) result; the tool did not run.
    refused = [
        block["toolResult"]
        for message in agent.messages
        for block in message["content"]
        if "toolResult" in block and block["toolResult"]["status"] == "error"
    ]
    assert [r["content"] for r in refused] == [[{"text": REFUSAL}]] * 3


def test_a_new_turn_counts_afresh_and_its_stop_is_its_own(carrier: Carrier) -> None:
    agent = looping_agent(carrier)
    agent("Keep checking FR-7731")
    first = read_state(agent).turn.id

    result = agent("And now?")

    assert carrier.calls == ["FR-7731"] * 4
    assert str(result).strip() == STOPPED
    state = read_state(agent)
    assert state.turn.number == 2 and state.turn.id != first
    assert stop_of(agent, turn_id=first) == stop_of(agent)  # both turns stopped the same way
    with pytest.deprecated_call(match=r"use stop_of\(agent, turn_id=\.\.\.\)"):
        assert stop_of(agent, first) == stop_of(agent)  # type: ignore[arg-type]  # the 0.2 spelling
    with pytest.deprecated_call(match=r"stop_of\(agent=agent\) is deprecated: use stop_of\(agent"):
        assert stop_of(agent=agent) == stop_of(agent)  # 0.2's keyword
    with pytest.raises(GuardSetupError, match=r"stop_of takes what agent\(\.\.\.\) returned .*; got str"):
        stop_of(str(result))  # the reply's text is not what stop_of reads
    assert [e.turn_id for e in state.events if e.kind == "stop"] == [first, state.turn.id]


def test_the_plugin_form_guards_the_same_way(carrier: Carrier) -> None:
    agent = Agent(
        model=ScriptedModel(then=lambda model, messages: [tool_use("track_parcel", ARGS)]),
        tools=[carrier.tool],
        plugins=[RepeatGuardHooks(SEED_004)],
        callback_handler=None,
    )

    result = agent("Keep checking FR-7731")

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert str(result).strip() == STOPPED


def test_a_model_that_answers_ends_the_turn_normally(carrier: Carrier) -> None:
    agent = Agent(
        model=ScriptedModel([tool_use("track_parcel", ARGS)], "It is in transit."),
        tools=[carrier.tool],
        hooks=[RepeatGuardHooks()],
        callback_handler=None,
    )

    result = agent("Where is FR-7731?")

    assert str(result).strip() == "It is in transit."
    assert stop_of(agent) is None and STOP_KEY not in result.state
    assert read_state(agent).turn.model_calls == 0  # no budget set: model calls are not recorded


def test_a_stop_at_a_model_call_that_follows_no_tools_cancels_it(carrier: Carrier) -> None:
    """A hook that retries every model response (a validator): no tool batch ever ends, so the stop comes at
    the model call itself, through ``BeforeModelCallEvent.cancel``."""

    class AlwaysRetry(HookProvider):
        def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
            registry.add_callback(AfterModelCallEvent, self.retry)

        def retry(self, event: AfterModelCallEvent) -> None:
            if event.stop_response is not None and event.stop_response.message["content"][0].get("text") == "Meh.":
                event.retry = True

    agent = Agent(
        model=ScriptedModel(then=lambda model, messages: "Meh."),
        tools=[carrier.tool],
        hooks=[RepeatGuardHooks(max_model_calls=3), AlwaysRetry()],
        callback_handler=None,
    )

    result = agent("Where is FR-7731?")

    assert model_of(agent).calls == 3
    assert result.stop_reason == "end_turn"
    assert str(result).strip() == "I stopped: this turn reached its limit of 3 model calls."
    assert result.state[STOP_KEY] == "max_steps"
    assert read_state(agent).turn.model_calls == 3  # the cancelled call is no model call


def test_a_tool_that_fails_three_times_in_a_row_ends_the_turn() -> None:
    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        raise TimeoutError(f"carrier timeout for {tracking_number}")

    n = iter(range(100))
    agent = Agent(
        model=ScriptedModel(
            then=lambda model, messages: [tool_use("track_parcel", {"tracking_number": f"FR-{next(n)}"})]
        ),
        tools=[track_parcel],
        hooks=[RepeatGuardHooks(max_errors_in_a_row=3)],
        callback_handler=None,
    )

    result = agent("Where are my parcels?")

    assert tool_results(agent) == [f"Error: TimeoutError - carrier timeout for FR-{n}" for n in range(3)]
    assert str(result).strip() == "I stopped: 3 tool calls failed in a row, the last one track_parcel. Try again later."
    assert result.state[STOP_KEY] == "too_many_errors"


def test_a_turn_resumed_after_an_interrupt_keeps_its_counts(carrier: Carrier) -> None:
    """A human-approval interrupt: the resumed invocation (interrupt responses, no new input) is the same turn."""

    class Approval(HookProvider):
        def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
            registry.add_callback(BeforeToolCallEvent, self.approve)

        def approve(self, event: BeforeToolCallEvent) -> None:
            if event.tool_use["name"] == "place_order" and event.interrupt("approve", reason="order?") != "yes":
                event.cancel_tool = "not approved"

    @tool
    def place_order(item: str) -> str:
        """Order an item."""
        return f"ordered {item}"

    track = [tool_use("track_parcel", ARGS)]
    agent = Agent(
        model=ScriptedModel(track, [tool_use("place_order", {"item": "box"})], track, track, "Done."),
        tools=[carrier.tool, place_order],
        hooks=[Approval(), RepeatGuardHooks(SEED_004)],
        callback_handler=None,
    )

    paused = agent("Track FR-7731, order a box, track again")
    turn = read_state(agent).turn.id
    assert paused.stop_reason == "interrupt"
    assert paused.interrupts is not None
    answer: Any = [{"interruptResponse": {"interruptId": paused.interrupts[0].id, "response": "yes"}}]
    resumed = agent(answer)

    assert str(resumed).strip() == "Done."
    assert read_state(agent).turn.id == turn
    assert carrier.calls == ["FR-7731", "FR-7731"]  # the 3rd track_parcel of the turn was refused
    assert tool_results(agent)[-1] == REFUSAL
    assert "ordered box" in tool_results(agent)


def test_what_the_model_reads_is_compared_not_strands_wrapper() -> None:
    """Each result carries a new ``toolUseId`` in Strands' wrapper; the model reads the same text: a repeat."""
    runs: list[str] = []

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        runs.append(tracking_number)
        return "in transit"

    agent = Agent(
        model=ScriptedModel(then=lambda model, messages: [tool_use("track_parcel", ARGS)]),
        tools=[track_parcel],
        hooks=[RepeatGuardHooks(max_refusals=1)],
        callback_handler=None,
    )

    result = agent("Where is FR-7731?")

    assert runs == ["FR-7731", "FR-7731"]
    assert result.state[STOP_KEY] == "ignored_refusals"
    assert final_text(agent) == str(result).strip()


def test_the_counts_live_in_agent_state_as_json(carrier: Carrier) -> None:
    agent = looping_agent(carrier)
    agent("Keep checking FR-7731")

    stored = agent.state.get("repeat_hooks")

    assert isinstance(stored, str)  # JSON text: agent.state copies it for free
    assert json.loads(stored)["turn"]["number"] == 1 and json.loads(stored)["turn"]["refusals"] == 3
    assert "FR-7731" not in stored  # digests, never argument values
    agent.state.set("repeat_hooks", json.loads(stored))  # a dict is read too
    assert read_state(agent).turn.refusals == 3


def test_custom_stop_messages_reach_the_caller(carrier: Carrier) -> None:
    guard = RepeatGuardHooks(
        Policy(match="tool", count="per_turn", max_refusals=1, stop_messages={StopReason.IGNORED_REFUSALS: "Stopped."})
    )
    agent = looping_agent(carrier, guard)

    assert str(agent("Keep checking")).strip() == "Stopped."


@pytest.mark.parametrize("stream", [False, True])
async def test_async_invocations_are_guarded_too(carrier: Carrier, stream: bool) -> None:
    agent = looping_agent(carrier)

    if stream:
        events = [event async for event in agent.stream_async("Keep checking FR-7731")]
        result = events[-1]["result"]
    else:
        result = await agent.invoke_async("Keep checking FR-7731")

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert str(result).strip() == STOPPED


def test_direct_tool_calls_by_the_application_are_not_guarded(carrier: Carrier) -> None:
    agent = looping_agent(carrier)
    agent("Keep checking FR-7731")
    before = read_state(agent).model_dump()

    for _ in range(3):
        agent.tool.track_parcel(tracking_number="FR-7731")

    assert carrier.calls == ["FR-7731"] * 5
    assert read_state(agent).model_dump() == before


def test_a_stop_reaches_the_caller_when_structured_output_was_asked_for(carrier: Carrier) -> None:
    class Where(BaseModel):
        status: str

    agent = looping_agent(carrier)

    result = agent("Keep checking FR-7731", structured_output_model=Where)

    assert result.structured_output is None
    assert str(result).strip() == STOPPED and result.state[STOP_KEY] == "ignored_refusals"


def test_a_tool_returning_a_plain_object_loops_no_more_than_any_repeat() -> None:
    """Strands hands the model ``str()`` of a plain object, ``<Thing object at 0x...>``, a new address every run:
    before, 30 of 30 runs went through (the text was new each time) and an unbounded loop ran until Strands raised
    ``RecursionError``. The model reads the type alone: the 3rd identical call is refused, like any repeat."""
    runs: list[int] = []

    class Thing:
        pass

    kept: list[Thing] = []  # alive together, so every run's object has an address of its own

    @tool
    def fetch_thing(thing_id: int) -> Any:
        """Fetch a thing."""
        runs.append(thing_id)
        kept.append(Thing())
        return kept[-1]

    agent = Agent(
        model=ScriptedModel(then=lambda model, messages: [tool_use("fetch_thing", {"thing_id": 7})]),
        tools=[fetch_thing],
        hooks=[RepeatGuardHooks(max_refusals=3)],
        callback_handler=None,
    )

    result = agent("Get thing 7")

    assert runs == [7, 7]
    assert len({str(thing) for thing in kept}) == 2 and " object at 0x" in str(kept[0])
    assert result.state[STOP_KEY] == "ignored_refusals"
    seen = [block["toolResult"] for message in agent.messages for block in message["content"] if "toolResult" in block]
    assert "object at 0x" in json.dumps(seen[0]["content"])  # what the model read: the object's str()
