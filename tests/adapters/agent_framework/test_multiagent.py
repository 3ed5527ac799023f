"""Beyond one agent: what a stop does to what runs around the agent. ``WorkflowBuilder`` hands a stopped agent's
conversation on like any other (the next agent runs), unless an edge's condition reads ``stop_of``; with
``on_stop="raise"`` the ``RepeatGuardStopped`` propagates out of ``workflow.run`` and nothing after runs.
``agent-framework-orchestrations``' builders: ``SequentialBuilder`` has no condition (only ``"raise"`` ends it), a
group chat and a handoff workflow end on a ``termination_condition`` reading ``stop_of`` of their conversation. An
agent used as another's tool keeps its own counts, and its stop is the tool's result."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import Agent, WorkflowBuilder
from repeat_hooks_agent_framework import RepeatGuardMiddleware, RepeatGuardStopped, stop_of
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, keep_calling, tool_results

from repeat_hooks import StopReason

from .conftest import ARGS, SEED_004, STOPPED, Carrier, client_of

orchestrations = pytest.importorskip("agent_framework_orchestrations")


def agent(name: str, carrier: Carrier, *, loops: bool = True, **options: Any) -> Agent[Any]:
    """A tracker whose model keeps asking for the same call (``loops``), or one that answers ``"Done."``."""
    return Agent(
        name=name,
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS) if loops else None),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(SEED_004, **options)],
    )


async def test_a_workflow_edge_hands_a_stopped_agents_conversation_on_unless_it_reads_stop_of(
    carrier: Carrier,
) -> None:
    tracker, billing = agent("tracker", carrier), agent("billing", carrier, loops=False)
    plain = await WorkflowBuilder(start_executor=tracker).add_edge(tracker, billing).build().run("Where is FR-7731?")

    assert [output.text for output in plain.get_outputs()] == [STOPPED, "Done."]
    assert client_of(billing).calls == 1  # the SDK runs the next agent

    tracker, billing = agent("tracker", carrier), agent("billing", carrier, loops=False)
    builder = WorkflowBuilder(start_executor=tracker)
    guarded = await builder.add_edge(tracker, billing, condition=lambda r: stop_of(r) is None).build().run("Go")

    assert [output.text for output in guarded.get_outputs()] == [STOPPED]
    assert client_of(billing).calls == 0
    assert (stop := stop_of(guarded.get_outputs()[0])) is not None and stop.reason is StopReason.IGNORED_REFUSALS


async def test_on_stop_raise_ends_the_whole_workflow(carrier: Carrier) -> None:
    tracker, billing = agent("tracker", carrier, on_stop="raise"), agent("billing", carrier, loops=False)
    workflow = WorkflowBuilder(start_executor=tracker).add_edge(tracker, billing).build()

    with pytest.raises(RepeatGuardStopped) as raised:
        await workflow.run("Where is FR-7731?")

    assert (stop := stop_of(raised.value)) is not None and stop.message == STOPPED
    assert carrier.calls == ["FR-7731"] * 2 and client_of(tracker).calls == 5 and client_of(billing).calls == 0


async def test_a_sequential_orchestration_goes_on_after_a_stop_and_raise_ends_it(carrier: Carrier) -> None:
    tracker, billing = agent("tracker", carrier), agent("billing", carrier, loops=False)
    await orchestrations.SequentialBuilder(participants=[tracker, billing]).build().run("Where is FR-7731?")
    assert client_of(billing).calls == 1

    tracker, billing = agent("tracker", carrier, on_stop="raise"), agent("billing", carrier, loops=False)
    with pytest.raises(RepeatGuardStopped):
        await orchestrations.SequentialBuilder(participants=[tracker, billing]).build().run("Where is FR-7731?")
    assert client_of(billing).calls == 0


async def test_a_group_chat_ends_when_its_termination_condition_reads_the_stop(carrier: Carrier) -> None:
    tracker, billing = agent("tracker", carrier), agent("billing", carrier, loops=False)
    speakers = iter(["tracker", "billing", "tracker", "billing"])
    chat = orchestrations.GroupChatBuilder(
        participants=[tracker, billing],
        selection_func=lambda state: next(speakers),
        max_rounds=4,
        termination_condition=lambda messages: stop_of(messages) is not None,
    ).build()

    await chat.run("Where is FR-7731?")

    assert client_of(tracker).calls == 5 and client_of(billing).calls == 0
    assert carrier.calls == ["FR-7731"] * 2


async def test_an_agent_used_as_a_tool_stops_its_own_turn_and_the_caller_goes_on(carrier: Carrier) -> None:
    tracker = agent("tracker", carrier)
    orchestrator = Agent(
        name="orchestrator",
        client=ScriptedClient([function_call("tracker", {"task": "Keep checking FR-7731"})], "No news."),
        tools=[tracker.as_tool(name="tracker", description="Tracks parcels.")],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )

    response = await orchestrator.run("Where is FR-7731?")

    assert carrier.calls == ["FR-7731"] * 2 and client_of(tracker).calls == 5
    assert tool_results(response) == [STOPPED] and response.text == "No news." and stop_of(response) is None


async def test_a_handoff_workflow_ends_on_a_termination_condition_reading_the_stop(carrier: Carrier) -> None:
    """The handoff tool call passes the guard like any call; the agent handed to loops and is stopped. Without a
    termination condition the workflow then asks the user for the next message (``request_info``); with one reading
    ``stop_of`` it ends (idle)."""

    def run(terminate: bool) -> Any:
        triage = Agent(
            name="triage",
            client=ScriptedClient([function_call("handoff_to_tracker", {})], "Handed over."),
            middleware=[RepeatGuardMiddleware(SEED_004)],
            require_per_service_call_history_persistence=True,
        )
        tracker = agent("tracker", carrier)
        tracker.require_per_service_call_history_persistence = True
        builder = orchestrations.HandoffBuilder(
            participants=[triage, tracker],
            termination_condition=(lambda messages: stop_of(messages) is not None) if terminate else None,
        )
        return builder.with_start_agent(triage).build().run("Where is FR-7731?"), tracker

    asking, tracker = run(terminate=False)
    result = await asking
    assert client_of(tracker).calls == 5 and [event.type for event in result].count("request_info") == 1
    assert str(result.get_final_state()) == "WorkflowRunState.IDLE_WITH_PENDING_REQUESTS"

    ending, tracker = run(terminate=True)
    result = await ending
    assert client_of(tracker).calls == 5 and [event.type for event in result].count("request_info") == 0
    assert str(result.get_final_state()) == "WorkflowRunState.IDLE"
    assert [output.text for output in result.get_outputs()][-1] == STOPPED
