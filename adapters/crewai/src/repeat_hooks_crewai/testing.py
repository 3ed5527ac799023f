"""A testing aid: a scripted ``crewai.llms.base_llm.BaseLLM`` that drives CrewAI's real agent loop offline, with no
API key, and the conformance kit's ``Driver`` for CrewAI.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    llm = ScriptedLLM(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = Agent(role="tracker", goal="...", backstory="...", llm=llm, tools=[track_parcel])
    crew = Crew(agents=[agent], tasks=[Task(description="...", expected_output="...", agent=agent)])
    with RepeatGuard(max_calls=2).attach(crew):
        output = crew.kickoff()
    llm.calls                 # how many model calls reached the model
    tool_results(agent)       # the tool results of its last task, as the model read them

A reply is a text (the model's answer, which ends the task) or a sequence of ``tool_call(...)`` dicts (one response
asking for those calls, in the OpenAI shape CrewAI's native tool path reads: ``agents/agent_executor.py:1697``;
CrewAI runs several in a thread pool). ``supports_function_calling()`` is ``True``, so the executor takes that path.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crewai import Agent, Crew, Task
from crewai.agents.agent_builder.base_agent import BaseAgent
from crewai.flow.flow import Flow, listen, or_, router, start
from crewai.hooks import register_before_tool_call_hook, unregister_before_tool_call_hook
from crewai.llms.base_llm import BaseLLM
from crewai.tools import BaseTool
from pydantic import Field, PrivateAttr, create_model

from repeat_hooks.kit import request
from repeat_hooks.kit.conformance import STOPPED, Cursor, Scenario, Tool, ToolBox, TurnOutcome
from repeat_hooks.stores import StateStore

from .guard import RepeatGuard, RepeatGuardStopped
from .state import stop_of

for _name in ("CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING"):
    os.environ.setdefault(_name, "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

UNSUPPORTED: dict[str, str] = {}
"""Every conformance scenario runs on CrewAI (the kit's convention: scenario name -> the SDK fact why not)."""

Reply = str | Sequence[Mapping[str, Any]]
"""One model response: a text answer, or the tool calls it asks for."""
Script = Callable[["ScriptedLLM", list[dict[str, Any]]], Reply]
"""Makes the next response from the conversation (and the model, for fresh ids and the call count)."""


def tool_call(name: str, arguments: Mapping[str, Any] | None = None, call_id: str | None = None) -> dict[str, Any]:
    """An OpenAI-style tool call; ``call_id=None`` gives it a fresh id when the model answers (``call_1``, ...)."""
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments or {})}}
    if call_id is not None:
        call["id"] = call_id
    return call


def keep_calling(name: str, arguments: Mapping[str, Any], parallel: int = 1) -> Script:
    """A script that calls ``name`` with ``arguments`` in every response, ``parallel`` calls at a time, forever."""

    def script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Reply:
        return [tool_call(name, arguments) for _ in range(parallel)]

    return script


class ScriptedLLM(BaseLLM):
    """A CrewAI ``BaseLLM`` that answers from a script (a testing aid): ``replies`` first, in order, then ``then``
    makes each response (``None``: the model answers ``"Done."``); ``model`` is ``"scripted"`` unless given.
    ``calls`` counts the model calls; ``requests`` keeps the conversation each received (``record_requests=False``:
    none, for benchmarks)."""

    model: str = "scripted"
    replies: list[Any] = Field(default_factory=list)
    then: Any = None
    calls: int = 0
    record_requests: bool = True
    requests: list[list[dict[str, Any]]] = Field(default_factory=list)
    offered: list[str] = Field(default_factory=list)
    """The names of the tools the latest call offered the model (as CrewAI named them: an MCP tool's name carries
    its server's)."""
    _ids: Any = PrivateAttr(default_factory=lambda: itertools.count(1))

    def __init__(self, model: str = "scripted", **data: Any) -> None:
        super().__init__(model=model, **data)  # CrewAI's BaseLLM requires a model name: "scripted" by default

    def get_input_tokens_count(self, messages: Any, tools: Any = None, response_model: Any = None) -> int:
        """A rough count (four characters a token), without CrewAI's warning for a model it does not know."""
        return sum(len(str(message.get("content") or "")) for message in messages) // 4 if messages else 0

    def supports_function_calling(self) -> bool:
        """``True``: CrewAI takes its native tool-call path."""
        return True

    def call(  # type: ignore[override]
        self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None, **kwargs: Any
    ) -> Any:
        """Fires for each model call: records the conversation and answers the scripted reply."""
        self.calls += 1
        self.offered = [str((tool.get("function") or {}).get("name")) for tool in tools or () if isinstance(tool, dict)]
        history = messages if isinstance(messages, list) else [{"role": "user", "content": messages}]
        if self.record_requests:
            self.requests.append([dict(message) for message in history])
        if self.replies:
            reply = self.replies.pop(0)
            reply = reply(self, history) if callable(reply) else reply
        elif self.then is not None:
            reply = self.then(self, history)
        else:
            reply = "Done."
        if isinstance(reply, str):
            return reply
        return [{**call, "id": call.get("id") or f"call_{next(self._ids)}"} for call in reply]


def tool_results(agent: BaseAgent) -> list[str]:
    """The tool results of ``agent``'s last task (its executor's history, which CrewAI clears at the next), in order,
    as the text the model read."""
    executor = agent.agent_executor
    messages = getattr(getattr(executor, "state", None), "messages", None) or []
    return [str(message.get("content")) for message in messages if message.get("role") == "tool"]


def kit_tool(box: ToolBox, tool: Tool) -> BaseTool:
    """A kit tool as a CrewAI ``BaseTool`` taking ``query``, caching nothing (with CrewAI's opt-in cache on, a repeat
    would be answered without running)."""
    schema = create_model(f"{tool.name}_args", query=(str, ...))

    class KitTool(BaseTool):
        def _run(self, query: str) -> Any:
            return box.run(tool.name, query)

    return KitTool(name=tool.name, description=tool.description, args_schema=schema, cache_function=lambda a, r: False)


# -- the conformance kit's driver -------------------------------------------------------------------------


class Driver:
    """Runs a ``repeat_hooks.kit.conformance`` scenario on CrewAI's real loop (the kit's ``Driver`` for CrewAI).

    One agent (``kit``) with the scenario's tools and a ``ScriptedLLM`` answering the script, in a ``Crew`` with one
    task per user turn (its description is the message: ``crew.kickoff(inputs={"message": ...})``), CrewAI's cache
    off, guarded by ``RepeatGuard(scenario.policy, **options).attach(crew)``. With ``branches``, one agent and task
    per branch in the crew (sequential tasks see each other's answers, never each other's tool results); with
    ``rounds``, a ``Flow`` runs the crew once per round until the guard stopped it (the router reads
    ``stop_of(flow)``; a round whose first model call the guard stops raises ``RepeatGuardStopped``, which the round
    catches, as the README shows). A tool that needs approval is put to a human by a ``before_tool_call`` hook of
    the driver's own (registered after the guard's: CrewAI stops at the first hook that blocks, so a refused call is
    never asked about), which blocks a rejected call. What the model saw is read from each agent's executor history.
    """

    def __init__(self, **options: Any) -> None:
        self.options = options
        """More ``RepeatGuard`` options (``clock=``, ``fail=``, ...)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one conversation of a fresh crew; one outcome per turn."""
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        agents = [self._agent(scenario, box, cursor, n) for n, cursor in enumerate(cursors)]
        crew = _crew(agents)
        flow = _Rounds(crew=crew, rounds=scenario.rounds) if scenario.rounds > 1 else None
        guard = RepeatGuard(scenario.policy, **self.options).attach(flow if flow is not None else crew)
        approval = _approval(box, {tool.name for tool in scenario.tools if tool.needs_approval})
        outcomes: list[TurnOutcome] = []
        try:
            for number, turn in enumerate(scenario.turns):
                for cursor in cursors:
                    cursor.start_turn(number)
                if flow is not None:
                    flow.seen.clear()
                    flow.kickoff(inputs={"message": turn.message})
                    final, seen, rounds = flow.final, list(flow.seen), flow.ran
                else:
                    final = _raw(crew.kickoff(inputs={"message": turn.message}))
                    seen, rounds = [text for agent in agents for text in tool_results(agent)], 1
                outcomes.append(
                    TurnOutcome(
                        final=final,
                        stop=stop_of(flow if flow is not None else crew),
                        seen=seen,
                        model_calls=sum(cursor.step for cursor in cursors),
                        stop_messages=int(final.startswith(STOPPED)),
                        rounds=rounds,
                    )
                )
        finally:
            guard.detach()
            if approval is not None:
                unregister_before_tool_call_hook(approval)
        return outcomes

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run ``scenario``'s first turn on a fresh crew whose guard keeps its states in ``store``, as a server
        serves a retried request: conversation and turn named by ``repeat_hooks.kit.request(...)``."""
        cursor = Cursor(scenario)
        cursor.start_turn(0)
        agent = self._agent(scenario, box, cursor, 0)
        crew = _crew([agent])
        guard = RepeatGuard(scenario.policy, store=store, **self.options).attach(crew)
        with guard, request(conversation_id=conversation_id, turn_id=turn_id):
            final = _raw(crew.kickoff(inputs={"message": scenario.turns[0].message}))
        return TurnOutcome(
            final=final,
            stop=stop_of(crew),
            seen=tool_results(agent),
            model_calls=cursor.step,
            stop_messages=int(final.startswith(STOPPED)),
        )

    def _agent(self, scenario: Scenario, box: ToolBox, cursor: Cursor, n: int) -> Agent:
        """The kit's agent (``kit`` or ``kit_branch_<n>``), its model answering where ``cursor`` is."""

        def script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Reply:
            reply = cursor.next()
            if isinstance(reply, str):
                return reply
            return [tool_call(call.tool, {"query": call.query}, identifier) for call, identifier in reply]

        return Agent(
            role="kit" if scenario.branches == 1 else f"kit_branch_{n}",
            goal="Answer the user.",
            backstory="A parcel desk.",
            llm=ScriptedLLM(model="scripted", then=script, record_requests=False),
            tools=[kit_tool(box, tool) for tool in scenario.tools],
            cache=False,
            verbose=False,
        )


def _crew(agents: Sequence[Agent]) -> Crew:
    tasks = [Task(description="{message}", expected_output="An answer.", agent=agent) for agent in agents]
    return Crew(agents=list[BaseAgent](agents), tasks=tasks, cache=False, verbose=False)


def _raw(output: Any) -> str:
    """The text of what a kickoff returned (a ``CrewOutput``)."""
    return str(output.raw)


class _Rounds(Flow[dict[str, Any]]):
    """The SDK's construct around the agent for ``Scenario.rounds``: a flow that kicks the crew off once per round,
    until it ran ``rounds`` times or the guard stopped the turn."""

    def __init__(self, *, crew: Crew, rounds: int) -> None:
        super().__init__()
        self._crew, self._rounds = crew, rounds
        self.seen: list[str] = []
        self.final, self.ran = "", 0

    @start()
    def begin(self) -> None:
        """The turn starts: no round ran yet."""
        self.ran, self.final = 0, ""

    @listen(or_(begin, "again"))
    def round(self) -> None:
        """One round: the crew's kickoff; a stop before its first model call is the ``RepeatGuardStopped`` caught."""
        self.ran += 1
        try:
            self.final = _raw(self._crew.kickoff(inputs={"message": self.state["message"]}))
        except RepeatGuardStopped as stopped:
            self.final = stopped.message
        self.seen += [text for agent in self._crew.agents for text in tool_results(agent)]

    @router(round)
    def next_round(self) -> str:
        """Another round, unless the rounds are done or the guard stopped the turn."""
        return "again" if self.ran < self._rounds and stop_of(self) is None else "done"


def _approval(box: ToolBox, tools: set[str]) -> Callable[[Any], bool | None] | None:
    """The driver's human: a ``before_tool_call`` hook asking ``box`` about each call of ``tools`` (``None``: no
    tool needs approval)."""
    if not tools:
        return None

    def approve(ctx: Any) -> bool | None:
        if ctx.tool_name not in tools:
            return None
        return None if box.ask(ctx.tool_name, str(ctx.tool_input.get("query"))) else False

    register_before_tool_call_hook(approve)
    return approve
