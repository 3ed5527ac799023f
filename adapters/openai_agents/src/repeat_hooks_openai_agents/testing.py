"""A testing aid: a scripted ``Model`` that drives the real ``Runner`` offline, with no API key.

Not for production. The tests of this package, the example and the benchmark use it; so can yours::

    model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]))
    result = await Runner.run(agent, "Keep checking FR-7731", context=StopRepeatedCalls(), hooks=GuardHooks())
    model.calls                      # how many model calls the run made
    model.outputs_received(2)        # {call_id: text} the 3rd request carried as tool outputs

Each response reports ``usage`` (one request, ``input_tokens``/``output_tokens`` as set), as the
SDK's own models do.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents import Handoff, ModelResponse, ModelSettings, Tool, Usage
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
