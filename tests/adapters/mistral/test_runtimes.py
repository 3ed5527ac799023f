"""The runtimes rc11 offers (create_session(), local_runtime(), to_workflow()), and what it shows of a stopped turn."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, ClassVar

from mistralai.agents import agents
from repeat_hooks_mistral import RepeatGuardHook, events_of, stop_of
from repeat_hooks_mistral.testing import ScriptedModel, run_turn, tool_messages

from repeat_hooks import Policy, StopReason

FR = {"tracking_number": "FR-7731"}
RESULT = '{"last_scan": "Lyon hub, 06:12", "status": "in transit", "tracking_number": "FR-7731"}'
REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
STOP = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."


class ParcelGuard(RepeatGuardHook):
    policy = Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3)


async def test_what_rc11_shows_of_a_stopped_turn_and_what_the_guard_keeps(carrier: Any, agent_for: Any) -> None:
    """The seed-004 story itself is the conformance kit's (test_conformance.py); here, what is rc11's own:
    the stopped turn comes back ``completed`` and empty, the exact texts the model read, the events with
    their turn ids, and an earlier turn's stop read by its ``turn_id``."""
    model = ScriptedModel.keep_calling("track_parcel", FR)
    agent = agent_for(model, ParcelGuard())
    async with await agent.create_session() as session:
        result = await run_turn(session, "Parcel FR-7731 is due today. Keep checking until it is delivered.")

        # 5 model calls: 2 calls ran, 3 were refused; the 6th model call is skipped: the turn ends.
        assert len(carrier.calls) == 2 and len(model.requests) == 5
        assert tool_messages(model.requests[-1]) == [RESULT, RESULT, REFUSAL, REFUSAL]
        stop = await stop_of(session, guard=ParcelGuard)
        assert stop is not None and (stop.reason, stop.message) == (StopReason.IGNORED_REFUSALS, STOP)
        # rc11 drops a pre_llm_call skip's message: the turn comes back "completed" and empty.
        assert (result.stop_reason, result.text) == ("completed", "")
        events = await events_of(session, guard=ParcelGuard)
        assert [(e.kind, e.reason.value, e.count) for e in events] == [
            ("refusal", "repeat", 3),
            ("refusal", "repeat", 4),
            ("refusal", "repeat", 5),
            ("stop", "ignored_refusals", 3),
        ]
        first_turn = events[-1].turn_id
        assert first_turn is not None and {e.turn_id for e in events} == {first_turn}

        again, stop_2 = await ParcelGuard.run(session, "Check FR-7731 once more.")
        assert len(carrier.calls) == 4, "turn 2 starts a fresh count: its first two calls run"
        assert await stop_of(session, guard=ParcelGuard, turn_id=first_turn) == stop, "turn 1's stop stays readable"
        assert stop_2 == stop and again.text == STOP, "run() gives the stop and its message"
        assert tool_messages(model.requests[-1])[-4:] == [RESULT, RESULT, REFUSAL, REFUSAL]


async def test_two_concurrent_sessions_of_one_hook_instance_count_apart(carrier: Any, agent_for: Any) -> None:
    import asyncio

    model = ScriptedModel.keep_calling("track_parcel", FR)
    agent = agent_for(model, ParcelGuard())  # create_session(): this one instance serves both sessions

    async def one_turn() -> str:
        async with await agent.create_session() as session:
            await run_turn(session, "Keep checking FR-7731.")
            return str(session.session_id)

    first, second = await asyncio.gather(one_turn(), one_turn())

    assert first != second
    assert len(carrier.calls) == 4, "each session runs its own two calls"
    by_turn: dict[str | None, list[Any]] = defaultdict(list)
    for request in model.requests:
        by_turn[request.turn_id].append(request)
    assert len(by_turn) == 2
    for requests in by_turn.values():
        assert len(requests) == 5
        assert tool_messages(requests[-1]) == [RESULT, RESULT, REFUSAL, REFUSAL]
    for session_id in (first, second):
        stop = await stop_of(session_id, guard=ParcelGuard)
        assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


class CountedGuard(ParcelGuard):
    """ParcelGuard that notes which hook objects ran, to show local_runtime() splits them."""

    seen: ClassVar[set[int]] = set()

    async def pre_tool_call(self, ctx: Any, call: Any) -> Any:
        CountedGuard.seen.add(id(self))
        return await super().pre_tool_call(ctx, call)

    async def pre_llm_call(self, ctx: Any, invocation: Any) -> Any:
        CountedGuard.seen.add(id(self))
        return await super().pre_llm_call(ctx, invocation)


async def test_local_runtime_builds_a_hook_per_point_and_the_counts_still_add_up(carrier: Any, agent_for: Any) -> None:
    CountedGuard.seen.clear()
    model = ScriptedModel.keep_calling("track_parcel", FR)
    hook = CountedGuard()
    async with agent_for(model, hook).local_runtime() as bound, await bound.create_session() as session:
        result = await run_turn(session, "Keep checking FR-7731.")
        stop = await stop_of(session, guard=CountedGuard)
        await run_turn(session, "Check FR-7731 once more.")

    assert len(CountedGuard.seen - {id(hook)}) >= 2, "local_runtime() ran rebuilt hook objects"
    assert len(carrier.calls) == 4
    assert tool_messages(model.requests[4]) == [RESULT, RESULT, REFUSAL, REFUSAL]
    assert result.text == ""
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


def test_to_workflow_accepts_the_guard(agent_for: Any) -> None:
    model = ScriptedModel.keep_calling("track_parcel", FR)
    hook = ParcelGuard()
    assert set(vars(hook)) <= {"_tools"}, "no instance state: the deployed build would refuse it"
    workflow = agent_for(model, hook).to_workflow()
    assert isinstance(workflow, type)


class StatefulGuard(ParcelGuard):
    def __init__(self) -> None:
        super().__init__()
        self.seen = 0  # not a setting: refused by to_workflow() only


def test_to_workflow_refuses_a_guard_with_instance_state(agent_for: Any) -> None:
    """The control for the test above: the check it passes is real."""
    import pytest

    model = ScriptedModel.keep_calling("track_parcel", FR)
    with pytest.raises(agents.UnsupportedAgentFeatureError, match="stateful"):
        agent_for(model, StatefulGuard()).to_workflow()
