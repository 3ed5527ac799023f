"""A testing aid: a scripted chat model that drives the real ``create_agent`` loop offline, with no API key.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    model = ScriptedChatModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = create_agent(model, tools=[track_parcel], middleware=[RepeatGuardMiddleware(Policy())])
    agent.invoke({"messages": [("user", "Keep checking FR-7731")]})
    model.calls                  # how many model calls the agent made
    model.tool_results(2)        # the ToolMessage texts the 3rd call received after the last AIMessage

It is a ``BaseChatModel`` (the seam ``create_agent`` calls through ``bind_tools`` and ``invoke`` /
``ainvoke``), so every middleware hook, the tool node and the checkpointer run for real. Each tool call
it sends without an id gets a fresh one (an id set in the script, even ``""``, is kept); each response
reports ``usage_metadata`` when ``usage`` is set.

``Driver`` runs the conformance kit's scenarios (``repeat_hooks.testing``) on the real ``create_agent`` loop
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
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ConfigDict, Field, PrivateAttr, SkipValidation

from repeat_hooks import error_text
from repeat_hooks.testing import Cursor, Scenario, Tool, ToolBox, ToolFailed, TurnOutcome

from .guard import RepeatGuardMiddleware
from .state import stop_of

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
        return AIMessage(content=message.content, tool_calls=calls, usage_metadata=usage)

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
    """Runs a conformance scenario (``repeat_hooks.testing``) on LangChain's real ``create_agent`` loop.

    One agent per scenario: the scenario's tools as ``StructuredTool``\\ s taking ``query`` (a kit tool's
    ``read_only`` as MCP's ``readOnlyHint`` in the tool's ``metadata``, where ``langchain-mcp-adapters`` puts
    it), a ``ScriptedChatModel`` answering the scenario's script at the chat-model seam,
    ``RepeatGuardMiddleware(scenario.policy, **options)``, an ``InMemorySaver``; one thread, one ``invoke``
    (or ``ainvoke``) per user turn; the model answers what the kit's ``Cursor`` says comes next. A scripted
    failure raises ``ToolException`` with the kit's error text, which the tool turns into a
    ``status="error"`` ``ToolMessage`` (``handle_tool_error=True``). What the
    model saw is read from the thread's messages (the ``ToolMessage``\\ s after the turn's user message);
    the stop through ``stop_of``.
    """

    def __init__(self, *, asynchronous: bool = False, **options: Any) -> None:
        self.asynchronous = asynchronous
        """Run each turn with ``ainvoke`` (the async hooks) instead of ``invoke``."""
        self.options = options
        """More ``RepeatGuardMiddleware`` options (``cost=``, ``clock=``)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` on one thread of a fresh agent; one outcome per turn."""
        cursor = Cursor(scenario)
        model = ScriptedChatModel(then=_script(cursor))
        agent = create_agent(
            model,
            tools=[kit_tool(box, tool) for tool in scenario.tools],
            middleware=[RepeatGuardMiddleware(scenario.policy, **self.options)],
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": "kit"}, "recursion_limit": 200}
        outcomes: list[TurnOutcome] = []
        for number, turn in enumerate(scenario.turns):
            cursor.start_turn(number)
            user: Any = {"messages": [HumanMessage(content=turn.message)]}
            result = asyncio.run(agent.ainvoke(user, config)) if self.asynchronous else agent.invoke(user, config)
            messages: list[BaseMessage] = result["messages"]
            start = max(index for index, message in enumerate(messages) if isinstance(message, HumanMessage))
            seen = [str(message.text) for message in messages[start:] if isinstance(message, ToolMessage)]
            outcomes.append(TurnOutcome(final=str(messages[-1].text), stop=stop_of(result), seen=seen))
        return outcomes


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
