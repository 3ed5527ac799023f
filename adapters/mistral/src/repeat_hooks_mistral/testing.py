"""A testing aid: a scripted model at the SDK's own provider seam, to drive the real agent loop offline.

No key, no network: ``ScriptedModel`` plays the model. Its ``completion()`` is a
``CompletionConfigBase`` the SDK accepts as ``Agent(completion=...)``; every model call the agent
loop makes reaches ``script(request)``, which decides the reply from the request alone (so the
same script works in any process), and every request is kept in ``requests``::

    model = ScriptedModel.keep_calling("track_parcel", {"tracking_number": "FR-7731"})
    agent = agents.Agent(model=model.name, completion=model.completion(), builtins=agents.Builtins.none(),
                         harness=agents.Harness(tools=[track_parcel], hooks=[ParcelGuard()]))
    result = await run_turn(session, "Keep checking FR-7731.")
    tool_messages(model.requests[-1])   # what the model read as tool results

A reply is answer text (``str``, the turn ends), one ``ToolUse`` or a list of them (the loop goes on).
Not for production: it is what the tests and the offline example use.

The config names the model, nothing more, so it survives the SDK's serialization. A worker process
(``agents run-worker``) finds the model if the module it imports builds it under the same
``name`` (``ScriptedModel(script, name="parcel-loop")`` at import time); ``requests`` are per process.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from mistralai.vibe.harness.app_server.session import SessionClient
from mistralai.vibe.harness.app_server.session import TextContentBlock as SessionText
from mistralai.vibe.harness.core.protocol import TextContentBlock
from mistralai.vibe.harness.runtime.completion import CompletionConfigBase
from mistralai.vibe.harness.runtime.completion.models import (
    CompletionRequest,
    CompletionStreamItem,
    CompletionToolMessage,
    CompletionUsage,
    CompletionUserMessage,
    ModelAssistantContentDelta,
    ModelCompletionFinished,
    ModelToolCallArgumentsDelta,
    ModelToolCallStartedDelta,
)
from mistralai.vibe_agents.sdk.transport.results import RunResult, run_one_turn


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call the scripted model makes."""

    name: str
    """The tool's name as the model sees it (``track_parcel``, ``run_typescript``)."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The call's arguments (sent as JSON)."""
    call_id: str | None = None
    """The model's call id; ``None``: a fresh ``call_<n>``. Real models reuse ids: set one to test that."""


Reply = str | ToolUse | Sequence[ToolUse]
"""What a script returns for one model call: answer text, or the tool calls to make."""
Script = Callable[[CompletionRequest], Reply]
"""Decides one reply from the ``CompletionRequest`` the SDK sends."""

_MODELS: dict[str, ScriptedModel] = {}
_NAMES = itertools.count(1)
_LOCK = threading.Lock()


class ScriptedModel:
    """A model that replies from a script and keeps every request it receives (a ``CompletionProvider``)."""

    def __init__(self, script: Script, *, name: str | None = None, usage: tuple[int, int] | None = None) -> None:
        """``script`` decides each reply; ``name`` is the model name (unique per process; default
        ``scripted-<n>``); ``usage`` is the ``(input, output)`` tokens every reply reports."""
        with _LOCK:
            self.name = name or f"scripted-{next(_NAMES)}"
            _MODELS[self.name] = self
        self.script = script
        self.usage = usage
        self.requests: list[CompletionRequest] = []
        """Every ``CompletionRequest`` received, oldest first."""
        self._call_ids = itertools.count(1)

    @classmethod
    def keep_calling(cls, tool: str, arguments: Mapping[str, Any], **options: Any) -> ScriptedModel:
        """A model that calls ``tool`` with ``arguments`` at every model call and never answers."""
        return cls(lambda request: ToolUse(tool, arguments), **options)

    @classmethod
    def replies(cls, *replies: Reply, **options: Any) -> ScriptedModel:
        """A model that gives ``replies`` in order, one per model call, then repeats the last one."""
        if not replies:
            raise ValueError("replies needs at least one reply")

        def script(request: CompletionRequest) -> Reply:
            del request
            index = min(len(model.requests) - 1, len(replies) - 1)
            return replies[index]

        model = cls(script, **options)
        return model

    def completion(self) -> ScriptedCompletion:
        """The config to pass as ``Agent(model=self.name, completion=...)``."""
        return ScriptedCompletion(model=self.name)

    def build_provider(self) -> ScriptedModel:
        """The provider the SDK streams replies from: this model."""
        return self

    async def complete(self, request: CompletionRequest) -> AsyncIterator[CompletionStreamItem]:
        """Called by the SDK for each model call: streams the script's reply as SDK deltas."""
        self.requests.append(request)
        reply = self.script(request)
        usage: CompletionUsage | None = None
        if self.usage is not None:
            usage = CompletionUsage(input_tokens=self.usage[0], output_tokens=self.usage[1])
        if isinstance(reply, str):
            yield ModelAssistantContentDelta(content=[TextContentBlock(text=reply)])
            yield ModelCompletionFinished(finish_reason="stop", usage=usage)
            return
        uses = [reply] if isinstance(reply, ToolUse) else list(reply)
        for use in uses:
            call_id = use.call_id or f"call_{next(self._call_ids)}"
            yield ModelToolCallStartedDelta(call_id=call_id, name=use.name)
            yield ModelToolCallArgumentsDelta.model_validate({"call_id": call_id, "json": json.dumps(use.arguments)})
        yield ModelCompletionFinished(finish_reason="tool_call", usage=usage)


class ScriptedCompletion(CompletionConfigBase):
    """``Agent(completion=...)`` for a ``ScriptedModel``: ``model`` names it (process-local registry)."""

    type: Literal["repeat-hooks-scripted"] = "repeat-hooks-scripted"
    models: ClassVar[Mapping[str, ScriptedModel]] = _MODELS

    def build_provider(self) -> ScriptedModel:
        """The ``ScriptedModel`` named ``model`` (KeyError if no such model was made in this process)."""
        return _MODELS[self.model]


# -- reading a request, running a turn ---------------------------------------------------------------


def tool_messages(request: CompletionRequest) -> list[str]:
    """The tool messages in a request, oldest first: what the model read as tool results."""
    return [message.content for message in request.messages if isinstance(message, CompletionToolMessage)]


def last_user_text(request: CompletionRequest) -> str:
    """The text of the last user message in a request."""
    for message in reversed(request.messages):
        if isinstance(message, CompletionUserMessage):
            content = message.content
            if isinstance(content, str):
                return content
            return "".join(getattr(part, "text", "") for part in content)
    return ""


def calls_this_turn(request: CompletionRequest) -> int:
    """How many tool results the model has seen since the last user message."""
    count = 0
    for message in reversed(request.messages):
        if isinstance(message, CompletionUserMessage):
            break
        count += isinstance(message, CompletionToolMessage)
    return count


async def run_turn(session: SessionClient, text: str) -> RunResult[None]:
    """Run one turn of ``session`` (from ``agent.create_session()``) with the user's ``text``."""
    return await run_one_turn(session, [SessionText(text=text)])


__all__ = [
    "Reply",
    "Script",
    "ScriptedCompletion",
    "ScriptedModel",
    "ToolUse",
    "calls_this_turn",
    "last_user_text",
    "run_turn",
    "tool_messages",
]
