"""Parallel calls: CrewAI runs a response's calls in a thread pool (agents/agent_executor.py:1978), one before- and
one after-hook per call on that call's thread; the whole response is in the executor's history before any runs, so
the guard decides it as one batch, and hands each thread its own call's decision."""

from __future__ import annotations

import threading
import time

from crewai import Agent
from crewai.tools import BaseTool
from pydantic import BaseModel
from repeat_hooks_crewai.testing import ScriptedLLM, tool_call, tool_results

from repeat_hooks import Policy

from .conftest import crew_of, guarded


class Query(BaseModel):
    query: str


def slow_tool(ran: list[tuple[str, str]]) -> BaseTool:
    """A lookup that takes 50 ms for ``slow`` and none for the rest, recording its thread."""

    class Lookup(BaseTool):
        name: str = "lookup"
        description: str = "Look something up."
        args_schema: type[BaseModel] = Query

        def _run(self, query: str) -> str:
            ran.append((query, threading.current_thread().name))
            if query == "slow":
                time.sleep(0.05)
            return f"result of {query}"

    return Lookup()


def test_one_response_is_decided_as_one_batch_and_each_thread_reads_its_own_calls_result() -> None:
    ran: list[tuple[str, str]] = []
    batch = [tool_call("lookup", {"query": q}) for q in ("slow", "slow", "fast", "slow")]
    llm = ScriptedLLM(model="scripted", replies=[batch, "Done."])
    agent = Agent(role="researcher", goal="g", backstory="b", llm=llm, tools=[slow_tool(ran)], cache=False)
    crew = crew_of(agent)

    with guarded(crew, Policy(max_calls=1, count="per_turn")):
        output = crew.kickoff(inputs={"message": "Look these up"})

    assert output.raw == "Done."
    assert sorted(query for query, _ in ran) == ["fast", "slow"]  # the 2nd and 3rd "slow" were refused
    assert all(thread != threading.current_thread().name for _, thread in ran)  # in CrewAI's pool
    results = tool_results(agent)  # in the response's order, whatever order the threads finished in
    assert results[2] == "result of fast"
    same = [results[index] for index in (0, 1, 3)]  # identical calls: the first thread to reach the guard runs
    assert sorted(text[:14] for text in same) == ["Refused: you a", "Refused: you a", "result of slow"]
    ids = [message["tool_call_id"] for message in agent.agent_executor.state.messages if message["role"] == "tool"]  # type: ignore[union-attr]
    assert ids == ["call_1", "call_2", "call_3", "call_4"]


def test_a_batch_of_identical_calls_is_counted_once_per_call_not_per_thread() -> None:
    ran: list[tuple[str, str]] = []
    batch = [tool_call("lookup", {"query": "fast"}) for _ in range(5)]
    llm = ScriptedLLM(model="scripted", replies=[batch, batch, "Done."])
    agent = Agent(role="researcher", goal="g", backstory="b", llm=llm, tools=[slow_tool(ran)], cache=False)
    crew = crew_of(agent)

    with guarded(crew, Policy(max_calls=2, count="per_turn", max_refusals=5)):
        crew.kickoff(inputs={"message": "Look it up"})

    assert len(ran) == 2 and llm.calls == 3
    refused = [text.startswith("Refused") for text in tool_results(agent)]  # which two ran: the first threads there
    assert len(refused) == 10 and refused[:5].count(False) == 2 and all(refused[5:])
