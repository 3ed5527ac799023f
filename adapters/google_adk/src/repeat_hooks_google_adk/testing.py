"""A testing aid: a scripted ``BaseLlm`` that drives the real ADK ``Runner`` offline, with no API key, and the
conformance kit's ``Driver`` for ADK.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    model = ScriptedLlm(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel])
    app = App(name="parcels", root_agent=agent, plugins=[RepeatGuardPlugin(match="tool", max_calls=2)])
    runner = InMemoryRunner(app=app)
    ...
    model.calls                      # how many model calls reached the model
    model.responses_received(2)      # {call_id: response dict} the 3rd request carried as tool results

Replies are lists of ``google.genai.types.Part`` (or a plain string: a text answer). Each response
reports ``usage_metadata`` as Gemini does. With ``RunConfig(streaming_mode=StreamingMode.SSE)`` the
text of a reply is streamed word by word as partial responses, then the whole reply comes once more,
final (as ADK's Gemini model does).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from google.adk.agents import LlmAgent, LoopAgent, ParallelAgent
from google.adk.agents.base_agent import BaseAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import PrivateAttr

from repeat_hooks.kit.conformance import STOPPED, Cursor, Scenario, Tool, ToolBox, ToolFailed, TurnOutcome
from repeat_hooks.result import error_text
from repeat_hooks.stores import StateStore

from .guard import RepeatGuardPlugin
from .state import stop_of

Reply = Sequence[types.Part] | str
"""One model response: its parts (function calls and/or text), or a text answer."""
Script = Callable[["ScriptedLlm", LlmRequest], Reply]
"""Makes the next response from the request (and the model, for fresh call ids and the call count)."""


def function_call(name: str, args: Mapping[str, Any] | None = None, call_id: str | None = None) -> types.Part:
    """A function-call part; ``call_id=None`` leaves the id to ADK (``adk-<uuid>``), as Gemini does."""
    return types.Part(function_call=types.FunctionCall(name=name, args=dict(args or {}), id=call_id))


def text(value: str) -> types.Part:
    """A text part: a reply of text parts only is the model's answer, which ends the agent's turn."""
    return types.Part(text=value)


def keep_calling(
    name: str,
    args: Mapping[str, Any] | Callable[[LlmRequest], Mapping[str, Any]],
    parallel: int = 1,
    say: str | None = None,
) -> Script:
    """A script that calls ``name`` in every response, ``parallel`` calls at a time, forever.

    ``args`` may be a function of the request (say, to read the user's message). ``say``: a text part
    before the calls (streamed word by word in SSE mode).
    """

    def script(model: ScriptedLlm, request: LlmRequest) -> Reply:
        arguments = args(request) if callable(args) else args
        calls = [function_call(name, arguments, model.new_call_id()) for _ in range(parallel)]
        return [text(say), *calls] if say else calls

    return script


def user_text(request: LlmRequest) -> str:
    """The text of the first user message in a request (the message that started the invocation)."""
    for content in request.contents:
        if content.role == "user":
            for part in content.parts or []:
                if part.text:
                    return part.text
    return ""


class ScriptedLlm(BaseLlm):
    """A ``BaseLlm`` that answers from a script and records every request (a testing aid).

    ``replies`` are used first, in order; after them, ``then`` makes each response (``None``: the
    model answers ``"Done."``). One instance may serve concurrent sessions (as ADK allows).
    """

    model: str = "scripted"
    input_tokens: int = 100
    """``usage_metadata.prompt_token_count`` of every response."""
    output_tokens: int = 20
    """``usage_metadata.candidates_token_count`` of every response."""
    call_id_prefix: str = "call"
    record_requests: bool = True
    """``False``: keep no copy of each request (``requests`` and ``responses_received`` stay empty), for
    benchmarks, where copying the growing history would weigh on every call."""
    _replies: list[Reply | Script] = PrivateAttr(default_factory=list)
    _then: Script | None = PrivateAttr(default=None)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)
    _ids: itertools.count[int] = PrivateAttr(default_factory=lambda: itertools.count(1))
    _calls: int = PrivateAttr(default=0)

    def __init__(self, *replies: Reply | Script, then: Script | None = None, **settings: Any) -> None:
        super().__init__(**settings)
        self._replies = list(replies)
        self._then = then

    @property
    def requests(self) -> list[LlmRequest]:
        """Every request received (copies of their contents), oldest first."""
        return self._requests

    @property
    def calls(self) -> int:
        """How many model calls reached the model."""
        return self._calls

    def new_call_id(self) -> str:
        """A fresh function-call id: ``call_1``, ``call_2``, ... (the prefix is ``call_id_prefix``)."""
        return f"{self.call_id_prefix}_{next(self._ids)}"

    def responses_received(self, index: int) -> dict[str, Any]:
        """``{call_id: response dict}`` of the tool results the ``index``-th request (0-based; -1: the last)
        carried in its latest message: what the model read of its previous calls."""
        contents = self._requests[index].contents
        if not contents:
            return {}
        return {
            str(part.function_response.id): part.function_response.response
            for part in contents[-1].parts or []
            if part.function_response is not None
        }

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Fires for each model call: records the request and yields the scripted response (streamed
        word by word first when ``stream``)."""
        self._calls += 1
        if self.record_requests:
            self._requests.append(LlmRequest(contents=copy.deepcopy(llm_request.contents)))
        reply = self._next_reply(llm_request)
        parts = [text(reply)] if isinstance(reply, str) else list(reply)
        if stream:
            for part in parts:
                if part.text:
                    words = part.text.split(" ")
                    for index, word in enumerate(words):
                        chunk = word if index == len(words) - 1 else word + " "
                        yield LlmResponse(content=types.Content(role="model", parts=[text(chunk)]), partial=True)
        yield LlmResponse(
            content=types.Content(role="model", parts=parts),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=self.input_tokens,
                candidates_token_count=self.output_tokens,
                total_token_count=self.input_tokens + self.output_tokens,
            ),
            partial=False if stream else None,
            turn_complete=True,
        )

    @asynccontextmanager
    async def connect(self, llm_request: LlmRequest) -> AsyncIterator[BaseLlmConnection]:
        """A live connection (``Runner.run_live``): each user message or batch of tool results sent makes one
        model call, answered from the script as in ``generate_content_async``, then ``turn_complete``."""
        connection = _LiveConnection(self, list(llm_request.contents))
        try:
            yield connection
        finally:
            await connection.close()

    def _next_reply(self, request: LlmRequest) -> Reply:
        if self._replies:
            reply = self._replies.pop(0)
            return reply(self, request) if callable(reply) else reply
        if self._then is not None:
            return self._then(self, request)
        return "Done."


class _LiveConnection(BaseLlmConnection):
    """``ScriptedLlm``'s live connection: a model call per content sent, its responses queued for ``receive``."""

    def __init__(self, model: ScriptedLlm, history: list[types.Content]) -> None:
        self.model = model
        self.history = history
        self.queue: asyncio.Queue[LlmResponse | None] = asyncio.Queue()

    async def send_history(self, history: list[types.Content]) -> None:
        self.history = list(history)
        if history and history[-1].role == "user":
            await self._answer()

    async def send_content(self, content: types.Content) -> None:
        self.history.append(content)
        await self._answer()

    async def send_realtime(self, blob: Any) -> None:
        return None

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        while True:
            response = await self.queue.get()
            if response is None:
                return
            yield response

    async def close(self) -> None:
        await self.queue.put(None)

    async def _answer(self) -> None:
        request = LlmRequest(contents=copy.deepcopy(self.history))
        async for response in self.model.generate_content_async(request):
            if response.content is not None:
                self.history.append(response.content)
            await self.queue.put(response)


# -- the conformance kit's driver -------------------------------------------------------------------------

UNSUPPORTED: dict[str, str] = {}
"""Kit scenarios ADK itself cannot express, with the reason: none (every scenario runs on the real Runner)."""

CONFIRMATION = "adk_request_confirmation"
"""The function call ADK sends the user to ask for a tool's confirmation (``require_confirmation``)."""


class Driver:
    """Runs a ``repeat_hooks.kit.conformance`` scenario on ADK's real ``Runner`` (the kit's ``Driver`` for ADK).

    One ``LlmAgent`` with the scenario's tools as ``FunctionTool``s (each takes ``query``; a tool that needs
    approval is ``require_confirmation=True``), a ``ScriptedLlm`` answering the scenario's script,
    ``RepeatGuardPlugin(scenario.policy, **options)`` on the ``App``, an ``InMemoryRunner``; one session, one
    invocation per user turn. ``rounds > 1``: the agent is the one sub-agent of a ``LoopAgent(max_iterations=
    rounds)``, its rounds counted by its ``before_agent_callback``; ``branches > 1``: copies of it, each with
    its own model and ``Cursor``, are the sub-agents of a ``ParallelAgent``. A confirmation ADK asks for is
    put to ``ToolBox.ask`` and answered (``confirmed``) as a new message of the same invocation, until none
    is asked. A tool that raises ``ToolFailed`` is answered by
    the agent's own ``on_tool_error_callback`` with ``{"error": "Type: text"}`` (without one, ADK fails the
    invocation). ADK's function tools carry no read-only hint: a kit tool's ``read_only`` is left to the
    policy's ``read_only`` setting. What the model saw is read from the session's events (the function
    responses of each invocation but ADK's confirmation placeholders); the stop through ``stop_of`` of the events
    the caller got; the stop messages from their final responses. ``run_turn`` (the kit's ``RETRIED``): see there.
    """

    def __init__(self, **options: Any) -> None:
        self.options = options
        """More ``RepeatGuardPlugin`` options (``cost=``, ``clock=``, ...)."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one session of a fresh runner; one outcome per turn."""
        return asyncio.run(self.run_async(scenario, box))

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run the first turn of ``scenario`` with the guard's states in ``store``, named as ADK names a retried
        request: the session id ``conversation_id`` (in a fresh in-memory session service: the process that ran
        it before is gone) and ``run_async(invocation_id=turn_id)``."""
        return asyncio.run(self.run_async(scenario, box, store=store, session_id=conversation_id, turns=[turn_id]))[0]

    async def run_async(
        self,
        scenario: Scenario,
        box: ToolBox,
        *,
        store: StateStore | None = None,
        session_id: str | None = None,
        turns: Sequence[str | None] = (),
    ) -> list[TurnOutcome]:
        """``run``, from a running event loop; with ``turns``, only those turns, each with its invocation id."""
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        agents: list[BaseAgent] = [
            _kit_agent(scenario, box, cursor, "kit_agent" if len(cursors) == 1 else f"kit_branch_{n}")
            for n, cursor in enumerate(cursors)
        ]
        with warnings.catch_warnings():  # ADK 2.x deprecates both for Workflow, which cannot hold an LlmAgent yet
            warnings.simplefilter("ignore", DeprecationWarning)
            root: BaseAgent = agents[0] if len(agents) == 1 else ParallelAgent(name="kit_branches", sub_agents=agents)
            starts: list[str] = []
            if scenario.rounds > 1:
                root.before_agent_callback = lambda callback_context: starts.append(callback_context.invocation_id)
                root = LoopAgent(name="kit_loop", sub_agents=[root], max_iterations=scenario.rounds)
        plugin = RepeatGuardPlugin(
            scenario.policy, **{**self.options, **({"store": store} if store is not None else {})}
        )
        runner = InMemoryRunner(app=App(name="kit", root_agent=root, plugins=[plugin]))
        session = await runner.session_service.create_session(app_name="kit", user_id="kit", session_id=session_id)
        outcomes: list[TurnOutcome] = []
        for number, turn in enumerate(scenario.turns):
            if turns and number >= len(turns):
                break
            for cursor in cursors:
                cursor.start_turn(number)
            message: types.Content | None = types.Content(role="user", parts=[types.Part(text=turn.message)])
            events = []
            invocation_id = turns[number] if turns else None
            while message is not None:
                batch = [
                    event
                    async for event in runner.run_async(
                        user_id="kit", session_id=session.id, new_message=message, invocation_id=invocation_id
                    )
                ]
                events += batch
                message = _approve(box, batch)
            invocations = {event.invocation_id for event in events}
            rounds = sum(invocation in invocations for invocation in starts) if scenario.rounds > 1 else 1
            finals = [_text(event) for event in events if event.is_final_response() and event.content is not None]
            finals = [text for text in finals if text]  # a confirmation request is a final response with no text
            stored = await runner.session_service.get_session(app_name="kit", user_id="kit", session_id=session.id)
            assert stored is not None
            seen = [
                _as_text(reply.response)
                for event in stored.events
                if event.invocation_id in invocations
                for reply in event.get_function_responses()
                if reply.name != CONFIRMATION and not _placeholder(reply.response)
            ]
            outcomes.append(
                TurnOutcome(
                    final=finals[-1] if finals else "",
                    stop=stop_of(events),
                    seen=seen,
                    model_calls=sum(cursor.step for cursor in cursors),
                    stop_messages=sum(text.startswith(STOPPED) for text in finals),
                    rounds=rounds,
                )
            )
        return outcomes


def _kit_agent(scenario: Scenario, box: ToolBox, cursor: Cursor, name: str) -> LlmAgent:
    """The kit's agent: its tools, and a ``ScriptedLlm`` answering where ``cursor`` is."""

    def script(model: ScriptedLlm, request: LlmRequest) -> Reply:
        reply = cursor.next()
        if isinstance(reply, str):
            return reply
        return [function_call(call.tool, {"query": call.query}, call_id) for call, call_id in reply]

    return LlmAgent(
        name=name,
        model=ScriptedLlm(then=script, record_requests=False),
        tools=[_kit_tool(box, tool) for tool in scenario.tools],
        on_tool_error_callback=_answer_failure,
    )


def _approve(box: ToolBox, events: Sequence[Any]) -> types.Content | None:
    """The user's answer to the confirmations ADK asked for in ``events`` (each put to ``box.ask``), or ``None``."""
    answers = []
    for event in events:
        for request in event.get_function_calls():
            if request.name == CONFIRMATION:
                original = dict(request.args or {})["originalFunctionCall"]
                confirmed = box.ask(original["name"], str(original["args"]["query"]))
                response = types.FunctionResponse(name=CONFIRMATION, id=request.id, response={"confirmed": confirmed})
                answers.append(types.Part(function_response=response))
    return types.Content(role="user", parts=answers) if answers else None


def _placeholder(reply: Mapping[str, Any] | None) -> bool:
    """ADK's own answer to a call waiting for its confirmation (no result of a run: the run comes later)."""
    return dict(reply or {}).get("error") == "This tool call requires confirmation, please approve or reject."


def _text(event: Any) -> str:
    return "".join(part.text or "" for part in event.content.parts or [])


def _kit_tool(box: ToolBox, tool: Tool) -> FunctionTool:
    async def run(query: str) -> Any:
        await asyncio.sleep(0)  # ADK runs a response's calls as tasks: let them interleave
        return box.run(tool.name, query)

    run.__name__ = tool.name
    run.__doc__ = tool.description
    return FunctionTool(run, require_confirmation=tool.needs_approval)


def _answer_failure(
    tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
) -> dict[str, Any] | None:
    """The agent's ``on_tool_error_callback``: hands the model a kit tool's failure as its response."""
    return {"error": error_text(error)} if isinstance(error, ToolFailed) else None


def _as_text(reply: Mapping[str, Any] | None) -> str:
    """A function response as the text the model reads: an error's text, a plain result, else its JSON."""
    reply = dict(reply or {})
    if set(reply) == {"error"} or set(reply) == {"result"}:
        value = next(iter(reply.values()))
        if isinstance(value, str):
            return value
    return json.dumps(reply, sort_keys=True, default=str)
