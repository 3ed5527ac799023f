"""A testing aid: a scripted model that drives pydantic-ai's real agent graph offline, with no API key.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    model = ScriptedModel(keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = Agent(model, tools=[track_parcel], capabilities=[RepeatGuard(Policy(max_refusals=3))])
    result = agent.run_sync("Keep checking FR-7731")
    model.calls                 # how many model requests reached the model (this process)
    model.tool_returns(2)       # what the 3rd request carried back as tool returns (refusals included)

It is a ``FunctionModel`` (the seam pydantic-ai offers for this), so ``run``, ``run_sync``,
``run_stream`` and ``iter`` all work. The script gets the conversation's step: the number of model
responses already in the messages it is sent (the history of earlier runs included). It depends on
nothing else, so two processes (a durable workflow's replay, a worker taking a run over) script the
same responses; call ids are ``call_<step>_<index>`` for the same reason.

``Driver`` runs the core's conformance scenarios (``repeat_hooks.kit.conformance``) on pydantic-ai's real agent
graph, a ``ScriptedModel`` answering each turn's script::

    from repeat_hooks.kit.conformance import SCENARIOS, ToolBox, check

    box = ToolBox(scenario)
    check(scenario, box, Driver().run(scenario, box))
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from pydantic_ai import (
    Agent,
    AgentRunResult,
    CallToolsNode,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    Tool,
    ToolApproved,
    ToolDenied,
    ToolFailed,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage

from repeat_hooks import StateStore
from repeat_hooks.kit import conformance as kit

from .guard import RepeatGuard
from .state import stop_of

Arguments = Mapping[str, Any] | str
"""A tool call's arguments: a dict, or JSON text sent as it is (even if not valid JSON)."""
Reply = Sequence[ModelResponsePart]
"""One response: tool calls and/or text."""
Script = Callable[[int], Reply]
"""Makes the response at conversation step ``n`` (0-based: model responses already in the messages)."""


def call(name: str, arguments: Arguments | None = None, *, step: int = 0, index: int = 0) -> ToolCallPart:
    """A tool call part with the deterministic id ``call_<step>_<index>``."""
    args: dict[str, Any] | str = dict(arguments) if isinstance(arguments, Mapping) else (arguments or {})
    return ToolCallPart(name, args, tool_call_id=f"call_{step}_{index}")


def keep_calling(name: str, arguments: Arguments | None = None, parallel: int = 1) -> Script:
    """A script that calls ``name`` with ``arguments`` in every response, ``parallel`` calls at a time, forever."""

    def script(step: int) -> Reply:
        return [call(name, arguments, step=step, index=i) for i in range(parallel)]

    return script


def answer(text: str) -> Script:
    """A script that answers ``text`` at once (a cooperative model)."""
    return lambda step: [TextPart(text)]


def steps(*replies: Sequence[tuple[str, Arguments | None]] | str, then: Script | None = None) -> Script:
    """A script from a list: each item is a response's calls ``[(name, arguments), ...]`` or a text answer.

    Past the list, ``then`` (default: the last item forever).
    """

    def script(step: int) -> Reply:
        if step >= len(replies) and then is not None:
            return then(step)
        item = replies[min(step, len(replies) - 1)]
        if isinstance(item, str):
            return [TextPart(item)]
        return [call(name, arguments, step=step, index=i) for i, (name, arguments) in enumerate(item)]

    return script


class ScriptedModel(FunctionModel):
    """A ``FunctionModel`` answering from a ``Script``; records what each request received.

    Each response reports ``usage`` (``input_tokens`` / ``output_tokens`` as given), as real models do.
    """

    def __init__(
        self,
        script: Script,
        *,
        input_tokens: int = 100,
        output_tokens: int = 20,
        model_name: str = "scripted",
    ) -> None:
        super().__init__(self._respond, stream_function=self._stream, model_name=model_name)
        self.script = script
        self.usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens)
        self.requests: list[list[ModelMessage]] = []
        """The messages each request carried, in order (this process only)."""

    @property
    def calls(self) -> int:
        """Model requests that reached this model."""
        return len(self.requests)

    def tool_returns(self, n: int) -> list[str]:
        """The tool returns (refusals included) the ``n``-th request (0-based) carried in its last message."""
        return tool_returns(self.requests[n])

    def _reply(self, messages: list[ModelMessage]) -> Reply:
        self.requests.append(list(messages))
        return self.script(step_of(messages))

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # async: FunctionModel awaits it on the event loop (a plain function would go to a thread).
        return ModelResponse(parts=list(self._reply(messages)), usage=self.usage)

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        for index, part in enumerate(self._reply(messages)):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                args = part.args if isinstance(part.args, str) else json.dumps(part.args or {})
                yield {index: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}


def tool_returns(messages: Sequence[ModelMessage]) -> list[str]:
    """The tool returns (refusals included) in the last message of ``messages``, as text."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return []
    return [str(part.content) for part in last.parts if isinstance(part, ToolReturnPart)]


def step_of(messages: Sequence[ModelMessage]) -> int:
    """The conversation's step: how many model responses the messages hold (the guard's own included)."""
    return sum(1 for message in messages if isinstance(message, ModelResponse))


# -- the conformance kit's driver ---------------------------------------------------------------------

UNSUPPORTED: dict[str, str] = {
    "one_call_id_for_different_calls": (
        "pydantic-ai refuses a response whose function calls share a tool_call_id before any hook or tool "
        "runs: UnexpectedModelBehavior('Function tool calls must have unique `tool_call_id` values', "
        "pydantic_ai/_tool_execution.py:749-752)"
    ),
    **dict.fromkeys(
        [item.name for item in kit.SCENARIOS if item.rounds > 1],
        "pydantic-ai has no construct that runs an agent again after its output: a run's graph ends at its first "
        "final result (End, pydantic_ai/_agent_graph.py:4302); a loop around agent.run is the caller's own "
        "code, each run a turn",
    ),
}
"""Kit scenarios pydantic-ai itself cannot express, and why (their own tests prove the SDK's behaviour)."""

TOOL_RETRIES = 8
"""The tool retry budget of the kit's agents (``Agent(retries={"tools": TOOL_RETRIES})``), as a user raises it.
pydantic-ai charges each call of a tool the agent lacks to the agent's budget (``default_max_retries``,
``tool_manager.py:894``), the guard's refusals too (it charges while resolving the name, before any hook), and at
its end fails the run with ``UnexpectedModelBehavior`` (``_check_max_retries``, ``tool_manager.py:527-531``): its
default of 1 ends ``a_tool_the_agent_lacks_fails_like_any_other`` at the 2nd call, before a loop forms
(``tests/adapters/pydantic_ai/test_unknown_tools.py``). No other kit scenario draws on it: a kit failure is a
``ToolFailed``, which pydantic-ai does not charge."""


class Driver:
    """Runs a conformance ``Scenario`` on pydantic-ai's real agent graph (one ``agent.run`` per user turn,
    the conversation carried by ``message_history``), a ``ScriptedModel`` answering from the kit's
    ``Cursor`` (the turn's next scripted response at each model call that reaches it).

    ``pause_after=k``: each turn runs with ``agent.iter``, is broken off at its ``k``-th ``CallToolsNode``
    and resumed with ``message_history=`` and no prompt (the same turn, its counts rebuilt from the
    history, or read from the store): every scenario must end as it does uninterrupted. ``store``: the guards
    keep the conversations' states in it (``RepeatGuard(store=...)``), not in the runs.

    A tool that needs approval is ``Tool(requires_approval=True)`` (the output ``[str, DeferredToolRequests]``):
    a run that ends asking is resumed with ``message_history=`` and ``DeferredToolResults`` of each call put to
    ``ToolBox.ask``, until it ends with text. ``branches > 1``: a guarded orchestrator calls one tool per
    branch in one response, each running a guarded kit agent of its own (its model on its own ``Cursor``):
    pydantic-ai's agent delegation; ``seen`` is then what the branches' models read.
    """

    def __init__(self, pause_after: int | None = None, store: StateStore | None = None) -> None:
        self.pause_after = pause_after
        self.store = store

    def run(self, scenario: kit.Scenario, box: kit.ToolBox) -> list[kit.TurnOutcome]:
        """Every turn of ``scenario`` on one guarded agent; one outcome per turn, read from pydantic-ai."""
        cursors = [kit.Cursor(scenario) for _ in range(scenario.branches)]
        branch_seen: list[str] = []
        if len(cursors) == 1:
            agent = _kit_agent(scenario, box, cursors[0], store=self.store)
        else:
            agent = _orchestrator(scenario, box, cursors, branch_seen, self.store)
        history: list[ModelMessage] = []
        outcomes: list[kit.TurnOutcome] = []
        conversation = f"kit-{uuid.uuid4().hex}"  # a store keeps the counts under it
        for number, turn in enumerate(scenario.turns):
            for cursor in cursors:
                cursor.start_turn(number)
            branch_seen.clear()
            if self.pause_after is None:
                result = agent.run_sync(turn.message, message_history=history, conversation_id=conversation)
            else:
                paused = asyncio.run(pause(agent, turn.message, history, self.pause_after, conversation))
                result = paused if not isinstance(paused, list) else agent.run_sync(message_history=paused)
            while isinstance(result.output, DeferredToolRequests):
                answers: dict[str, bool | ToolApproved | ToolDenied] = {
                    call.tool_call_id: box.ask(call.tool_name, str(call.args_as_dict()["query"]))
                    for call in result.output.approvals
                }
                result = agent.run_sync(
                    message_history=result.all_messages(), deferred_tool_results=DeferredToolResults(approvals=answers)
                )
            new = result.all_messages()[len(history) :]
            outcomes.append(outcome(result, new, cursors, branch_seen[:] if len(cursors) > 1 else None))
            history = result.all_messages()
        return outcomes

    def run_turn(
        self, scenario: kit.Scenario, box: kit.ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> kit.TurnOutcome:
        """The first turn of ``scenario`` on a fresh agent whose guard keeps its states in ``store``, the run named
        as a retried request names it: ``agent.run(conversation_id=..., run_id=<the request's id>)``."""
        cursor = kit.Cursor(scenario)
        cursor.start_turn(0)
        agent = _kit_agent(scenario, box, cursor, store=store)
        result = agent.run_sync(scenario.turns[0].message, conversation_id=conversation_id, run_id=turn_id)
        return outcome(result, result.all_messages(), [cursor])


def outcome(
    result: AgentRunResult[Any], new: list[ModelMessage], cursors: list[kit.Cursor], seen: list[str] | None = None
) -> kit.TurnOutcome:
    """A turn's outcome, read from pydantic-ai: its result and its ``new`` messages (``seen``: the branches')."""
    return kit.TurnOutcome(
        final=str(result.output),
        stop=stop_of(result),
        seen=tool_returns_of(new) if seen is None else seen,
        model_calls=sum(cursor.step for cursor in cursors),
        stop_messages=sum(text.startswith(kit.STOPPED) for text in texts_of(new)),
    )


def _kit_agent(
    scenario: kit.Scenario, box: kit.ToolBox, cursor: kit.Cursor, *, store: StateStore | None = None
) -> Agent[None, Any]:
    """The kit's guarded agent, its model answering where ``cursor`` is, its tool retry budget ``TOOL_RETRIES``."""
    output: Any = [str, DeferredToolRequests] if any(tool.needs_approval for tool in scenario.tools) else str
    return Agent(
        ScriptedModel(lambda step: cursor_reply(cursor)),
        tools=[kit_tool(tool, box) for tool in scenario.tools],
        capabilities=[RepeatGuard(scenario.policy, store=store)],
        output_type=output,
        retries={"tools": TOOL_RETRIES},
    )


def _orchestrator(
    scenario: kit.Scenario, box: kit.ToolBox, cursors: list[kit.Cursor], seen: list[str], store: StateStore | None
) -> Agent[None, Any]:
    """A guarded agent whose model calls ``ask_branch_<n>`` for every cursor in one response, then answers
    ``FINAL``; each call runs a guarded kit agent of its own (``usage=ctx.usage``) and adds what its model read
    to ``seen``."""

    def branch(agent: Agent[None, Any], name: str) -> Tool[None]:
        async def ask(ctx: RunContext[None]) -> str:
            result = await agent.run("Go.", usage=ctx.usage, conversation_id=f"{name}-{uuid.uuid4().hex}")
            seen.extend(tool_returns_of(result.all_messages()))
            return str(result.output)

        return Tool(ask, name=name, description="Ask one branch.")

    tools = [
        branch(_kit_agent(scenario, box, cursor, store=store), f"ask_branch_{n}") for n, cursor in enumerate(cursors)
    ]

    def script(step: int) -> Reply:
        if step % 2:
            return [TextPart(kit.FINAL)]
        return [ToolCallPart(tool.name, {}, tool_call_id=f"branch_{step}_{n}") for n, tool in enumerate(tools)]

    return Agent(ScriptedModel(script), tools=tools, capabilities=[RepeatGuard(scenario.policy, store=store)])


def tool_returns_of(messages: Sequence[ModelMessage]) -> list[str]:
    """Every tool return (refusals included) in ``messages``, in order, as the model reads it."""
    return [
        part.model_response_str()
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def texts_of(messages: Sequence[ModelMessage]) -> list[str]:
    """The text of every model response in ``messages`` that has one (the guard's stop message included)."""
    texts = [
        "".join(p.content for p in m.parts if isinstance(p, TextPart)) for m in messages if isinstance(m, ModelResponse)
    ]
    return [text for text in texts if text]


async def pause(
    agent: Agent[None, Any],
    prompt: str,
    history: list[ModelMessage],
    tool_steps: int,
    conversation_id: str | None = None,
) -> AgentRunResult[Any] | list[ModelMessage]:
    """Run a turn with ``iter``; broken off at its ``tool_steps``-th ``CallToolsNode``: the messages so far,
    else (it ended first) its result."""
    steps = 0
    async with agent.iter(prompt, message_history=history, conversation_id=conversation_id) as run:
        async for node in run:
            if isinstance(node, CallToolsNode):
                steps += 1
                if steps == tool_steps:
                    return run.all_messages()
        assert run.result is not None
        return run.result


def cursor_reply(cursor: kit.Cursor) -> Reply:
    """The kit's next scripted response as pydantic-ai parts: a text, or tool calls with the kit's ids."""
    reply = cursor.next()
    if isinstance(reply, str):
        return [TextPart(reply)]
    return [ToolCallPart(c.tool, {"query": c.query}, tool_call_id=call_id) for c, call_id in reply]


def kit_tool(tool: kit.Tool, box: kit.ToolBox) -> Tool[None]:
    """A pydantic-ai tool running ``tool`` through ``box``; a kit failure is a ``ToolFailed`` (a failed
    return the model reads). ``tool.read_only`` rides as an MCP ``readOnlyHint`` in the tool's metadata,
    where ``MCPToolset`` puts it (``tool_hints``).

    The tool is a coroutine that never awaits: each call of a parallel batch ends before the next one
    starts, the order in which a guard deciding call by call would let results restart counts.
    """

    async def run(query: str) -> Any:
        try:
            return box.run(tool.name, query)
        except kit.ToolFailed as error:
            raise ToolFailed(str(error)) from error

    metadata = None if tool.read_only is None else {"annotations": {"readOnlyHint": tool.read_only}}
    return Tool(
        run, name=tool.name, description=tool.description, metadata=metadata, requires_approval=tool.needs_approval
    )
