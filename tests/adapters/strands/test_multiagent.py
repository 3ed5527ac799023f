"""Strands' multi-agent patterns with one guard on every agent: a stop ends the turn of the agent whose model
looped (and what that agent's turn is part of decides the rest), and each agent counts its own calls."""

from __future__ import annotations

from typing import Any

from repeat_hooks_strands import RepeatGuardHooks, read_state, stop_of
from repeat_hooks_strands.testing import ScriptedModel, keep_calling, tool_results, tool_use
from strands import Agent
from strands.multiagent import GraphBuilder, Swarm
from strands.multiagent.base import Status

from repeat_hooks import StopReason

from .conftest import ARGS, SEED_004, STOPPED, Carrier


def tracker(carrier: Carrier, guard: RepeatGuardHooks) -> Agent:
    """A sub-agent whose model keeps checking FR-7731."""
    return Agent(
        name="tracker",
        description="Tracks parcels.",
        model=ScriptedModel(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        hooks=[guard],
        callback_handler=None,
    )


def counted(agent: Agent) -> list[int]:
    """The counts of the agent's current turn (one per distinct call)."""
    return sorted(read_state(agent).turn.counts.values())


def test_an_agent_used_as_a_tool_stops_its_own_turn_and_the_caller_goes_on(carrier: Carrier) -> None:
    guard = RepeatGuardHooks(SEED_004)
    sub = tracker(carrier, guard)
    orchestrator = Agent(
        name="orchestrator",
        model=ScriptedModel([tool_use("tracker", {"input": "Keep checking FR-7731"})], "The tracker has no news."),
        tools=[sub.as_tool()],
        hooks=[guard],
        callback_handler=None,
    )

    result = orchestrator("Where is FR-7731?")

    assert carrier.calls == ["FR-7731", "FR-7731"]
    # The sub-agent's turn ended with the stop; the orchestrator read it as the tool's result and answered.
    assert [text.strip() for text in tool_results(orchestrator)] == [STOPPED]
    assert str(result).strip() == "The tracker has no news."
    sub_stop = stop_of(sub)
    assert sub_stop is not None and sub_stop.reason is StopReason.IGNORED_REFUSALS
    assert stop_of(orchestrator) is None
    # Counts stay with the model that saw the calls.
    assert counted(sub) == [5] and read_state(sub).turn.refusals == 3
    assert counted(orchestrator) == [1] and read_state(orchestrator).turn.refusals == 0


def test_the_orchestrator_counts_its_calls_of_an_agent_tool(carrier: Carrier) -> None:
    guard = RepeatGuardHooks(SEED_004)
    sub = Agent(
        name="tracker",
        model=ScriptedModel(then=lambda model, messages: "In transit."),
        hooks=[guard],
        callback_handler=None,
    )
    ask = [tool_use("tracker", {"input": "Where is FR-7731?"})]
    orchestrator = Agent(
        model=ScriptedModel(then=lambda model, messages: ask),
        tools=[sub.as_tool()],
        hooks=[guard],
        callback_handler=None,
    )

    result = orchestrator("Keep asking the tracker")

    assert str(result).strip().replace("tracker", "track_parcel") == STOPPED
    assert [text.strip() for text in tool_results(orchestrator)][:2] == ["In transit.", "In transit."]
    assert stop_of(sub) is None  # each of its turns answered


def test_a_swarm_node_that_loops_ends_its_turn_and_the_swarm(carrier: Carrier) -> None:
    guard = RepeatGuardHooks(SEED_004)
    handoff = tool_use("handoff_to_agent", {"agent_name": "tracker", "message": "Track FR-7731"})
    triage = Agent(name="triage", model=ScriptedModel([handoff], "Handed off."), hooks=[guard], callback_handler=None)
    looping = tracker(carrier, guard)

    result = Swarm([triage, looping], entry_point=triage)("Where is FR-7731?")

    assert result.status is Status.COMPLETED
    assert [node.node_id for node in result.node_history] == ["triage", "tracker"]
    final: Any = result.results["tracker"].result
    assert str(final).strip() == STOPPED
    assert carrier.calls == ["FR-7731", "FR-7731"]
    looping_stop = stop_of(looping)
    assert looping_stop is not None and looping_stop.reason is StopReason.IGNORED_REFUSALS
    assert stop_of(triage) is None
    assert counted(triage) == [1] and counted(looping) == [5]


def test_a_graph_node_that_loops_ends_its_turn_and_an_edge_can_end_the_graph(carrier: Carrier) -> None:
    guard = RepeatGuardHooks(SEED_004)
    looping = tracker(carrier, guard)
    writers = [ScriptedModel(then=lambda model, messages: "Report written.") for _ in range(2)]

    def graph(stop_on_stop: bool) -> Any:
        writer = Agent(name="writer", model=writers[stop_on_stop], hooks=[guard], callback_handler=None)
        builder = GraphBuilder()
        builder.add_node(looping, "tracker")
        builder.add_node(writer, "writer")
        if stop_on_stop:
            builder.add_edge("tracker", "writer", condition=lambda state: stop_of(looping) is None)
        else:
            builder.add_edge("tracker", "writer")
        builder.set_entry_point("tracker").set_max_node_executions(5)
        return builder.build()

    # By default the graph goes on: the next node gets the stop message as the tracker's output.
    result = graph(stop_on_stop=False)("Where is FR-7731?")
    assert [node.node_id for node in result.execution_order] == ["tracker", "writer"]
    assert STOPPED in str(writers[0].requests[0])
    assert carrier.calls == ["FR-7731", "FR-7731"]
    # An edge that reads stop_of ends the graph at the stopped node.
    result = graph(stop_on_stop=True)("Where is FR-7731?")
    assert result.status is Status.COMPLETED
    assert [node.node_id for node in result.execution_order] == ["tracker"]
    assert writers[1].calls == 0
    assert carrier.calls == ["FR-7731"] * 4
    assert counted(looping) == [5]


def test_a_guard_given_to_a_swarm_guards_each_of_its_agents(carrier: Carrier) -> None:
    handoff = tool_use("handoff_to_agent", {"agent_name": "tracker", "message": "Track FR-7731"})
    triage = Agent(name="triage", model=ScriptedModel([handoff], "Handed off."), callback_handler=None)
    looping = Agent(
        name="tracker",
        model=ScriptedModel(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        callback_handler=None,
    )
    guard = RepeatGuardHooks(SEED_004)

    result = Swarm([triage, looping], entry_point=triage, hooks=[guard])("Where is FR-7731?")

    assert str(result.results["tracker"].result).strip() == STOPPED
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert counted(triage) == [1] and counted(looping) == [5]
