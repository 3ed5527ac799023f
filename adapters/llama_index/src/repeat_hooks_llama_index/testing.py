"""A testing aid: a scripted model at LlamaIndex's model seam (``MockFunctionCallingLLM`` with a response
generator, llms/mock.py:294) that drives the real ``FunctionAgent`` / ``AgentWorkflow`` loop offline, with no API
key, and the conformance kit's ``Driver`` for LlamaIndex.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    script = Script(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = RepeatGuard(max_calls=2).agent(FunctionAgent(llm=script.llm(), tools=[track_parcel], streaming=False))
    output = await agent.run(user_msg="Keep checking FR-7731")
    script.calls                              # how many model calls reached the model
    await tool_results(agent_ctx)             # the tool results the memory holds, as the model read them

A reply is a text (the model's answer, which ends the run) or a list of ``ToolCallBlock`` (one response asking for
those calls; the agent runs them as concurrent steps).
"""

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.agent.workflow import AgentOutput, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent

from repeat_hooks.kit import request
from repeat_hooks.kit.conformance import STOPPED, Cursor, Scenario, Tool, ToolBox, TurnOutcome
from repeat_hooks.stores import StateStore

from .guard import RepeatGuard
from .state import stop_of

Reply = str | Sequence[ToolCallBlock]
"""One model response: a text answer, or the tool calls it asks for."""
Then = Callable[["Script", Sequence[ChatMessage]], Reply]
"""Makes the next response from the conversation (and the script, for fresh ids and the call count)."""

UNSUPPORTED = {
    "a_stop_ends_the_loop_around_the_agent": (
        "LlamaIndex has no construct that runs an agent again within one run: a text answer ends the workflow run "
        "(base_agent.py:570-619; AgentWorkflow: multi_agent_workflow.py:571-628), and every run is a turn"
    ),
    "the_loop_around_the_agent_runs_every_round": "as a_stop_ends_the_loop_around_the_agent: no loop construct",
    "the_same_answer_round_after_round_ends_the_loop": (
        "no loop construct, and a text answer ends the run, so max_same_answers can never trip (RepeatGuard "
        "refuses it at setup)"
    ),
    "isolated_branches_count_apart": (
        "AgentWorkflow runs one agent at a time (current_agent_name, multi_agent_workflow.py:644-668): there are no "
        "parallel branches; each agent counts its own calls (tests/adapters/llama_index/test_multiagent.py)"
    ),
}
"""The conformance scenarios LlamaIndex cannot express, with the SDK fact why (the kit's convention)."""


def call(name: str, arguments: Mapping[str, Any] | None = None, call_id: str | None = None) -> ToolCallBlock:
    """A tool call block; ``call_id=None`` gives it a fresh id when the model answers (``call_1``, ...)."""
    return ToolCallBlock(tool_call_id=call_id or "", tool_name=name, tool_kwargs=dict(arguments or {}))


def keep_calling(name: str, arguments: Mapping[str, Any], parallel: int = 1) -> Then:
    """A script that calls ``name`` with ``arguments`` in every response, ``parallel`` calls at a time, forever."""
    return lambda script, messages: [call(name, arguments) for _ in range(parallel)]


class Script:
    """A scripted model: ``replies`` first, in order, then ``then`` makes each response (``None``: ``"Done."``);
    ``llm()`` is the model to give the agent. Records every model call (``calls``, ``requests``)."""

    def __init__(self, *replies: Reply | Then, then: Then | None = None, record_requests: bool = True) -> None:
        self.replies: list[Reply | Then] = list(replies)
        self.then = then
        self.record_requests = record_requests
        self.calls = 0
        """How many model calls reached the model."""
        self.requests: list[list[ChatMessage]] = []
        """The conversation each call received, oldest first."""
        self._ids = itertools.count(1)

    def llm(self) -> MockFunctionCallingLLM:
        """LlamaIndex's mock function-calling model, answering from this script."""
        return MockFunctionCallingLLM(response_generator=self)

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        """Fires for each model call: the scripted reply as an assistant message."""
        self.calls += 1
        if self.record_requests:
            self.requests.append(list(messages))
        if self.replies:
            reply = self.replies.pop(0)
            reply = reply(self, messages) if callable(reply) else reply
        else:
            reply = self.then(self, messages) if self.then is not None else "Done."
        if isinstance(reply, str):
            return ChatMessage(role="assistant", content=reply)
        blocks = [
            block if block.tool_call_id else block.model_copy(update={"tool_call_id": f"call_{next(self._ids)}"})
            for block in reply
        ]
        return ChatMessage(role="assistant", blocks=list(blocks))


async def messages_of(ctx: Context) -> list[ChatMessage]:
    """Every message of the run's memory (the conversation as LlamaIndex keeps it)."""
    memory = await ctx.store.get("memory", default=None)
    return [] if memory is None else list(await memory.aget_all())


async def tool_results(ctx: Context, since: int = 0) -> list[str]:
    """The tool results in the memory's messages ``[since:]``, in order, as the text the model read."""
    return [message.content or "" for message in (await messages_of(ctx))[since:] if message.role == "tool"]


# -- the conformance kit's driver -------------------------------------------------------------------------


class Driver:
    """Runs a ``repeat_hooks.kit.conformance`` scenario on LlamaIndex's real ``FunctionAgent`` loop.

    One ``FunctionAgent`` (``streaming=False``) with the scenario's tools (async functions taking ``query``, which
    yield to the loop before ``ToolBox.run``), a ``Script`` answering the scenario's script, guarded by
    ``RepeatGuard(scenario.policy, **options).agent(...)``; one ``Context`` for the conversation, one
    ``agent.run(user_msg=..., ctx=ctx)`` per user turn. A tool raising ``ToolFailed`` is the error result LlamaIndex
    makes itself (its text). What the model saw is read from the memory; the stop through ``stop_of``.

    A tool that needs approval asks the human from inside the tool, as LlamaIndex's human-in-the-loop does:
    ``ctx.wait_for_event(HumanResponseEvent, waiter_event=InputRequiredEvent(...))``; the driver answers each
    ``InputRequiredEvent`` of the stream with ``ToolBox.ask``.
    """

    def __init__(self, **options: Any) -> None:
        self.options = options
        """More ``RepeatGuard`` options (``cost=``, ``clock=``, ...)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one conversation of a fresh agent; one outcome per turn."""
        return asyncio.run(self._run(scenario, box))

    async def _run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        cursor = Cursor(scenario)
        agent = RepeatGuard(scenario.policy, **self.options).agent(self._agent(scenario, box, cursor))
        ctx = Context(agent)
        outcomes = []
        for number, turn in enumerate(scenario.turns):
            cursor.start_turn(number)
            outcomes.append(await self._turn(agent, ctx, cursor, box, turn.message))
        return outcomes

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run ``scenario``'s first turn on a fresh agent whose guard keeps its states in ``store``, the conversation
        and the turn named by ``repeat_hooks.kit.request(conversation_id=..., turn_id=...)`` (LlamaIndex names
        neither)."""

        async def turn() -> TurnOutcome:
            cursor = Cursor(scenario)
            cursor.start_turn(0)
            guard = RepeatGuard(scenario.policy, store=store, **self.options)
            agent = guard.agent(self._agent(scenario, box, cursor))
            with request(conversation_id=conversation_id, turn_id=turn_id):
                return await self._turn(agent, Context(agent), cursor, box, scenario.turns[0].message)

        return asyncio.run(turn())

    async def _turn(self, agent: Any, ctx: Context, cursor: Cursor, box: ToolBox, message: str) -> TurnOutcome:
        start = len(await messages_of(ctx))
        handler = agent.run(user_msg=message, ctx=ctx)
        async for event in handler.stream_events():
            if isinstance(event, ApprovalAsked):
                approved = box.ask(event.tool, event.query)
                handler.ctx.send_event(ApprovalGiven(tool=event.tool, query=event.query, approved=approved))
        output: AgentOutput = await handler
        texts = [m.content or "" for m in (await messages_of(ctx))[start:] if m.role == "assistant"]
        return TurnOutcome(
            final=str(output.response.content or ""),
            stop=stop_of(output),
            seen=await tool_results(ctx, start),
            model_calls=cursor.step,
            stop_messages=sum(text.startswith(STOPPED) for text in texts),
        )

    def _agent(self, scenario: Scenario, box: ToolBox, cursor: Cursor) -> FunctionAgent:
        def then(script: Script, messages: Sequence[ChatMessage]) -> Reply:
            reply = cursor.next()
            if isinstance(reply, str):
                return reply
            return [call(item.tool, {"query": item.query}, identifier) for item, identifier in reply]

        script = Script(then=then, record_requests=False)
        return FunctionAgent(
            name="kit",
            description="The conformance kit's agent.",
            llm=script.llm(),
            tools=[kit_tool(box, tool) for tool in scenario.tools],
            streaming=False,
        )


class ApprovalAsked(InputRequiredEvent):
    """A kit tool asks the human to approve its call (LlamaIndex's human-in-the-loop event, written to the stream)."""

    tool: str
    query: str


class ApprovalGiven(HumanResponseEvent):
    """The human's answer, sent back into the run (``handler.ctx.send_event``)."""

    tool: str
    query: str
    approved: bool


def kit_tool(box: ToolBox, tool: Tool) -> FunctionTool:
    """A kit tool as a LlamaIndex ``FunctionTool`` taking ``query``; one that needs approval asks the human first
    (``ApprovalAsked``, answered by ``ApprovalGiven``) and, rejected, returns ``"Not approved."`` without running."""

    async def run(query: str) -> Any:
        await asyncio.sleep(0)
        return box.run(tool.name, query)

    async def approved(ctx: Context, query: str) -> Any:
        answer = await ctx.wait_for_event(
            ApprovalGiven,
            waiter_event=ApprovalAsked(tool=tool.name, query=query),
            requirements={"tool": tool.name, "query": query},
        )
        if not answer.approved:
            return "Not approved."
        return await run(query)

    fn = approved if tool.needs_approval else run
    return FunctionTool.from_defaults(async_fn=fn, name=tool.name, description=tool.description)
