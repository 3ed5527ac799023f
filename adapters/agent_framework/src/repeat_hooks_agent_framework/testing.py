"""A testing aid: a scripted chat client that drives Agent Framework's real agent and function loop offline, with
no API key, and the conformance kit's ``Driver`` for Agent Framework.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    client = ScriptedClient(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = Agent(client=client, tools=[track_parcel], middleware=[RepeatGuardMiddleware(max_calls=2)])
    response = await agent.run("Keep checking FR-7731", session=agent.create_session())
    client.calls             # how many model calls reached the model
    tool_results(response)   # the tool results of the run, as the model reads them

The client is composed as the shipped ones are (``FunctionInvocationLayer``, ``ChatMiddlewareLayer``,
``ChatTelemetryLayer``, ``BaseChatClient``) and implements only ``_inner_get_response``
(``agent_framework/_clients.py:221``): the function loop, the middleware and the telemetry are the SDK's own. A
reply is a text (the model's answer) or a sequence of ``function_call(...)`` contents (one response asking for
those calls; the loop runs them concurrently by default).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_framework import (
    Agent,
    AgentResponse,
    AgentSession,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    FunctionTool,
    Message,
    ResponseStream,
    WorkflowBuilder,
    WorkflowContext,
    executor,
    tool,
)
from agent_framework.observability import ChatTelemetryLayer

from repeat_hooks.kit import request
from repeat_hooks.kit.conformance import STOPPED, Cursor, Scenario, Tool, ToolBox, TurnOutcome
from repeat_hooks.stores import StateStore

from .calls import result_view
from .guard import RepeatGuardMiddleware
from .state import stop_of

Reply = str | Sequence[Content]
"""One model response: a text answer, or the ``function_call`` contents it asks for."""
Script = Callable[["ScriptedClient", Sequence[Message]], Reply]
"""Makes the next response from the conversation (and the client, for fresh ids and the call count)."""

UNSUPPORTED: dict[str, str] = {}
"""Conformance scenarios Agent Framework cannot express (none)."""


def function_call(name: str, arguments: Mapping[str, Any] | None = None, call_id: str | None = None) -> Content:
    """A ``function_call`` content; ``call_id=None`` gives it a fresh id when the model answers (``call_1``, ...)."""
    return Content.from_function_call(call_id=call_id or "", name=name, arguments=json.dumps(dict(arguments or {})))


def keep_calling(name: str, arguments: Mapping[str, Any], parallel: int = 1) -> Script:
    """A script that calls ``name`` with ``arguments`` in every response, ``parallel`` calls at a time, forever."""

    def script(client: ScriptedClient, messages: Sequence[Message]) -> Reply:
        return [function_call(name, arguments) for _ in range(parallel)]

    return script


class ScriptedClient(
    FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], ChatTelemetryLayer[Any], BaseChatClient[Any]
):
    """A chat client that answers from a script (a testing aid). ``replies`` are used first, in order; after them
    ``then`` makes each response (``None``: the model answers ``"Done."``). ``input_tokens`` and ``output_tokens``
    are each response's reported usage."""

    def __init__(
        self,
        *replies: Reply | Script,
        then: Script | None = None,
        input_tokens: int = 100,
        output_tokens: int = 20,
        call_id_prefix: str = "call",
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.replies: list[Reply | Script] = list(replies)
        self.then = then
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.call_id_prefix = call_id_prefix
        self.calls = 0
        """How many model calls reached the model."""
        self._ids = itertools.count(1)

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Awaitable[ChatResponse[Any]] | ResponseStream[ChatResponseUpdate, ChatResponse[Any]]:
        """Fires for each model call: answers the next scripted reply (a text when tools are off), streamed as one
        update for ``stream=True``."""
        self.calls += 1
        reply = self._next_reply(messages)
        if isinstance(reply, str) or options.get("tool_choice") == "none":
            contents = [Content.from_text(reply if isinstance(reply, str) else "Done.")]
        else:
            contents = [
                Content.from_function_call(
                    call_id=call.call_id or f"{self.call_id_prefix}_{next(self._ids)}",
                    name=str(call.name),
                    arguments=call.arguments,
                    id=f"fc_{self.calls}_{index}",  # an occurrence id, as the shipped clients stamp
                )
                for index, call in enumerate(reply)
            ]
        usage: Any = {"input_token_count": self.input_tokens, "output_token_count": self.output_tokens}
        response = ChatResponse(messages=[Message(role="assistant", contents=contents)], usage_details=usage)
        if not stream:
            return _now(response)

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            yield ChatResponseUpdate(role="assistant", contents=contents)

        return ResponseStream(updates(), finalizer=lambda _: response)

    def _next_reply(self, messages: Sequence[Message]) -> Reply:
        if self.replies:
            reply = self.replies.pop(0)
            return reply(self, messages) if callable(reply) else reply
        if self.then is not None:
            return self.then(self, messages)
        return "Done."


async def _now(response: ChatResponse[Any]) -> ChatResponse[Any]:
    return response


def tool_results(response: AgentResponse[Any] | Sequence[Message]) -> list[str]:
    """The function results in a run's messages (or any messages), in order, as the text the model reads."""
    messages = response.messages if isinstance(response, AgentResponse) else response
    return [result_view(item) for message in messages for item in message.contents if item.type == "function_result"]


def history(session: AgentSession) -> list[Message]:
    """The conversation the session's built-in history provider keeps (``session.state["in_memory"]``)."""
    kept = (session.state.get("in_memory") or {}).get("messages") or []
    return [item if isinstance(item, Message) else Message.from_dict(item) for item in kept]


# -- the conformance kit's driver -------------------------------------------------------------------------


class Driver:
    """Runs a ``repeat_hooks.kit.conformance`` scenario on Agent Framework's real agent loop.

    One ``Agent`` with the scenario's tools (``@tool`` functions taking ``query``; a kit tool's ``read_only`` as
    MCP's ``readOnlyHint`` in the tool's ``additional_properties``; ``needs_approval`` as
    ``approval_mode="always_require"``), a ``ScriptedClient`` answering the scenario's script and
    ``RepeatGuardMiddleware(scenario.policy, **options)``; one ``AgentSession``, one ``agent.run`` per user turn,
    and one more per approval round (its answers from ``ToolBox.ask``) until the run asks for none. What the model
    saw is read from the session's history; the stop through ``stop_of``. Rounds run the agent in a workflow whose
    edge back to the agent reads ``stop_of``; branches are agents a workflow fans out to at once.
    """

    def __init__(self, *, stream: bool = False, **options: Any) -> None:
        self.stream = stream
        """Run each turn with ``agent.run(..., stream=True)``, its final response read once the stream is consumed."""
        self.options = options
        """More ``RepeatGuardMiddleware`` options (``cost=``, ``clock=``, ...)."""

    async def _ask(self, agent: Agent[Any], message: Any, **options: Any) -> AgentResponse[Any]:
        """One ``agent.run``, streamed (every update consumed) or not."""
        if not self.stream:
            response: AgentResponse[Any] = await agent.run(message, **options)
            return response
        stream = agent.run(message, stream=True, **options)
        async for _ in stream:
            pass
        return await stream.get_final_response()

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one conversation; one outcome per turn."""
        return asyncio.run(self._run(scenario, box))

    async def _run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        guard = RepeatGuardMiddleware(scenario.policy, **self.options)
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        agents = [self._agent(scenario, box, cursor, guard, n) for n, cursor in enumerate(cursors)]
        if scenario.rounds > 1 or scenario.branches > 1:
            return [await self._workflow_turn(scenario, agents, cursors, n) for n in range(len(scenario.turns))]
        (agent,), (cursor,) = agents, cursors
        session = agent.create_session()
        outcomes: list[TurnOutcome] = []
        for number, turn in enumerate(scenario.turns):
            cursor.start_turn(number)
            start = len(history(session))
            responses = [await self._ask(agent, turn.message, session=session)]
            while responses[-1].user_input_requests:
                answers = [
                    asked.to_function_approval_response(box.ask(*_asked(asked)))
                    for asked in responses[-1].user_input_requests
                ]
                responses.append(await self._ask(agent, Message(role="user", contents=answers), session=session))
            texts = [
                message.text for response in responses for message in response.messages if message.role == "assistant"
            ]
            outcomes.append(
                TurnOutcome(
                    final=responses[-1].text,
                    stop=stop_of(responses[-1]),
                    seen=tool_results(history(session)[start:]),
                    model_calls=cursor.step,
                    stop_messages=sum(text.startswith(STOPPED) for text in texts),
                )
            )
        return outcomes

    async def _workflow_turn(
        self, scenario: Scenario, agents: list[Agent[Any]], cursors: list[Cursor], number: int
    ) -> TurnOutcome:
        """One turn through a workflow: rounds, the agent with an edge back to itself that reads ``stop_of`` (its
        runs serve one request, so the caller names the turn: ``request(turn_id=...)``); branches, a fan-out from a
        dispatching executor to the agents, which run at once, each with its own session."""
        for cursor in cursors:
            cursor.start_turn(number)
        text = scenario.turns[number].message
        if scenario.rounds > 1:
            (agent,) = agents
            ran: list[Any] = []

            def again(response: Any) -> bool:
                ran.append(response)
                return len(ran) < scenario.rounds and stop_of(response) is None

            builder = WorkflowBuilder(start_executor=agent, max_iterations=scenario.rounds + 1)
            workflow = builder.add_edge(agent, agent, condition=again).build()
        else:

            @executor(id="dispatch")
            async def dispatch(message: str, ctx: WorkflowContext[list[Message]]) -> None:
                await ctx.send_message([Message(role="user", contents=[message])])

            workflow = WorkflowBuilder(start_executor=dispatch).add_fan_out_edges(dispatch, agents).build()
        with request(turn_id=f"turn-{number}"):
            result = await workflow.run(text)
        outputs = [item for item in result.get_outputs() if isinstance(item, AgentResponse)]
        names = {agent.name for agent in agents}
        started = sum(1 for event in result if event.type == "executor_invoked" and event.executor_id in names)
        texts = [message.text for output in outputs for message in output.messages if message.role == "assistant"]
        stops = [stop for stop in map(stop_of, outputs) if stop is not None]
        return TurnOutcome(
            final=outputs[-1].text if outputs else "",
            stop=stops[0] if stops else None,
            seen=[text for output in outputs for text in tool_results(output)],
            model_calls=sum(cursor.step for cursor in cursors),
            stop_messages=sum(text.startswith(STOPPED) for text in texts),
            rounds=started if scenario.rounds > 1 else 1,
        )

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run ``scenario``'s first turn on a fresh agent whose guard keeps its states in ``store``, as a server
        without sessions serves a retried request: ``repeat_hooks.kit.request(conversation_id=..., turn_id=...)``."""
        cursor = Cursor(scenario)
        cursor.start_turn(0)
        guard = RepeatGuardMiddleware(scenario.policy, store=store, **self.options)
        agent = self._agent(scenario, box, cursor, guard, 0)

        async def turn() -> AgentResponse[Any]:
            with request(conversation_id=conversation_id, turn_id=turn_id):
                return await self._ask(agent, scenario.turns[0].message)

        response = asyncio.run(turn())
        texts = [message.text for message in response.messages if message.role == "assistant"]
        return TurnOutcome(
            final=response.text,
            stop=stop_of(response),
            seen=tool_results(response),
            model_calls=cursor.step,
            stop_messages=sum(text.startswith(STOPPED) for text in texts),
        )

    def _agent(
        self, scenario: Scenario, box: ToolBox, cursor: Cursor, guard: RepeatGuardMiddleware, n: int
    ) -> Agent[Any]:
        """The kit's agent (``kit`` or ``kit_branch_<n>``), its model answering where ``cursor`` is."""

        def script(client: ScriptedClient, messages: Sequence[Message]) -> Reply:
            reply = cursor.next()
            if isinstance(reply, str):
                return reply
            return [function_call(call.tool, {"query": call.query}, identifier) for call, identifier in reply]

        return Agent(
            client=ScriptedClient(then=script),
            name="kit" if scenario.branches == 1 else f"kit_branch_{n}",
            tools=[kit_tool(box, item) for item in scenario.tools],
            middleware=[guard],
        )


def _asked(request_content: Content) -> tuple[str, str]:
    """The tool and query an approval request asks about."""
    call = request_content.function_call
    arguments = json.loads(call.arguments) if call is not None and isinstance(call.arguments, str) else {}
    return (str(call.name) if call is not None else ""), str(arguments.get("query", ""))


def kit_tool(box: ToolBox, item: Tool) -> FunctionTool:
    """A kit tool as an Agent Framework ``@tool`` taking ``query``: it yields to the event loop, then runs."""

    async def run(query: str) -> Any:
        await asyncio.sleep(0)
        return box.run(item.name, query)

    hints = {"readOnlyHint": item.read_only} if item.read_only is not None else None
    return tool(
        run,
        name=item.name,
        description=item.description,
        approval_mode="always_require" if item.needs_approval else "never_require",
        additional_properties=hints,
    )
