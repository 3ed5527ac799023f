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

``Driver`` runs the core's conformance scenarios (``repeat_hooks.kit.conformance``) on the SDK's real loop with
this model at its provider seam: ``check(scenario, box, Driver().run(scenario, box))``.

The config names the model, nothing more, so it survives the SDK's serialization. A worker process
(``agents run-worker``) finds the model if the module it imports builds it under the same
``name`` (``ScriptedModel(script, name="parcel-loop")`` at import time); ``requests`` are per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast

from mistralai.agents import agents
from mistralai.vibe.harness.app_server.session import SessionClient
from mistralai.vibe.harness.app_server.session import TextContentBlock as SessionText
from mistralai.vibe.harness.app_server.session.models.callbacks import CallbackResult
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

from repeat_hooks import MemoryStore, StateStore
from repeat_hooks.kit import current_request, request
from repeat_hooks.kit.conformance import FINAL, SCENARIOS, STOPPED, Cursor, Scenario, ToolBox, TurnOutcome

from .guard import RepeatGuardHook
from .settings import GuardClass


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call the scripted model makes."""

    name: str
    """The tool's name as the model sees it (``track_parcel``, ``run_typescript``)."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The call's arguments (sent as JSON)."""
    call_id: str | None = None
    """The model's call id; ``None``: a fresh ``call_<n>``. Real models reuse ids: set one to test that.
    (rc11 refuses a response that uses one id twice, before any hook runs.)"""


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
            call_id = use.call_id if use.call_id is not None else f"call_{next(self._call_ids)}"
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
    return _since_last_user(request, CompletionToolMessage)


async def run_turn(session: SessionClient, text: str) -> RunResult[None]:
    """Run one turn of ``session`` (from ``agent.create_session()``) with the user's ``text``."""
    return await run_one_turn(session, [SessionText(text=text)])


# -- the conformance driver ---------------------------------------------------------------------------


class Driver:
    """Runs a conformance scenario (``repeat_hooks.kit.conformance``) on rc11's real agent loop, in process.

    Each scenario gets its own guard class (``RepeatGuardHook`` with the scenario's policy and a store of
    its own), its tools as ``@agents.tool`` functions taking one string ``query`` (each run goes to
    ``ToolBox.run``; a ``ToolFailed`` reaches rc11 as the tool's exception), and a ``ScriptedModel`` at
    the provider seam that answers the scenario's script in order (``repeat_hooks.kit.conformance.Cursor``: the
    driver starts each turn). All turns run in one session, each through ``RepeatGuardHook.run(session,
    text)``: ``TurnOutcome.final`` is its text (the stop message when the guard ended the turn) and
    ``TurnOutcome.stop`` its stop.

    ``TurnOutcome.seen`` is read from the conversation rc11 holds for the model: rc11's session history
    (``session.state.history``) leaves out every refused call and keeps one entry per call id, so after
    the last turn the driver sends one more user message, which the model answers at once, and reads the
    tool messages of every turn from the conversation that model call is sent.

    rc11 has no read-only hint for a tool: ``Tool.read_only`` is left to the policy's ``read_only``. A tool that
    needs approval gets a ``PermissionRule(decision="ask")`` (its id ``client.<tool>``); rc11 asks the
    session's approval callback (``session.provide_callbacks(kinds={"approval"})``), which puts the call to
    ``ToolBox.ask`` and answers ``output=True`` (approved once).
    """

    UNSUPPORTED: ClassVar[Mapping[str, str]] = {
        "one_call_id_for_different_calls": (
            "rc11 refuses a model response that uses one tool call id twice before any hook runs: "
            "RuntimeError('duplicate model tool call ID ...') from the completion aggregator "
            "(vibe/harness/runtime/completion/aggregation.py:12); the turn fails and no tool runs"
        ),
        "a_tool_the_agent_lacks_fails_like_any_other": (
            "rc11's native core answers a top-level call of a name it does not offer the model itself, with "
            '{"result":{"type":"error","error":{"name":"InvalidToolCall","message":"unsupported top-level tool '
            '\\"hex\\""}}} (the text is in vibe/harness/core/_native.abi3.so, in no Python file): no pre_tool_call '
            "or post_tool_call runs, and session.state.history (made of the tool_result_committed observations, "
            "vibe/harness/runtime/session/events/production.py:35) holds no entry for it. Only post_llm_call sees "
            "the call, in its candidate (vibe/harness/runtime/capabilities/models.py:82), and it can neither tell "
            "which names the core offers top-level (built in the native core: with default builtins not even the "
            "agent's own tools) nor answer one call: Accept lets the core's error through (models.py:94), Retry "
            "drops the whole response from the conversation and sends its text as a user message (models.py:95), "
            "Reject ends the turn with no text (models.py:96). So the guard counts none of them, and the turn goes "
            "on until the model answers or max_iterations"
        ),
        **dict.fromkeys(
            [item.name for item in SCENARIOS if item.rounds > 1],
            "rc11 has no construct that runs an agent again after its answer: agents.Agent takes no loop, and a "
            "turn ends in CompletedTurn with the model's answer (vibe/harness/core/protocol.py:310, decided in "
            "the native core); a loop around run_turn is the caller's own code, each message a turn",
        ),
    }
    """Scenarios rc11 itself cannot express, and why."""

    PROBE = "(end of the conversation)"
    """The user message the driver sends after the scenario's turns, to read the conversation."""

    _classes = itertools.count(1)

    def __init__(self, *, max_iterations: int = 30) -> None:
        self.max_iterations = max_iterations

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` in one new session; one outcome per turn (blocks: ``asyncio.run``)."""
        return asyncio.run(self.arun(scenario, box))

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run the first turn of ``scenario`` with a guard whose states live in ``store``, in a new rc11 session
        (rc11 gives it its own session and turn ids), the conversation and the turn named as a retried request's
        are: ``with repeat_hooks.kit.request(conversation_id=..., turn_id=...)`` around ``Guard.run``. The guard
        class has one name in every process (``Driver.Retried``), so its states have one key."""
        body = {"__module__": __name__, "__qualname__": "Driver.Retried", "policy": scenario.policy, "store": store}
        guard = cast(type[RepeatGuardHook], GuardClass("Retried", (RepeatGuardHook,), body))
        with request(conversation_id=conversation_id, turn_id=turn_id):
            return asyncio.run(self._turns(scenario, box, guard))[0]

    async def arun(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """``run`` for callers already inside an event loop."""
        number = next(self._classes)
        body = {
            "__module__": __name__,
            "__qualname__": f"Driver.Conformance{number}",
            "policy": scenario.policy,
            "store": MemoryStore(),
        }
        guard = cast(type[RepeatGuardHook], GuardClass(f"Conformance{number}", (RepeatGuardHook,), body))
        if scenario.branches > 1:
            return await self._branches(scenario, box, guard)
        return await self._turns(scenario, box, guard)

    async def _turns(self, scenario: Scenario, box: ToolBox, guard: type[RepeatGuardHook]) -> list[TurnOutcome]:
        """The scenario's turns in one session (only the first, in a ``request(...)`` block: the retried turn),
        then the probe, outside the block."""
        cursor = Cursor(scenario)
        probing = False
        named = current_request()

        def script(sent: CompletionRequest) -> Reply:
            if probing:
                return FINAL
            reply = cursor.next()
            if isinstance(reply, str):
                return reply
            return [ToolUse(call.tool, {"query": call.query}, call_id=identifier) for call, identifier in reply]

        model = ScriptedModel(script)
        asked = tuple(f"client.{tool.name}" for tool in scenario.tools if tool.needs_approval)
        agent = agents.Agent(
            model=model.name,
            completion=model.completion(),
            name="conformance",
            instructions="You track parcels.",
            builtins=agents.Builtins.none(),
            max_iterations=self.max_iterations,
            harness=agents.Harness(
                tools=[_kit_tool(tool.name, tool.description, box) for tool in scenario.tools], hooks=[guard()]
            ),
            permission_policy=agents.PermissionPolicy(
                default="allow", rules=(agents.PermissionRule(tools=asked, decision="ask"),) if asked else ()
            ),
        )

        async def approve(callback: Any) -> CallbackResult:
            """rc11's approval callback: the call put to ``box.ask`` (``output=True`` approves it once)."""
            return CallbackResult(callback_id=callback.id, output=box.ask(callback.name, str(callback.input["query"])))

        outcomes: list[TurnOutcome] = []
        turns = scenario.turns[:1] if named.turn_id else scenario.turns
        async with (
            await agent.create_session() as session,
            session.provide_callbacks(kinds={"approval"}, handler=approve) if asked else contextlib.nullcontext(),
        ):
            for number, turn in enumerate(turns):
                cursor.start_turn(number)
                result, stop = await guard.run(session, turn.message)
                outcomes.append(
                    TurnOutcome(
                        final=result.text,
                        stop=stop,
                        seen=[],
                        model_calls=cursor.step,
                        stop_messages=int(result.text.startswith(STOPPED)),
                    )
                )
            probing = True
            with request():
                await guard.run(session, self.PROBE)
        conversation = model.requests[-1]
        for outcome, seen in zip(outcomes, _tool_messages_by_turn(conversation), strict=False):
            outcome.seen = seen
        return outcomes

    async def _branches(self, scenario: Scenario, box: ToolBox, guard: type[RepeatGuardHook]) -> list[TurnOutcome]:
        """Each turn: the main agent starts one rc11 sub-agent per branch at once (``tools.agents.spawn`` from
        ``run_typescript``, rc11's one way to start them), waits for their results, then answers. Each branch's
        sub-agent runs the kit's tools, guarded (``Subagent(hooks=[guard()])``), its model answering from its own
        ``Cursor``; ``seen`` is what the branches' models read."""
        cursors = [Cursor(scenario) for _ in range(scenario.branches)]
        last: dict[int, CompletionRequest] = {}

        def branch(request: CompletionRequest) -> Reply:
            n = int(last_user_text(request).split(BRANCH, 1)[1].split()[0].strip(".\"'"))
            last[n] = request
            reply = cursors[n].next()
            if isinstance(reply, str):
                return reply
            return [ToolUse(call.tool, {"query": call.query}, call_id=identifier) for call, identifier in reply]

        def main(request: CompletionRequest) -> Reply:
            if not any(isinstance(message, CompletionToolMessage) for message in request.messages):
                spawns = "\n".join(
                    f'  await tools.agents.spawn({{name: "b{n}", message: "{BRANCH}{n}", config_name: "kit_branch"}});'
                    for n in range(len(cursors))
                )
                return ToolUse("run_typescript", {"code": f"async function main() {{\n{spawns}\n}}"})
            results = sum(str(m.content).startswith("Agent result from") for m in request.messages)
            return FINAL if results == len(cursors) else ToolUse("wait", {"timeout_ms": 5000})

        branch_model, main_model = ScriptedModel(branch), ScriptedModel(main)
        child = agents.Subagent(
            name="kit_branch",
            description="One branch of the kit.",
            instructions="You track parcels.",
            model=branch_model.name,
            completion=branch_model.completion(),
            tools=[_kit_tool(tool.name, tool.description, box) for tool in scenario.tools],
            hooks=[guard()],
            builtins=agents.Builtins.none(),
        )
        agent = agents.Agent(
            model=main_model.name,
            completion=main_model.completion(),
            name="conformance",
            builtins=agents.Builtins(skills=False),
            max_iterations=self.max_iterations,
            harness=agents.Harness(hooks=[guard()]),
            subagents=[child],
        )
        outcomes: list[TurnOutcome] = []
        async with await agent.create_session() as session:
            for number, turn in enumerate(scenario.turns):
                for cursor in cursors:
                    cursor.start_turn(number)
                last.clear()
                result, stop = await guard.run(session, turn.message)
                outcomes.append(
                    TurnOutcome(
                        final=result.text,
                        stop=stop,
                        seen=[text for n in sorted(last) for text in tool_messages(last[n])],
                        model_calls=sum(cursor.step for cursor in cursors),
                        stop_messages=int(result.text.startswith(STOPPED)),
                    )
                )
        return outcomes


BRANCH = "Do kit branch "
"""The message the main agent starts each branch's sub-agent with, the branch's number after it."""


def _kit_tool(name: str, description: str, box: ToolBox) -> Any:
    """A kit tool as rc11 takes one: a module-level-looking function of one string ``query``."""

    def handler(query: str) -> Any:
        return box.run(name, query)

    handler.__name__ = handler.__qualname__ = name  # rc11 takes module-level functions only (by qualname)
    return agents.tool(name=name, description=description)(handler)


def _since_last_user(request: CompletionRequest, kind: type) -> int:
    count = 0
    for message in reversed(request.messages):
        if isinstance(message, CompletionUserMessage):
            break
        count += isinstance(message, kind)
    return count


def _tool_messages_by_turn(request: CompletionRequest) -> list[list[str]]:
    """The tool messages of a request, grouped by the user message they follow."""
    turns: list[list[str]] = []
    for message in request.messages:
        if isinstance(message, CompletionUserMessage):
            turns.append([])
        elif isinstance(message, CompletionToolMessage) and turns:
            turns[-1].append(message.content)
    return turns


__all__ = [
    "Driver",
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
