"""Testing aids: a scripted ``Model`` that drives the real ``Runner`` offline, and the conformance ``Driver``.

Not for production. The tests of this package, the example and the benchmark use them; so can yours::

    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]))
    result = await Runner.run(agent, "Keep checking FR-7731", context=GuardState())
    model.calls                      # how many model calls the run made
    model.outputs_received(2)        # {call_id: text} the 3rd request carried as tool outputs

Each response reports ``usage`` (one request, ``input_tokens``/``output_tokens`` as set), as the
SDK's own models do. ``Driver`` runs a ``repeat_hooks.kit.conformance`` scenario on the real ``Runner`` with a
``ScriptedModel`` at the SDK's model seam (``Model``).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    Tool,
    ToolCallOutputItem,
    Usage,
    function_tool,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from repeat_hooks import GuardState, StateStore
from repeat_hooks.kit import conformance as kit
from repeat_hooks.kit import request

from .guard import guard_agent
from .state import stop_items, stop_of

Reply = Sequence[TResponseOutputItem]
"""One model response: its output items (tool calls and/or a message)."""
Script = Callable[[int, "ScriptedModel"], Reply]
"""Makes the response to the ``n``-th call (0-based), given the model (for fresh call ids)."""


@dataclass(frozen=True)
class ModelRequest:
    """What one model call received."""

    input: list[Any]
    """The input items (dicts in the Responses format), copied at call time."""
    tools: list[str]
    """The names of the tools offered."""
    handoffs: list[str]
    """The names of the handoff tools offered."""
    instructions: str | None


def tool_call(name: str, arguments: Mapping[str, Any] | str, call_id: str) -> ResponseFunctionToolCall:
    """A function call output item; ``arguments`` given as text are sent as they are (even if not JSON)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}", call_id=call_id, type="function_call", name=name, arguments=text
    )


def message(text: str, item_id: str = "msg_scripted") -> ResponseOutputMessage:
    """An assistant message output item: the model's answer, which ends the run."""
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def keep_calling(name: str, arguments: Mapping[str, Any] | str, parallel: int = 1) -> Script:
    """A script that calls ``name`` with ``arguments`` in every response, ``parallel`` calls at a time, forever."""

    def script(n: int, model: ScriptedModel) -> Reply:
        return [tool_call(name, arguments, model.new_call_id()) for _ in range(parallel)]

    return script


class ScriptedModel(Model):
    """A ``Model`` that answers from a script and records every request (a testing aid).

    ``replies`` are used first, in order; after them, ``then`` makes each response (``None``: the
    model answers ``"Done."``). Implements both ``get_response`` (``Runner.run``) and
    ``stream_response`` (``Runner.run_streamed``).
    """

    def __init__(
        self,
        *replies: Reply | Script,
        then: Script | None = None,
        input_tokens: int = 100,
        output_tokens: int = 20,
        call_id_prefix: str = "call",
        reports_usage: bool = True,
    ) -> None:
        self.replies = list(replies)
        self.then = then
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.requests: list[ModelRequest] = []
        """Every request received, oldest first."""
        self._ids = itertools.count(1)
        self._prefix = call_id_prefix
        self.reports_usage = reports_usage
        """``False``: responses carry no usage at all (like some third-party providers)."""

    @property
    def calls(self) -> int:
        """How many model calls were made."""
        return len(self.requests)

    def new_call_id(self) -> str:
        """A fresh call id: ``call_1``, ``call_2``, ..."""
        return f"{self._prefix}_{next(self._ids)}"

    def outputs_received(self, request: int) -> dict[str, Any]:
        """The tool outputs request number ``request`` (0-based; negative counts from the end) carried, by call id."""
        return {
            item["call_id"]: item["output"]
            for item in self.requests[request].input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }

    def usage(self) -> Usage:
        """The usage each response reports (all zero when ``reports_usage`` is off)."""
        if not self.reports_usage:
            return Usage()
        return Usage(
            requests=1,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
        )

    def _respond(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        tools: list[Tool],
        handoffs: list[Handoff[Any, Any]],
    ) -> list[TResponseOutputItem]:
        items: list[Any] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else copy.deepcopy(list(input))
        )
        n = len(self.requests)
        self.requests.append(
            ModelRequest(items, [t.name for t in tools], [h.tool_name for h in handoffs], system_instructions)
        )
        if n < len(self.replies):
            reply = self.replies[n]
            return list(reply(n, self) if callable(reply) else reply)
        if self.then is not None:
            return list(self.then(n, self))
        return [message("Done.")]

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
        **kwargs: Any,
    ) -> ModelResponse:
        """Fires for each model call of ``Runner.run``: records the request, returns the scripted response."""
        output = self._respond(system_instructions, input, tools, handoffs)
        return ModelResponse(output=output, usage=self.usage(), response_id=f"resp_{self.calls}")

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Fires for each model call of ``Runner.run_streamed``: yields ``response.created``, ``.completed``."""
        output = self._respond(system_instructions, input, tools, handoffs)
        response = Response(
            id=f"resp_{self.calls}",
            created_at=0,
            model="scripted",
            object="response",
            output=output,
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=True,
            status="completed",
            usage=None
            if not self.reports_usage
            else ResponseUsage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                total_tokens=self.input_tokens + self.output_tokens,
                input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            ),
        )
        yield ResponseCreatedEvent(type="response.created", sequence_number=0, response=response)
        yield ResponseCompletedEvent(type="response.completed", sequence_number=1, response=response)


# -- the conformance kit's driver ------------------------------------------------------------------------

UNSUPPORTED: dict[str, str] = {
    "one_call_id_for_different_calls": (
        "openai-agents 0.24 rejects a response that uses one call id for different calls before any hook or "
        "guardrail runs: ModelBehaviorError('Model reused a tool call ID for a different invocation in one "
        "response'), agents/run_internal/tool_planning.py:452-458 (_dedupe_processed_response_invocations)"
    ),
    "call_ids_reused_across_responses": (
        "openai-agents 0.24 does not run a call whose id and invocation match a call already completed in the "
        "run: it drops it from the response and the earlier output stands (agents/run_internal/"
        "tool_planning.py:442-451, filter_completed), so a model layer answering call_0 every time runs the "
        "tool once per run; the guard counts only the calls the SDK keeps (calls.batch_of)"
    ),
    "isolated_branches_count_apart": (
        "openai-agents 0.24 runs agents at once only as tools of another (Agent.as_tool, called in parallel), and "
        "it runs each nested agent with the outer run's context and Usage (agents/agent.py:761-765, "
        "ToolContext(context=context.context, usage=context.usage)): the guard counts their calls in the outer "
        "turn by design (test_agent_as_tool), so branches never count apart; agents run apart are the caller's "
        "asyncio.gather of Runner.run, one turn each"
    ),
    "a_tool_the_agent_lacks_fails_like_any_other": (
        "openai-agents 0.24 fails the run at the first call of a tool the agent lacks: ModelBehaviorError('Tool hex "
        "not found in agent kit'), agents/run_internal/turn_resolution.py:3845-3848 (RunConfig."
        "tool_not_found_behavior='raise_error', run_config.py:498): no loop to guard. With 'return_error_to_model' "
        "(:3836-3843) the SDK answers such a call itself after the function tools, no tool guardrail or hook firing "
        "for it (:1101-1108): its outcome shows only to a RunConfig.tool_error_formatter, and a response of such "
        "calls only asks no tool_use_behavior (:782-783), so no hook could end that turn with the stop's text; the "
        "guard leaves that opt-in mode to max_turns (test_a_tool_the_agent_lacks.py)"
    ),
    **dict.fromkeys(
        [item.name for item in kit.SCENARIOS if item.rounds > 1],
        "openai-agents 0.24 has no construct that runs an agent again after its final output: Runner.run ends at "
        "the first NextStepFinalOutput (agents/run.py:1351), and a handoff passes the turn on, it does not loop "
        "back; a loop around Runner.run is the caller's own code, one turn per run",
    ),
}
"""Kit scenarios this SDK cannot express, and why (each has a test of the SDK's own behaviour instead)."""


class Driver:
    """Runs a conformance scenario on the real ``Runner`` (``Runner.run``, or ``run_streamed`` if ``streamed``).

    One guarded agent (``guard_agent(agent, scenario.policy)``) and one ``GuardState`` per scenario (one
    conversation); each turn is one run, its model a ``ScriptedModel`` answering the scenario's script where
    the kit's ``Cursor`` is (passed as ``RunConfig(model=...)``), the history carried to the next turn as the
    SDK gives it (``result.to_input_list()``, plus ``stop_items``). ``seen`` is read from the run's own items.
    A tool that needs approval is ``needs_approval=True``: a run it interrupts is resumed from its ``RunState``
    (``result.to_state()``) with each interruption put to ``ToolBox.ask`` and approved or rejected as it says,
    until none is left. ``run_turn``: the first turn with the guard's states in a store, the conversation and the
    turn named with ``repeat_hooks.kit.request`` (the run context holds no state then).
    """

    def __init__(self, *, streamed: bool = False) -> None:
        self.streamed = streamed

    def run(self, scenario: kit.Scenario, box: kit.ToolBox) -> list[kit.TurnOutcome]:
        """Run every turn of ``scenario``; one ``TurnOutcome`` per turn."""
        return asyncio.run(self.run_async(scenario, box))

    async def run_async(self, scenario: kit.Scenario, box: kit.ToolBox) -> list[kit.TurnOutcome]:
        """``run``, for a caller already in an event loop."""
        cursor = kit.Cursor(scenario)
        agent = _agent(scenario, box)
        config = RunConfig(model=ScriptedModel(then=_script(cursor)), tracing_disabled=True)
        state = GuardState()
        history: list[TResponseInputItem] = []
        outcomes = []
        for number, turn in enumerate(scenario.turns):
            cursor.start_turn(number)
            result = await self._turn(agent, [*history, {"role": "user", "content": turn.message}], state, config, box)
            outcomes.append(_outcome(result, cursor))
            history = [*result.to_input_list(), *stop_items(result)]
        return outcomes

    def run_turn(
        self, scenario: kit.Scenario, box: kit.ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> kit.TurnOutcome:
        """The first turn of ``scenario``, the guard's states in ``store``, in ``request(conversation_id=...,
        turn_id=...)``: the spelling of a retried request's ids with this SDK."""
        cursor = kit.Cursor(scenario)
        cursor.start_turn(0)
        agent = _agent(scenario, box, store=store)
        config = RunConfig(model=ScriptedModel(then=_script(cursor)), tracing_disabled=True)

        async def turn() -> Any:
            with request(conversation_id=conversation_id, turn_id=turn_id):
                return await self._turn(agent, scenario.turns[0].message, None, config, box)

        return _outcome(asyncio.run(turn()), cursor)

    async def _turn(self, agent: Agent[Any], run_input: Any, state: Any, config: RunConfig, box: kit.ToolBox) -> Any:
        """One turn: its run, and the resumes of every interruption the ``box``'s human decided on."""
        while True:
            result = await self._run(agent, run_input, state, config)
            if not result.interruptions:
                return result
            run_input = result.to_state()
            for item in result.interruptions:
                if box.ask(str(item.name), json.loads(item.raw_item.arguments)["query"]):
                    run_input.approve(item)
                else:
                    run_input.reject(item)

    async def _run(self, agent: Agent[Any], run_input: Any, state: Any, config: RunConfig) -> Any:
        """One ``Runner.run`` (or ``run_streamed``, its events drained) of ``run_input``: a turn's input or a
        ``RunState`` to resume."""
        if self.streamed:
            streamed = Runner.run_streamed(agent, run_input, context=state, max_turns=100, run_config=config)
            async for _ in streamed.stream_events():
                pass
            return streamed
        return await Runner.run(agent, run_input, context=state, max_turns=100, run_config=config)


def _agent(scenario: kit.Scenario, box: kit.ToolBox, **options: Any) -> Agent[Any]:
    tools: list[Tool] = [kit_tool(tool, box) for tool in scenario.tools]
    return guard_agent(Agent(name="kit", instructions="Use the tools.", tools=tools), scenario.policy, **options)


def _outcome(result: Any, cursor: kit.Cursor) -> kit.TurnOutcome:
    final = str(result.final_output)
    return kit.TurnOutcome(
        final=final,
        stop=stop_of(result),
        seen=[_text(item.raw_item) for item in result.new_items if isinstance(item, ToolCallOutputItem)],
        model_calls=cursor.step,
        stop_messages=int(final.startswith(kit.STOPPED)),
    )


def kit_tool(tool: kit.Tool, box: kit.ToolBox) -> FunctionTool:
    """A kit tool as a function tool taking ``query``: each run goes through ``box`` (a ``ToolFailed`` raises,
    and the SDK hands the model its error text)."""

    def run(query: str) -> Any:
        return box.run(tool.name, query)

    return function_tool(
        run, name_override=tool.name, description_override=tool.description, needs_approval=tool.needs_approval
    )


def _script(cursor: kit.Cursor) -> Script:
    """The scripted model's responses: the kit's, where the ``cursor`` is (its turn and step)."""

    def reply(n: int, model: ScriptedModel) -> Reply:
        answer = cursor.next()
        if isinstance(answer, str):
            return [message(answer)]
        return [tool_call(call.tool, {"query": call.query}, call_id) for call, call_id in answer]

    return reply


def _text(raw_item: Any) -> str:
    output = raw_item.get("output") if isinstance(raw_item, Mapping) else getattr(raw_item, "output", None)
    return output if isinstance(output, str) else json.dumps(output)
