"""A testing aid: a scripted ``strands.models.Model`` that drives Strands' real agent loop offline, with no API
key, and the conformance kit's ``Driver`` for Strands.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = Agent(model=model, tools=[track_parcel], hooks=[RepeatGuardHooks(max_calls=2)], callback_handler=None)
    result = agent("Keep checking FR-7731")
    model.calls              # how many model calls reached the model
    tool_results(agent)      # the tool results the conversation holds, as the model reads them

A reply is a text (the model's answer, which ends the turn) or a sequence of ``tool_use(...)`` blocks (one
response asking for those calls; Strands runs them concurrently by default). The model streams each reply
as Strands' providers do (``messageStart``, content blocks, ``messageStop``, then ``metadata`` with the
response's ``usage`` and ``metrics``).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from strands import Agent
from strands.hooks import BeforeToolCallEvent, HookCallback, HookProvider, HookRegistry
from strands.models.model import Model
from strands.multiagent import GraphBuilder
from strands.multiagent.graph import GraphState
from strands.tools.decorator import DecoratedFunctionTool
from strands.tools.decorator import tool as strands_tool
from strands.types.content import Messages
from strands.types.interrupt import InterruptResponseContent
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec, ToolUse

from repeat_hooks.kit import request
from repeat_hooks.kit.conformance import STOPPED, Cursor, Scenario, Tool, ToolBox, TurnOutcome
from repeat_hooks.stores import StateStore

from .guard import RepeatGuardHooks
from .state import TURN_KEY, stop_of

T = TypeVar("T", bound=BaseModel)

Reply = str | Sequence[ToolUse]
"""One model response: a text answer, or the tool uses it asks for."""
Script = Callable[["ScriptedModel", Messages], Reply]
"""Makes the next response from the conversation (and the model, for fresh ids and the call count)."""


def tool_use(name: str, arguments: Mapping[str, Any] | None = None, call_id: str | None = None) -> ToolUse:
    """A ``toolUse`` block; ``call_id=None`` gives it a fresh id when the model answers (``call_1``, ...)."""
    use: dict[str, Any] = {"name": name, "input": dict(arguments or {})}
    if call_id is not None:
        use["toolUseId"] = call_id
    return use  # type: ignore[return-value]


def keep_calling(name: str, arguments: Mapping[str, Any], parallel: int = 1) -> Script:
    """A script that calls ``name`` with ``arguments`` in every response, ``parallel`` calls at a time, forever."""

    def script(model: ScriptedModel, messages: Messages) -> Reply:
        return [tool_use(name, arguments) for _ in range(parallel)]

    return script


class ScriptedModel(Model):
    """A Strands ``Model`` that answers from a script and records every request (a testing aid).

    ``replies`` are used first, in order; after them, ``then`` makes each response (``None``: the model
    answers ``"Done."``). ``input_tokens`` and ``output_tokens`` are each response's reported usage.
    ``record_requests=False`` keeps no copy of the conversation per call (for benchmarks).
    """

    def __init__(
        self,
        *replies: Reply | Script,
        then: Script | None = None,
        input_tokens: int = 100,
        output_tokens: int = 20,
        call_id_prefix: str = "call",
        record_requests: bool = True,
    ) -> None:
        self.replies: list[Reply | Script] = list(replies)
        self.then = then
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.call_id_prefix = call_id_prefix
        self.record_requests = record_requests
        self.calls = 0
        """How many model calls reached the model."""
        self.requests: list[Messages] = []
        """The conversation each call received (copies), oldest first."""
        self._ids = itertools.count(1)
        self._config: dict[str, Any] = {"model_id": "scripted"}

    def update_config(self, **model_config: Any) -> None:
        """Merge ``model_config`` into the configuration."""
        self._config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        """The configuration (``{"model_id": "scripted"}``)."""
        return self._config

    def new_call_id(self) -> str:
        """A fresh tool-use id: ``call_1``, ``call_2``, ... (the prefix is ``call_id_prefix``)."""
        return f"{self.call_id_prefix}_{next(self._ids)}"

    async def structured_output(
        self, output_model: type[T], prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, T | Any], None]:
        """Not scripted: Strands asks for structured output through a tool, which a script can call."""
        raise NotImplementedError("ScriptedModel answers structured output through the structured output tool")
        yield {}  # pragma: no cover

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Fires for each model call: records the conversation and streams the scripted reply."""
        self.calls += 1
        if self.record_requests:
            self.requests.append(copy.deepcopy(messages))
        reply = self._next_reply(messages)
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(reply, str):
            yield {"contentBlockDelta": {"delta": {"text": reply}}}
            yield {"contentBlockStop": {}}
            stop = "end_turn"
        else:
            for use in reply:
                identifier = use.get("toolUseId")
                if identifier is None:
                    identifier = self.new_call_id()
                yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": identifier, "name": use["name"]}}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(use.get("input", {}))}}}}
                yield {"contentBlockStop": {}}
            stop = "tool_use"
        yield {"messageStop": {"stopReason": stop}}  # type: ignore[typeddict-item]
        usage = {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.input_tokens + self.output_tokens,
        }
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}  # type: ignore[typeddict-item]

    def _next_reply(self, messages: Messages) -> Reply:
        if self.replies:
            reply = self.replies.pop(0)
            return reply(self, messages) if callable(reply) else reply
        if self.then is not None:
            return self.then(self, messages)
        return "Done."


def tool_results(agent: Agent, since: int = 0) -> list[str]:
    """The tool results in ``agent.messages[since:]``, in order, as the text the model reads (a result that
    is not one text block as its JSON)."""
    texts: list[str] = []
    for message in agent.messages[since:]:
        for block in message["content"]:
            result = block.get("toolResult")
            if result is None:
                continue
            content = result["content"]
            if len(content) == 1 and "text" in content[0]:
                texts.append(content[0]["text"])
            else:
                texts.append(json.dumps(content, sort_keys=True, default=str))
    return texts


def final_text(agent: Agent) -> str:
    """The text of the conversation's last message (after a turn: the final text the caller got)."""
    if not agent.messages:
        return ""
    return "".join(block.get("text", "") for block in agent.messages[-1]["content"])


# -- the conformance kit's driver -------------------------------------------------------------------------


class Driver:
    """Runs a ``repeat_hooks.kit.conformance`` scenario on Strands' real agent loop (the kit's ``Driver`` for Strands).

    One ``Agent`` with the scenario's tools (``@tool`` functions taking ``query``; a kit tool's ``read_only``
    is carried as Strands carries MCP's: ``tool_spec["annotations"]["readOnlyHint"]``), a ``ScriptedModel``
    answering the scenario's script, ``RepeatGuardHooks(scenario.policy, **options)`` in its hooks, and
    Strands' default (concurrent) tool executor unless ``tool_executor`` is given; one conversation, one
    ``agent(message)`` per user turn. A tool raising ``ToolFailed`` is an error result Strands makes
    itself (``Error: ToolFailed - ...``). What the model saw is read from ``agent.messages``; the stop
    through ``stop_of``; the stop messages are the turn's assistant messages that hold one.

    A tool that needs approval is put to a human by a hook of the driver's own (``Approval``, listed after the
    guard), which raises Strands' interrupt (``event.interrupt``) for each call the guard let through; the
    turn resumes with ``agent([{"interruptResponse": ...}])``, each answer from ``ToolBox.ask``, until it
    ends without one.
    """

    def __init__(self, *, tool_executor: Any = None, **options: Any) -> None:
        self.tool_executor = tool_executor
        self.options = options
        """More ``RepeatGuardHooks`` options (``cost=``, ``clock=``, ...)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one conversation of a fresh agent; one outcome per turn."""
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        guard = RepeatGuardHooks(scenario.policy, **self.options)
        approval = Approval({tool.name for tool in scenario.tools if tool.needs_approval})
        agents = [self._agent(scenario, box, cursor, [guard, approval], n) for n, cursor in enumerate(cursors)]
        graph = _graph(scenario, agents) if scenario.rounds > 1 or scenario.branches > 1 else None
        outcomes: list[TurnOutcome] = []
        for number, turn in enumerate(scenario.turns):
            for cursor in cursors:
                cursor.start_turn(number)
            starts = [len(agent.messages) for agent in agents]
            rounds = 1
            if graph is not None:
                ran = graph(turn.message).execution_order
                if scenario.rounds > 1:
                    rounds = len(ran)  # the one node's runs, as the graph ordered them
            else:
                (agent,) = agents
                result = agent(turn.message)
                while result.stop_reason == "interrupt":
                    answers: list[InterruptResponseContent] = [
                        {"interruptResponse": {"interruptId": item.id, "response": box.ask(*item.reason)}}
                        for item in result.interrupts or ()
                    ]
                    result = agent(answers)
            texts = [
                _text(message)
                for agent, start in zip(agents, starts, strict=True)
                for message in agent.messages[start:]
                if message["role"] == "assistant"
            ]
            stops = [stop for stop in map(stop_of, agents) if stop is not None]
            outcomes.append(
                TurnOutcome(
                    final=final_text(agents[-1]),
                    stop=stops[0] if stops else None,
                    seen=[
                        text for agent, start in zip(agents, starts, strict=True) for text in tool_results(agent, start)
                    ],
                    model_calls=sum(cursor.step for cursor in cursors),
                    stop_messages=sum(text.startswith(STOPPED) for text in texts),
                    rounds=rounds,
                )
            )
        return outcomes

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run ``scenario``'s first turn on a fresh agent whose guard keeps its states in ``store``, as a server
        without a session manager serves a retried request: the conversation named by
        ``repeat_hooks.kit.request(conversation_id=...)``, the turn by ``invocation_state={TURN_KEY: turn_id}``."""
        cursor = Cursor(scenario)
        cursor.start_turn(0)
        guard = RepeatGuardHooks(scenario.policy, store=store, **self.options)
        agent = self._agent(scenario, box, cursor, [guard], 0)
        with request(conversation_id=conversation_id):
            result = agent(scenario.turns[0].message, invocation_state={TURN_KEY: turn_id})
        texts = [_text(message) for message in agent.messages if message["role"] == "assistant"]
        return TurnOutcome(
            final=final_text(agent),
            stop=stop_of(result),
            seen=tool_results(agent),
            model_calls=cursor.step,
            stop_messages=sum(text.startswith(STOPPED) for text in texts),
        )

    def _agent(
        self, scenario: Scenario, box: ToolBox, cursor: Cursor, hooks: list[HookProvider | HookCallback[Any]], n: int
    ) -> Agent:
        """The kit's agent (``kit`` or ``kit_branch_<n>``), its model answering where ``cursor`` is."""

        def script(model: ScriptedModel, messages: Messages) -> Reply:
            reply = cursor.next()
            if isinstance(reply, str):
                return reply
            return [tool_use(call.tool, {"query": call.query}, identifier) for call, identifier in reply]

        extra: dict[str, Any] = {}
        if self.tool_executor is not None:
            extra["tool_executor"] = self.tool_executor
        return Agent(
            name="kit" if scenario.branches == 1 else f"kit_branch_{n}",
            model=ScriptedModel(then=script, record_requests=False),
            tools=[kit_tool(box, tool) for tool in scenario.tools],
            hooks=hooks,
            callback_handler=None,
            **extra,
        )


def _graph(scenario: Scenario, agents: list[Agent]) -> Any:
    """A Strands ``Graph`` around the kit's agents: with ``rounds > 1``, one node whose edge back to itself runs
    it again until it ran ``rounds`` times or the guard stopped it (the edge reads ``stop_of``, as the adapter
    documents for graphs); with ``branches > 1``, one node per agent and no edge (all run at once)."""
    builder = GraphBuilder()
    for agent in agents:
        builder.add_node(agent, agent.name)
    if scenario.rounds > 1:
        (agent,) = agents

        def again(state: GraphState) -> bool:
            ran = sum(1 for node in state.execution_order if node.node_id == agent.name)
            return ran < scenario.rounds and stop_of(agent) is None

        builder.add_edge(agent.name, agent.name, condition=again)
        builder.set_entry_point(agent.name)
    return builder.set_max_node_executions(max(scenario.rounds, len(agents))).build()


class Approval(HookProvider):
    """A human approval of each call of ``tools``, as a Strands user writes one: a ``BeforeToolCallEvent`` hook
    raising an interrupt (its reason ``(tool, query)``); a call the guard refused (``cancel_tool`` set by the
    guard's hook, registered first) is not put to anyone. A call not approved is cancelled."""

    def __init__(self, tools: set[str]) -> None:
        self.tools = tools

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Registers the approval on ``BeforeToolCallEvent``."""
        registry.add_callback(BeforeToolCallEvent, self.approve)

    def approve(self, event: BeforeToolCallEvent) -> None:
        """Fires before each tool call: for a call that needs approval and was not refused, asks (the first
        time: raises the interrupt) or reads the answer (on resume)."""
        name = str(event.tool_use["name"])
        if name not in self.tools or event.cancel_tool:
            return
        query = str(dict(event.tool_use["input"])["query"])
        if event.interrupt("kit_approval", reason=(name, query)) is not True:
            event.cancel_tool = "not approved"


def _text(message: Any) -> str:
    return "".join(block.get("text", "") for block in message["content"])


def kit_tool(box: ToolBox, tool: Tool) -> DecoratedFunctionTool[..., Any]:
    """A kit tool as a Strands ``@tool`` taking ``query``; its ``read_only`` as the spec's ``readOnlyHint``."""

    def run(query: str) -> Any:
        return box.run(tool.name, query)

    decorated: DecoratedFunctionTool[..., Any] = strands_tool(name=tool.name, description=tool.description)(run)
    if tool.read_only is not None:
        decorated.tool_spec = {**decorated.tool_spec, "annotations": {"readOnlyHint": tool.read_only}}
    return decorated
