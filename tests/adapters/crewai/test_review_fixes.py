"""What a reviewer found, each with the mistake in it: distinct parallel calls finishing out of order, an agent a crew
runs, nested guards, ``kickoff_for_each``, arguments CrewAI will not parse, a later task's response, the testing
docstring, a guard whose own code raises in both tool hooks."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from crewai import Agent, Crew, Task
from crewai.flow.flow import Flow, start
from crewai.tools import BaseTool
from pydantic import BaseModel
from repeat_hooks_crewai import GuardSetupError, RepeatGuard, stop_of
from repeat_hooks_crewai.testing import ScriptedLLM, keep_calling, tool_call, tool_results

from repeat_hooks import Policy

from .conftest import ARGS, SEED_004, STOPPED, Carrier, crew_of, guarded, llm_of, tracker


class Number(BaseModel):
    number: str


def reversed_tool(ran: list[str]) -> BaseTool:
    """A tracker whose earlier parcels answer later (A after B after C): parallel calls finish in reverse."""

    class Track(BaseTool):
        name: str = "track"
        description: str = "Track a parcel."
        args_schema: type[BaseModel] = Number

        def _run(self, number: str) -> str:
            time.sleep({"A": 0.2, "B": 0.1}.get(number, 0.0))
            ran.append(number)
            return "in transit"

    return Track()


def test_distinct_parallel_calls_repeated_every_response_are_stopped_whatever_order_they_finish_in() -> None:
    """The model asks track(A), track(B), track(C) in every response, same results: tools of unknown effect (the
    default) are stopped at the 3rd response's calls, as if they had run one by one, though CrewAI's pool finishes
    them in reverse."""
    ran: list[str] = []
    llm = ScriptedLLM(then=lambda llm, messages: [tool_call("track", {"number": n}) for n in "ABC"])
    agent = Agent(role="tracker", goal="g", backstory="b", llm=llm, tools=[reversed_tool(ran)], cache=False)
    crew = crew_of(agent)

    with RepeatGuard().attach(crew):
        output = crew.kickoff(inputs={"message": "Track A, B and C"})

    assert ran[:3] == ["C", "B", "A"]  # the pool's order, not the response's
    assert {n: ran.count(n) for n in "ABC"} == {"A": 2, "B": 2, "C": 2}
    assert output.raw.startswith("I stopped: I kept calling track") and stop_of(crew) is not None


def once(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Any:
    """One call, then an answer."""
    return "Answered." if messages[-1].get("role") == "tool" else [tool_call("track_parcel", ARGS)]


def test_an_agent_guarded_in_a_crew_starts_a_turn_at_each_kickoff_of_the_crew(carrier: Carrier) -> None:
    agent = tracker(carrier, ScriptedLLM(then=once))
    crew = crew_of(agent)

    with guarded(agent, Policy(max_calls=1, count="per_turn")):
        outputs = [crew.kickoff(inputs={"message": "Where is FR-7731?"}).raw for _ in range(3)]

    assert outputs == ["Answered."] * 3 and carrier.calls == ["FR-7731"] * 3  # no turn: the 2nd would be refused
    assert tool_results(agent) == ["FR-7731: in transit, hub Lyon"]


def test_an_agent_stopped_in_a_crew_runs_again_at_the_next_kickoff(carrier: Carrier) -> None:
    agent = tracker(carrier)
    crew = crew_of(agent)

    with guarded(agent):
        first = crew.kickoff(inputs={"message": "Keep checking FR-7731"}).raw
        second = crew.kickoff(inputs={"message": "Keep checking FR-7731"}).raw  # raised RepeatGuardStopped

    assert first == second == STOPPED and len(carrier.calls) == 4


def test_a_guard_on_a_crew_and_another_on_its_agent_fail_at_the_crews_kickoff(carrier: Carrier) -> None:
    """The agent may have a guard of its own for ``agent.kickoff(...)``: the crew's run is what counts twice."""
    agent = tracker(carrier, ScriptedLLM(then=once))
    crew = crew_of(agent)

    with guarded(crew), guarded(agent):
        assert agent.kickoff("Where is FR-7731?").raw == "Answered."  # alone: one guard acts
        with pytest.raises(GuardSetupError, match="two RepeatGuards guard this run"):
            crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert carrier.calls == ["FR-7731"]


def test_a_guard_on_a_flow_and_another_on_its_crew_fail_at_the_crews_kickoff(carrier: Carrier) -> None:
    crew = crew_of(tracker(carrier))

    class Desk(Flow[dict[str, Any]]):
        @start()
        def answer(self) -> str:
            return crew.kickoff(inputs={"message": "Keep checking FR-7731"}).raw

    desk = Desk()
    with guarded(desk), guarded(crew), pytest.raises(GuardSetupError, match="two RepeatGuards guard this run"):
        desk.kickoff()
    assert carrier.calls == []


def test_kickoff_for_each_guards_each_copy_of_the_crew(carrier: Carrier) -> None:
    """CrewAI kicks off ``crew.copy()`` per input (new ids, copied agents): each is guarded, a turn of its own."""
    crew = crew_of(tracker(carrier))

    with guarded(crew):
        outputs = crew.kickoff_for_each(inputs=[{"message": "Keep checking FR-7731"}] * 2)

    assert [output.raw for output in outputs] == [STOPPED, STOPPED]  # raised CrewAI's 5-repeats error
    assert len(carrier.calls) == 4
    assert stop_of(crew) is None  # the copies' stops are in their outputs


def test_kickoff_for_each_async_guards_each_copy_too(carrier: Carrier) -> None:
    crew = crew_of(tracker(carrier))

    async def run() -> Any:
        with guarded(crew):
            return await crew.kickoff_for_each_async(inputs=[{"message": "Keep checking FR-7731"}] * 2)

    assert [output.raw for output in asyncio.run(run())] == [STOPPED, STOPPED] and len(carrier.calls) == 4


def test_a_call_whose_arguments_crewai_will_not_parse_leaves_on_stop_reply_standing(carrier: Carrier) -> None:
    """CrewAI answers such a call itself, with no hook: the rest of the response is decided and settled."""
    bad = {"type": "function", "function": {"name": "track_parcel", "arguments": "{not json"}}
    agent = tracker(carrier, ScriptedLLM(then=lambda llm, messages: [tool_call("track_parcel", ARGS), bad]))
    crew = crew_of(agent)

    with guarded(crew):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})  # raised RepeatGuardStopped

    assert output.raw == STOPPED and len(carrier.calls) == 2
    assert tool_results(agent)[1].startswith("Error: Failed to parse tool arguments as JSON")


def test_a_later_tasks_response_at_the_same_history_index_counts_as_a_model_call(carrier: Carrier) -> None:
    """CrewAI starts each task's history afresh: the second task's tool response sits where the first's did."""
    agent = tracker(carrier, ScriptedLLM(then=once))
    crew = crew_of(agent, agent)

    with guarded(crew, Policy(max_model_calls=3)):
        output = crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert llm_of(agent).calls == 3 and carrier.calls == ["FR-7731"] * 2  # 4 calls: one went uncounted
    assert output.raw == "I stopped: this turn reached its limit of 3 model calls."


def test_the_testing_docstrings_scripted_llm_needs_no_model_name(carrier: Carrier) -> None:
    agent = tracker(carrier, ScriptedLLM(then=keep_calling("track_parcel", ARGS)))
    crew = crew_of(agent)
    with guarded(crew):
        assert crew.kickoff(inputs={"message": "Keep checking FR-7731"}).raw == STOPPED


def test_with_fail_closed_a_guard_raising_in_both_tool_hooks_hands_the_model_its_refusal(
    carrier: Carrier, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("bug")

    guard = RepeatGuard(SEED_004, fail="closed")
    monkeypatch.setattr(guard, "_claim", broken)
    monkeypatch.setattr(guard, "_settle", broken)
    agent = tracker(carrier, ScriptedLLM(replies=[[tool_call("track_parcel", ARGS)], "Done."]))
    crew = crew_of(agent)

    with guard.attach(crew), caplog.at_level(logging.ERROR):
        assert crew.kickoff(inputs={"message": "Where is FR-7731?"}).raw == "Done."

    assert carrier.calls == [] and "after-tool hook failed: RuntimeError: bug" in caplog.text
    assert tool_results(agent)[0].startswith("Refused: the loop guard could not read")  # not CrewAI's "blocked"


def test_a_coworker_stopped_already_and_delegated_to_again_hands_the_boss_crewais_error_with_the_stop() -> None:
    """As the README says: its first model call raises ``RepeatGuardStopped``, which CrewAI's delegation tool hands
    the boss as an error text carrying the stop's message; the boss goes on."""
    from .test_multiagent import boss_llm

    carrier = Carrier()
    worker, boss = tracker(carrier), Agent(role="boss", goal="g", backstory="b", llm=boss_llm(2), allow_delegation=True)
    crew = Crew(agents=[boss, worker], tasks=[Task(description="{message}", expected_output="x", agent=boss)])

    with guarded(crew):
        output = crew.kickoff(inputs={"message": "Where is FR-7731?"})

    first, second = tool_results(boss)
    assert first == STOPPED and len(carrier.calls) == 2
    assert second.startswith("Error executing task with agent 'tracker'") and second.endswith(STOPPED)
    assert output.raw.startswith("Boss: Error executing task")
