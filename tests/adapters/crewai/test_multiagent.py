"""Several agents: each counts apart (CrewAI shows no agent another's tool calls: a coworker's work reaches the
delegating agent only as its final answer, the delegation tool's result), a stop ends one agent's task, and a flow
running several crews is one turn."""

from __future__ import annotations

import json
from typing import Any

from crewai import Agent, Crew, Task
from repeat_hooks_crewai import stop_of
from repeat_hooks_crewai.state import book_of
from repeat_hooks_crewai.testing import ScriptedLLM, tool_call, tool_results

from repeat_hooks import Policy

from .conftest import STOPPED, Carrier, crew_of, guarded, llm_of, tracker

DELEGATE = {"task": "Where is FR-7731?", "context": "The user asks.", "coworker": "tracker"}


def boss_llm(times: int) -> ScriptedLLM:
    """A manager that delegates the same question ``times`` times, then answers with what the coworker said."""

    def script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Any:
        if llm.calls <= times:
            return [tool_call("delegate_work_to_coworker", DELEGATE)]
        return f"Boss: {messages[-1]['content']}"

    return ScriptedLLM(model="scripted", then=script)


def test_a_coworker_stopped_by_the_guard_hands_its_stop_to_the_delegating_agent_which_goes_on(
    carrier: Carrier,
) -> None:
    worker = tracker(carrier)
    boss = Agent(role="boss", goal="g", backstory="b", llm=boss_llm(1), allow_delegation=True, cache=False)
    crew = Crew(
        agents=[boss, worker], tasks=[Task(description="{message}", expected_output="x", agent=boss)], cache=False
    )

    with guarded(crew):
        output = crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert carrier.calls == ["FR-7731"] * 2 and llm_of(worker).calls == 5
    assert tool_results(boss) == [STOPPED]  # the coworker's answer is the delegation's result
    assert output.raw == f"Boss: {STOPPED}"
    assert stop_of(crew, role="tracker") is not None and stop_of(crew, role="boss") is None


def test_agents_count_apart_each_seeing_only_its_own_calls(carrier: Carrier) -> None:
    """The boss delegates the same question three times; each time the coworker tracks once and answers the same.
    The boss's delegations count in the boss's state: the third, with the same arguments and the same answers, is
    refused, so the coworker is not run again; the coworker's two calls count in its own state (none refused)."""

    def worker_script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Any:
        return (
            "In transit."
            if messages[-1]["role"] == "tool"
            else [tool_call("track_parcel", {"tracking_number": "FR-7731"})]
        )

    worker = tracker(carrier, ScriptedLLM(model="scripted", then=worker_script))
    boss = Agent(role="boss", goal="g", backstory="b", llm=boss_llm(3), allow_delegation=True, cache=False)
    crew = Crew(
        agents=[boss, worker], tasks=[Task(description="{message}", expected_output="x", agent=boss)], cache=False
    )

    with guarded(crew, Policy(max_calls=2)):
        crew.kickoff(inputs={"message": "Where is FR-7731?"})

    book = book_of(crew)
    assert book is not None and set(book.states) == {"boss", "tracker"}
    assert carrier.calls == ["FR-7731"] * 2 and llm_of(worker).calls == 4  # two delegations ran the coworker
    assert [text.startswith("Refused") for text in tool_results(boss)] == [False, False, True]
    assert book.states["boss"].turn.refusals == 1 and book.states["tracker"].turn.refusals == 0
    assert book.states["boss"].turn.id == book.states["tracker"].turn.id == book.turn_id  # one turn, two counts


def test_two_crews_in_one_guarded_flow_are_one_turn(carrier: Carrier) -> None:
    """A flow kicking off a crew twice: the flow's kickoff is the turn, so the second crew's calls go on counting."""
    from crewai.flow.flow import Flow, listen, start

    agent = tracker(
        carrier,
        ScriptedLLM(
            model="scripted",
            then=lambda llm, m: (
                "Done." if m[-1]["role"] == "tool" else [tool_call("track_parcel", {"tracking_number": "FR-7731"})]
            ),
        ),
    )
    crew = crew_of(agent)

    class Twice(Flow[dict[str, Any]]):
        @start()
        def first(self) -> str:
            return crew.kickoff(inputs={"message": "Track FR-7731"}).raw

        @listen(first)
        def second(self) -> str:
            crew.kickoff(inputs={"message": "Track FR-7731 again"})
            return crew.kickoff(inputs={"message": "Once more"}).raw

    flow = Twice()
    with guarded(flow, Policy(max_calls=2)):
        flow.kickoff()

    assert carrier.calls == ["FR-7731"] * 2  # the third kickoff's call was refused: one turn
    saved = json.loads(flow.state["repeat_hooks"]["tracker"])
    assert saved["turn"]["number"] == 1


def test_a_crew_kicked_off_before_runs_guarded_inside_a_guarded_flow(carrier: Carrier) -> None:
    """CrewAI's executors copy the model-call hooks when built (agents/agent_executor.py:258), and a crew's agents
    keep theirs across kickoffs: a crew run once unguarded, then inside a guarded flow, is given the guard's model-call
    hooks at its kickoff, so its stop lands (not CrewAI's own error at the 5th same call)."""
    from crewai.flow.flow import Flow, start

    agent = tracker(carrier, ScriptedLLM(model="scripted", replies=["Nothing to check."], then=None))
    crew = crew_of(agent)
    crew.kickoff(inputs={"message": "Hello"})  # builds the agent's executor, with no guard's hooks
    llm_of(agent).then = lambda llm, m: [tool_call("track_parcel", {"tracking_number": "FR-7731"})]

    class Desk(Flow[dict[str, Any]]):
        @start()
        def answer(self) -> str:
            return crew.kickoff(inputs={"message": "Keep checking FR-7731"}).raw

    flow = Desk()
    with guarded(flow):
        flow.kickoff()

    assert carrier.calls == ["FR-7731"] * 2 and llm_of(agent).calls == 1 + 5
    assert (stop := stop_of(flow)) is not None and stop.message == STOPPED
