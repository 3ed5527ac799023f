"""A testing aid: a scripted chat model that drives the real ``create_agent`` loop offline, with no API key.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    model = ScriptedChatModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = create_agent(model, tools=[track_parcel], middleware=[RepeatGuardMiddleware(Policy())])
    agent.invoke({"messages": [("user", "Keep checking FR-7731")]})
    model.calls                  # how many model calls the agent made
    model.tool_results(2)        # the ToolMessage texts the 3rd call received after the last AIMessage

It is a ``BaseChatModel`` (the seam ``create_agent`` calls through ``bind_tools`` and ``invoke`` /
``ainvoke``), so every middleware hook, the tool node and the checkpointer run for real. Each tool call
it sends without an id gets a fresh one (an id set in the script, even ``""``, is kept); its
``invalid_tool_calls`` (calls whose arguments could not be parsed) are sent as scripted; each response
reports ``usage_metadata`` when ``usage`` is set.

``Driver`` runs the conformance kit's scenarios (``repeat_hooks.kit.conformance``) on the real ``create_agent`` loop
with this model.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from pydantic import ConfigDict, Field, PrivateAttr, SkipValidation

from repeat_hooks import StateStore
from repeat_hooks.kit.conformance import STOPPED, Cursor, Scenario, Tool, ToolBox, ToolFailed, TurnOutcome
from repeat_hooks.result import error_text

from .guard import RepeatGuardMiddleware
from .state import RepeatGuardState, stop_of

Reply = Callable[[Sequence[BaseMessage]], AIMessage]
"""Makes one response from the messages the model received."""


def call_message(*calls: tuple[str, Mapping[str, Any]], text: str = "") -> AIMessage:
    """An ``AIMessage`` asking for ``calls`` (name, arguments) in parallel; fresh ids are added when sent."""
    return AIMessage(content=text, tool_calls=[{"name": name, "args": dict(args), "id": None} for name, args in calls])


def keep_calling(name: str, arguments: Mapping[str, Any], parallel: int = 1) -> Reply:
    """A model that asks for ``name(arguments)`` in every response, ``parallel`` calls at a time, forever."""

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        return call_message(*[(name, arguments)] * parallel)

    return reply


def answer(text: str) -> Reply:
    """A model that answers ``text`` (no tool call): the turn ends normally."""

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        return AIMessage(content=text)

    return reply


def steps(*replies: AIMessage | Reply, then: Reply | None = None) -> Reply:
    """A model that plays ``replies`` by step within the turn: the ``n``-th response since the last user
    message is ``replies[n]``, then ``then``. It depends only on the messages, so two processes serving
    one thread (or a resumed run) script the same conversation.
    """

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        step = 0
        for message in reversed(messages):
            if isinstance(message, HumanMessage):
                break
            step += isinstance(message, AIMessage)
        if step < len(replies):
            scripted = replies[step]
            return scripted if isinstance(scripted, AIMessage) else scripted(messages)
        if then is None:
            raise RuntimeError(f"steps(): no reply scripted for step {step + 1} of the turn (set then=...)")
        return then(messages)

    return reply


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays ``replies`` in order, then ``then`` forever; records what it received.

    ``replies``: ``AIMessage``\\ s or ``Reply`` functions, one per model call. ``then``: the reply once they
    run out (``None``: an error, so a test sees an unexpected extra call). ``usage``: (input, output)
    tokens reported on every response, or ``None`` for no ``usage_metadata``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    replies: Annotated[list[AIMessage | Reply], SkipValidation] = Field(default_factory=list)
    then: Reply | None = None
    usage: tuple[int, int] | None = None
    received: list[list[BaseMessage]] = Field(default_factory=list)
    """The messages of every call, in call order."""
    tools_offered: list[str] = Field(default_factory=list)
    """The tool names ``create_agent`` bound, last binding."""
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _ids: itertools.count[int] = PrivateAttr(default_factory=itertools.count)

    @property
    def _llm_type(self) -> str:
        return "repeat-hooks-scripted"

    @property
    def calls(self) -> int:
        """How many model calls were made."""
        return len(self.received)

    def tool_results(self, call: int) -> list[str]:
        """The texts of the ``ToolMessage``\\ s call ``call`` (0-based) received after its last ``AIMessage``."""
        texts: list[str] = []
        for message in reversed(self.received[call]):
            if not isinstance(message, ToolMessage):
                break
            texts.append(message.text)
        return texts[::-1]

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Accepts the agent's tools (records their names); the script decides the calls."""
        self.tools_offered = [str(getattr(tool, "name", None) or getattr(tool, "__name__", tool)) for tool in tools]
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            index = len(self.received)
            self.received.append(list(messages))
            number = next(self._ids)
        if index < len(self.replies):
            scripted = self.replies[index]
        elif self.then is not None:
            scripted = self.then
        else:
            raise RuntimeError(f"ScriptedChatModel: no reply scripted for call {index + 1} (set then=...)")
        message = scripted if isinstance(scripted, AIMessage) else scripted(messages)
        calls = [
            {**call, "id": f"call_{number}_{position}_{uuid.uuid4().hex[:8]}" if call.get("id") is None else call["id"]}
            for position, call in enumerate(message.tool_calls)
        ]
        usage: UsageMetadata | None = None
        if self.usage is not None:
            tokens_in, tokens_out = self.usage
            usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}
        return AIMessage(
            content=message.content,
            tool_calls=calls,
            invalid_tool_calls=message.invalid_tool_calls,
            usage_metadata=usage,
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])


class Driver:
    """Runs a conformance scenario (``repeat_hooks.kit.conformance``) on LangChain's real ``create_agent`` loop.

    One agent per scenario: the scenario's tools as ``StructuredTool``\\ s taking ``query`` (a kit tool's
    ``read_only`` as MCP's ``readOnlyHint`` in the tool's ``metadata``, where ``langchain-mcp-adapters`` puts
    it), a ``ScriptedChatModel`` answering the scenario's script at the chat-model seam,
    ``RepeatGuardMiddleware(scenario.policy, **options)``, an ``InMemorySaver``; one thread, one ``invoke``
    (or ``ainvoke``) per user turn; the model answers what the kit's ``Cursor`` says comes next. A scripted
    failure raises ``ToolException`` with the kit's error text, which the tool turns into a
    ``status="error"`` ``ToolMessage`` (``handle_tool_error=True``). What the
    model saw is read from the thread's messages (the ``ToolMessage``\\ s after the turn's user message);
    the stop through ``stop_of``; the stop messages are the turn's ``AIMessage``\\ s that hold one. Tools
    that need approval are put to ``HumanInTheLoopMiddleware(interrupt_on={...})`` as it comes, listed
    before the guard; each interrupt's calls go to ``ToolBox.ask`` and the turn resumes with
    ``Command(resume={"decisions": [...]})`` until no interrupt is left.
    """

    def __init__(self, *, asynchronous: bool = False, **options: Any) -> None:
        self.asynchronous = asynchronous
        """Run each turn with ``ainvoke`` (the async hooks) instead of ``invoke``."""
        self.options = options
        """More ``RepeatGuardMiddleware`` options (``cost=``, ``clock=``)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` on one thread of a fresh agent; one outcome per turn."""
        if scenario.branches > 1:
            return self._branches(scenario, box)
        cursor = Cursor(scenario)
        model = ScriptedChatModel(then=_script(cursor))
        middleware: list[Any] = [RepeatGuardMiddleware(scenario.policy, **self.options)]
        review: dict[str, Any] = {tool.name: True for tool in scenario.tools if tool.needs_approval}
        if review:
            middleware.insert(0, HumanInTheLoopMiddleware(interrupt_on=review))
        agent = create_agent(
            model,
            tools=[kit_tool(box, tool) for tool in scenario.tools],
            middleware=middleware,
            checkpointer=InMemorySaver() if scenario.rounds == 1 else True,  # a node's own state, kept across runs
        )
        ran = [0]
        if scenario.rounds > 1:
            agent = _loop(agent, scenario.rounds, ran)
        config: Any = {"configurable": {"thread_id": "kit"}, "recursion_limit": 200}
        outcomes: list[TurnOutcome] = []
        for number, turn in enumerate(scenario.turns):
            cursor.start_turn(number)
            ran[0] = 0
            run_input: Any = {"messages": [HumanMessage(content=turn.message)]}
            while True:
                result = self._invoke(agent, run_input, config)
                if not result.get("__interrupt__"):
                    break
                run_input = Command(resume=_review(box, result["__interrupt__"]))
            outcomes.append(_outcome(result, cursor, max(ran[0], 1)))
        return outcomes

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """The first turn of ``scenario`` on a fresh agent whose guard keeps its states in ``store``, named as a
        LangChain caller names a retried request's: the thread id (``configurable.thread_id``) and the run id
        (``config["run_id"]``, a UUID: the one made from ``turn_id``)."""
        cursor = Cursor(scenario)
        cursor.start_turn(0)
        agent = create_agent(
            ScriptedChatModel(then=_script(cursor)),
            tools=[kit_tool(box, tool) for tool in scenario.tools],
            middleware=[RepeatGuardMiddleware(scenario.policy, store=store, **self.options)],
            checkpointer=InMemorySaver(),
        )
        run_id = uuid.uuid5(uuid.NAMESPACE_URL, turn_id)
        config: Any = {"configurable": {"thread_id": conversation_id}, "run_id": run_id, "recursion_limit": 200}
        result = self._invoke(agent, {"messages": [HumanMessage(content=scenario.turns[0].message)]}, config)
        return _outcome(result, cursor, 1)

    def _branches(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Each turn on a graph whose nodes, started at once, each run an agent of their own (one middleware
        instance guards them all) on the user's message alone: none sees another's results."""
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        guard = RepeatGuardMiddleware(scenario.policy, **self.options)
        tools = [kit_tool(box, tool) for tool in scenario.tools]
        results: dict[int, Any] = {}
        graph = StateGraph(MessagesState)
        for n, cursor in enumerate(cursors):
            agent = create_agent(ScriptedChatModel(then=_script(cursor)), tools=tools, middleware=[guard])
            graph.add_node(f"kit_branch_{n}", _branch(agent, n, results, self.asynchronous))
            graph.add_edge(START, f"kit_branch_{n}")
            graph.add_edge(f"kit_branch_{n}", END)
        branches = graph.compile()
        outcomes: list[TurnOutcome] = []
        for number, turn in enumerate(scenario.turns):
            for cursor in cursors:
                cursor.start_turn(number)
            results.clear()
            self._invoke(branches, {"messages": [HumanMessage(content=turn.message)]}, {})
            ordered = [results[n] for n in range(len(cursors))]
            texts = [str(m.text) for result in ordered for m in result["messages"] if isinstance(m, AIMessage)]
            stops = [stop for stop in map(stop_of, ordered) if stop is not None]
            outcomes.append(
                TurnOutcome(
                    final=str(ordered[-1]["messages"][-1].text),
                    stop=stops[0] if stops else None,
                    seen=[str(m.text) for r in ordered for m in r["messages"] if isinstance(m, ToolMessage)],
                    model_calls=sum(cursor.step for cursor in cursors),
                    stop_messages=sum(text.startswith(STOPPED) for text in texts),
                )
            )
        return outcomes

    def _invoke(self, agent: Any, run_input: Any, config: Any) -> Any:
        return asyncio.run(agent.ainvoke(run_input, config)) if self.asynchronous else agent.invoke(run_input, config)


def _outcome(result: Any, cursor: Cursor, rounds: int) -> TurnOutcome:
    """What a turn's result shows: the ``ToolMessage``\\ s after its user message, the stop, the stop messages."""
    messages: list[BaseMessage] = result["messages"]
    start = max(index for index, message in enumerate(messages) if isinstance(message, HumanMessage))
    seen = [str(message.text) for message in messages[start:] if isinstance(message, ToolMessage)]
    stops = [m for m in messages[start:] if isinstance(m, AIMessage) and str(m.text).startswith(STOPPED)]
    return TurnOutcome(str(messages[-1].text), stop_of(result), seen, cursor.step, len(stops), rounds)


def _loop(agent: Any, rounds: int, ran: list[int]) -> Any:
    """``agent`` as the one node of a LangGraph graph whose edge runs it again, until it ran ``rounds`` times in
    the turn or the guard stopped it (a graph's edges are the application's code: this one reads ``stop_of``);
    ``ran[0]`` counts the rounds (the edge runs after each)."""

    def again(state: Any) -> str:
        ran[0] += 1
        return "kit" if ran[0] < rounds and stop_of(state) is None else END

    graph = StateGraph(RepeatGuardState)
    graph.add_node("kit", agent)
    graph.add_edge(START, "kit")
    graph.add_conditional_edges("kit", again, ["kit", END])
    return graph.compile(checkpointer=InMemorySaver())


def _branch(agent: Any, n: int, results: dict[int, Any], asynchronous: bool) -> Any:
    """A graph node running ``agent`` on the user's message alone; its result goes to ``results[n]``."""

    def run(state: MessagesState) -> dict[str, Any]:
        results[n] = agent.invoke({"messages": [state["messages"][-1]]})
        return {}

    async def arun(state: MessagesState) -> dict[str, Any]:
        results[n] = await agent.ainvoke({"messages": [state["messages"][-1]]})
        return {}

    return arun if asynchronous else run


def _review(box: ToolBox, interrupts: Sequence[Any]) -> dict[str, Any]:
    """The human's answer to ``HumanInTheLoopMiddleware``'s interrupt (batched: one per response): each call
    it shows put to ``box.ask``, approved or rejected in order."""
    (interrupt,) = interrupts
    decisions = [
        {"type": "approve" if box.ask(request["name"], str(request["args"]["query"])) else "reject"}
        for request in interrupt.value["action_requests"]
    ]
    return {"decisions": decisions}


def kit_tool(box: ToolBox, tool: Tool) -> BaseTool:
    """A kit ``Tool`` as a LangChain tool: one ``query`` argument; runs ``box.run``; a failure as an error result."""

    def run(query: str) -> Any:
        try:
            return box.run(tool.name, query)
        except ToolFailed as error:
            raise ToolException(error_text(error)) from error

    metadata = None if tool.read_only is None else {"readOnlyHint": tool.read_only}
    return StructuredTool.from_function(
        run, name=tool.name, description=tool.description, handle_tool_error=True, metadata=metadata
    )


def _script(cursor: Cursor) -> Reply:
    """The kit's scripted model: each call answers the cursor's next response, with the kit's call ids."""

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        scripted = cursor.next()
        if isinstance(scripted, str):
            return AIMessage(content=scripted)
        calls = [{"name": call.tool, "args": {"query": call.query}, "id": call_id} for call, call_id in scripted]
        return AIMessage(content="", tool_calls=calls)

    return reply
