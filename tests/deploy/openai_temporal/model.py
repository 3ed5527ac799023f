"""A scripted model that works across processes: it decides from the conversation it receives.

Model calls run as Temporal activities (``invoke_model_activity``) in whichever worker picks them up,
and a retried call runs again in another process, so the model keeps no counters: the step number
comes from the call ids already in the conversation (``scenario.step_of``). Every call appends what
it received to the ledger before answering.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    TResponseInputItem,
    Usage,
)
from agents.items import TResponseStreamEvent
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam
from temporal_harness import KillAt, checkpoint

from . import scenario


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    return dump(mode="json", exclude_unset=True) if callable(dump) else {}


class ScriptedModel(Model):
    """Answers with ``scenario.script(step)``; blocks at ``kill_at`` (``model:N``: model call N) on a first attempt."""

    def __init__(self, ledger: Path, kill_at: KillAt | None = None) -> None:
        self.ledger = ledger
        self.kill_at = kill_at

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: ResponsePromptParam | None = None,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [_plain(i) for i in input]
        calls = [i for i in items if i.get("type") == "function_call"]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        received = [str(i.get("output")) for i in outputs]
        step = scenario.step_of(str(c["call_id"]) for c in calls)
        wanted = scenario.script(step)
        ids = [scenario.call_id(step, index, items) for index in range(len(wanted))]
        await checkpoint(self.ledger, self.kill_at, "model", {"step": step, "received": received, "emitted": ids})
        output: list[Any]
        if wanted:
            output = [
                ResponseFunctionToolCall(
                    id=f"fc_{cid}",
                    call_id=cid,
                    name=name,
                    arguments=json.dumps(arguments),
                    type="function_call",
                    status="completed",
                )
                for cid, (name, arguments) in zip(ids, wanted, strict=True)
            ]
        else:
            text = ResponseOutputText(text=scenario.GIVE_UP, annotations=[], type="output_text")
            output = [
                ResponseOutputMessage(
                    id=f"msg_{step}", content=[text], role="assistant", status="completed", type="message"
                )
            ]
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: ResponsePromptParam | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scenario runs Runner.run, not run_streamed")


class ScriptedModelProvider(ModelProvider):
    """Serves ``ScriptedModel`` for ``scenario.MODEL_NAME`` (and refuses any other name)."""

    def __init__(self, ledger: Path, kill_at: KillAt | None = None) -> None:
        self._model = ScriptedModel(ledger, kill_at)

    def get_model(self, model_name: str | None) -> Model:
        if model_name != scenario.MODEL_NAME:
            raise ValueError(f"no scripted model named {model_name!r}")
        return self._model
