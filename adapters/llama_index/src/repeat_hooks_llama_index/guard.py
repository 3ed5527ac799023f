"""``RepeatGuard``: the guard of LlamaIndex workflow agents. LlamaIndex has no hook registry, so the guard sits on
its two public seams: ``guard.agent(FunctionAgent(...))`` returns a copy of the agent of a guarded subclass whose
``take_step`` (the model seam) starts turns, ends a stopped run and decides each response's calls as one batch, and
whose tools are ``GuardedTool`` wrappers that hand the model a refusal instead of running the tool (the README's
"How it maps to LlamaIndex" says which seam does what)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from llama_index.core.agent.react.types import ResponseReasoningStep
from llama_index.core.agent.workflow import (
    AgentOutput,
    AgentWorkflow,
    BaseWorkflowAgent,
    CodeActAgent,
    FunctionAgent,
    ReActAgent,
    ToolCallResult,
)
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import AsyncBaseTool, BaseTool, FunctionTool, ToolOutput, adapt_to_async_tool
from llama_index.core.workflow import Context
from pydantic import PrivateAttr
from workflows.runtime.types.results import WaitingForEvent

from repeat_hooks import GuardSetupError, GuardState, Policy, Refusal, Stop, ToolCall, kit, observe
from repeat_hooks.call import batch_call_ids
from repeat_hooks.stores import StateStore

from . import calls
from .calls import HANDOFF, arguments_key, model_view, succeeded, tool_call
from .state import STATE_KEY, STOP_KEY, ContextSlot

__all__ = ["GuardSetupError", "GuardedTool", "RepeatGuard", "RepeatGuardStopped"]

_OWNER = "RepeatGuard"
_CTX = "repeat_hooks_ctx"  # the keyword GuardedTool takes the run's Context by (never one of the model's)
A = TypeVar("A", bound=BaseWorkflowAgent)
W = TypeVar("W", bound=AgentWorkflow)
T = TypeVar("T")
Step = Callable[[Context, list[ChatMessage], Sequence[AsyncBaseTool], BaseMemory], Awaitable[AgentOutput]]

NO_ANSWERS = (
    "a text answer ends the workflow run (base_agent.py:570-619), and a run is a turn: no answer repeats in one"
)
NO_CONVERSATION = (
    "repeat-hooks: RepeatGuard(store=...) keeps each conversation's counts in the store under the conversation's "
    "id, and this run names none: run it inside `with repeat_hooks.kit.request(conversation_id=chat_id):` (with "
    "turn_id=request_id too, a retried request continues its turn)"
)
UNSUPPORTED_AGENT = "repeat-hooks: RepeatGuard guards FunctionAgent and ReActAgent (and subclasses), not {name}: {why}"
CODEACT = (
    "CodeActAgent runs your tools inside the code it executes (tool.real_fn, codeact_agent.py:125-149), where no "
    "wrapper sees a call, and refuses tools that take a Context (:134), as the guard's do"
)


class RepeatGuardStopped(kit.GuardStopped):
    """The guard stopped the run with ``on_stop="raise"``: raised out of ``await handler`` (LlamaIndex re-raises a
    step's exception as it is); ``stop`` says why and what to tell the user."""


class RepeatGuard:
    """The loop guard for LlamaIndex agents: ``agent = RepeatGuard().agent(FunctionAgent(...))``, or
    ``workflow = guard.workflow(AgentWorkflow(...))``; then run them as usual (``await agent.run(user_msg, ctx=ctx)``).

    The common keywords, as in every adapter (``repeat_hooks.kit.GuardCore``): ``policy`` (or its settings as
    keywords), ``store`` (``None``: the run's ``Context`` store, ``ctx.store[STATE_KEY]``), ``cost`` (handed each
    response's usage from ``AgentOutput.raw``), ``clock``, ``is_failure`` (of what the model reads of a result),
    ``check_tools``, ``on_stop`` (``"raise"``: ``await handler`` raises ``RepeatGuardStopped``) and ``fail``. Each
    agent counts its own calls (``AgentWorkflow``: per agent, a handoff does not carry counts over); one run of the
    workflow is one turn.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        store: StateStore | None = None,
        cost: kit.CostOf | None = None,
        clock: kit.Clock | None = kit.monotonic,
        is_failure: kit.FailureCheck | None = None,
        check_tools: bool = True,
        on_stop: kit.OnStop = "reply",
        fail: kit.Fail = "open",
        **settings: Any,
    ) -> None:
        self.core = kit.GuardCore(
            policy,
            settings,
            owner=_OWNER,
            feeds=calls.FEEDS,
            why={kit.Feed.ANSWERS: NO_ANSWERS},
            **kit.common(locals()),
        )
        self.policy: Policy = self.core.policy
        self._states = kit.ParsedStates()
        self._locks: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._names: set[str] = set()  # the tools this guard wraps, for the tool-name check

    # -- guarding the SDK's objects --------------------------------------------------------------------------

    def agent(self, agent: A) -> A:
        """A guarded copy of ``agent`` (a ``FunctionAgent``, a ``ReActAgent`` or a subclass): the same settings, of
        a guarded subclass, its tools wrapped in ``GuardedTool``. Raises ``GuardSetupError`` for an agent this guard
        cannot guard (a ``CodeActAgent``, another ``BaseWorkflowAgent``, one guarded already, one whose tools come
        from a ``tool_retriever``) and for a tool taking a ``Context`` LlamaIndex cannot see."""
        if isinstance(agent, AgentWorkflow):
            raise GuardSetupError("repeat-hooks: guard an AgentWorkflow with guard.workflow(workflow)")
        if isinstance(agent, _Guarded):
            raise GuardSetupError(f"repeat-hooks: agent {agent.name!r} is guarded already: guard the original once")
        if isinstance(agent, CodeActAgent):
            raise GuardSetupError(UNSUPPORTED_AGENT.format(name=type(agent).__name__, why=CODEACT))
        if not isinstance(agent, FunctionAgent | ReActAgent):
            why = "its take_step and tool results are its own, which the guard does not know"
            raise GuardSetupError(UNSUPPORTED_AGENT.format(name=type(agent).__name__, why=why))
        if agent.tool_retriever is not None:
            raise GuardSetupError(
                f"repeat-hooks: agent {agent.name!r} gets tools from a tool_retriever, which the guard cannot wrap: "
                "give it tools=[...] (or guard the tools with guard.tool(tool, agent_name) in your retriever)"
            )
        fields = {name: getattr(agent, name) for name in type(agent).model_fields}
        fields["tools"] = [self.tool(tool, agent.name) for tool in agent.tools or []]
        kind: Any = type(agent)
        guarded = _guarded_class(kind)(
            **fields, timeout=getattr(agent, "_timeout", None), verbose=getattr(agent, "_verbose", False)
        )
        guarded._repeat_guard = self
        return cast(A, guarded)

    def workflow(self, workflow: W) -> W:
        """A copy of ``workflow`` (an ``AgentWorkflow``) whose agents are guarded (``agent``), each counting its own
        calls; the handoff tool the workflow adds is not wrapped (never refused, never counted)."""
        if not isinstance(workflow, AgentWorkflow):
            raise GuardSetupError(f"repeat-hooks: guard.workflow takes an AgentWorkflow, not {type(workflow).__name__}")
        kept = ("initial_state", "root_agent", "handoff_prompt", "handoff_output_prompt", "state_prompt")
        settings = {name: getattr(workflow, name) for name in (*kept, "output_cls", "structured_output_fn")}
        return type(workflow)(
            agents=[self.agent(agent) for agent in workflow.agents.values()],
            early_stopping_method=workflow.early_stopping_method,
            timeout=getattr(workflow, "_timeout", None),
            verbose=getattr(workflow, "_verbose", False),
            **settings,
        )

    def tool(self, tool: BaseTool | Callable[..., Any], agent: str) -> GuardedTool:
        """``tool`` (a LlamaIndex tool or a function) wrapped for agent ``agent``: ``guard.agent`` does it for the
        agent's tools; call it yourself only for tools you add later. Raises ``GuardSetupError`` for a tool another
        guard wraps, and for a function that takes ``ctx: Context`` LlamaIndex does not detect (its module has
        ``from __future__ import annotations``: function_tool.py:110 compares the annotation, then a string)."""
        if isinstance(tool, GuardedTool):
            if tool.guard is not self:
                raise GuardSetupError(f"repeat-hooks: tool {tool.metadata.name!r} is guarded by another RepeatGuard")
            tool = tool.inner
        inner = adapt_to_async_tool(tool if isinstance(tool, BaseTool) else FunctionTool.from_defaults(tool))
        if isinstance(inner, FunctionTool) and not inner.requires_context:
            for parameter in inspect.signature(inner.real_fn).parameters.values():
                if isinstance(parameter.annotation, str) and parameter.annotation.split("[")[0].endswith("Context"):
                    raise GuardSetupError(
                        f"repeat-hooks: tool {inner.metadata.name!r} takes {parameter.name}: {parameter.annotation}, "
                        "which LlamaIndex cannot see under `from __future__ import annotations` (the annotation is a "
                        "string, function_tool.py:110): the model would be asked for it and the tool never given "
                        "the Context. Remove that import from the tool's module, or annotate it with a real class"
                    )
        if len(self._names) < 4096:
            self._names.add(inner.metadata.get_name())
        return GuardedTool(self, inner, agent)

    # -- the model seam: take_step ---------------------------------------------------------------------------

    async def step(
        self,
        agent: BaseWorkflowAgent,
        take_step: Step,
        ctx: Context,
        llm_input: list[ChatMessage],
        tools: Sequence[AsyncBaseTool],
        memory: BaseMemory,
    ) -> AgentOutput:
        """Fires at each ``take_step`` of a guarded agent, before its model call: the run's first starts the turn;
        a stop returns the stop message as the agent's output without calling the model (``RepeatGuardStopped``
        with ``on_stop="raise"``); else the model is called, the call counted, and the response's tool calls
        decided as one batch before any runs. Raises ``GuardSetupError`` for a tool offered to the model that the
        guard does not wrap (the handoff tool aside)."""
        own = [tool for tool in tools if isinstance(tool, GuardedTool) and tool.guard is self]
        loose = [tool.metadata.get_name() for tool in tools if tool not in own and tool.metadata.name != HANDOFF]
        if loose:
            raise GuardSetupError(
                f"repeat-hooks: agent {agent.name!r} offers the model tools the guard does not wrap: "
                f"{', '.join(sorted(loose))}. Set the agent's tools before guarding it (guard.agent(agent)), or wrap "
                "the ones you add with guard.tool(tool, agent.name)"
            )
        self.core.check_tool_names(self._names)
        policy, name = self.policy, agent.name
        first = not await ctx.store.get("num_iterations", default=0)  # the run's first step (base_agent.py:319)
        turn = self.core.turn_id() or uuid.uuid4().hex

        def start(run: dict[str, Any]) -> None:
            if first:
                run["turn"], run["batch"] = turn, {}

        stop = await self._update(
            ctx, name, lambda state, turn: policy.decide_model_call(state, turn_id=turn), self.core.ended, start
        )
        if stop is not None:
            stopped = self.core.stopped(stop, RepeatGuardStopped)
            if stopped is not None:
                raise stopped
            return await _stop_output(agent, ctx, stop)
        watch = kit.Stopwatch(self.core.clock)
        watch.start()
        output = await take_step(ctx, llm_input, tools, memory)
        seconds, cost = watch.seconds(), self.core.cost_of(calls.usage_of(output.raw))
        batch = [tool_call(t.tool_name, t.tool_kwargs, t.tool_id) for t in output.tool_calls if t.tool_name != HANDOFF]
        counts = self.core.records_model_calls

        def decide(state: GuardState, turn: str | None) -> list[Refusal | None]:
            if counts:
                policy.record_model_call(state, seconds=seconds, cost_usd=cost, turn_id=turn)
            return policy.decide_tool_calls(state, batch, turn_id=turn) if batch else []

        def keep(run: dict[str, Any], decisions: list[Refusal | None]) -> None:  # each call's decision, for its tool
            ids = batch_call_ids(batch)
            entries = [
                [call.name, arguments_key(call.arguments), ident, False, None if refusal is None else refusal.message]
                for call, ident, refusal in zip(batch, ids, decisions, strict=True)
            ]
            run["batch"] = {**run.get("batch", {}), name: entries}

        await self._update(ctx, name, decide, [self.core.refused] * len(batch), after=keep)
        return output

    # -- the tools ---------------------------------------------------------------------------------------------

    async def run_tool(self, tool: GuardedTool, ctx: Context, arguments: dict[str, Any]) -> ToolOutput:
        """Fires when the agent's loop calls a guarded tool: its batch decision; a refusal is the ``ToolOutput`` the
        model reads, and the tool does not run; else the tool runs and its outcome is recorded (an exception: a
        failure, raised on for LlamaIndex to make its error result). With ``warn=True``, the guard's note follows
        the result."""
        name, agent = tool.metadata.get_name(), tool.agent
        call, refusal = await self._decide(ctx, agent, name, arguments)
        if refusal is not None:
            return _refused(refusal, name, arguments)
        given = dict(arguments)
        if isinstance(tool.inner, FunctionTool) and tool.inner.requires_context and tool.inner.ctx_param_name:
            given[tool.inner.ctx_param_name] = ctx
        try:
            output = await tool.inner.acall(**given)
        except Exception as error:
            if isinstance(error, WaitingForEvent):  # a human is asked: the step runs again on the answer
                await self._update(ctx, agent, lambda state, turn: None, None, functools.partial(_release, agent, call))
            else:
                await self.record(ctx, agent, call, ok=False, view=str(error))
            raise
        note = await self.record(ctx, agent, call, ok=succeeded(output), view=model_view(output))
        if note is None:
            return output
        noted = kit.noted(output.content, note)
        return ToolOutput(content=noted, tool_name=name, raw_input=arguments, raw_output=output.raw_output)

    async def _decide(self, ctx: Context, agent: str, name: str, arguments: Any) -> tuple[ToolCall, str | None]:
        """The call of this response's batch a tool run is, claimed (the first not claimed yet with this tool and
        these arguments: LlamaIndex hands a tool no call id), and its refusal's text, if refused. Not in the batch (a
        step run in another process): the call without an id, decided now."""
        key = arguments_key(arguments)
        async with self._lock(ctx):
            run = dict(await ctx.store.get(STATE_KEY, default=None) or {})
            entries = [list(entry) for entry in run.get("batch", {}).get(agent, [])]
            entry = next((e for e in entries if e[0] == name and e[1] == key and not e[3]), None)
            if entry is not None:
                entry[3] = True
                run["batch"] = {**run.get("batch", {}), agent: entries}
                await ctx.store.set(STATE_KEY, run)
                return tool_call(name, arguments, entry[2]), entry[4]
        call, decide = tool_call(name, arguments), self.policy.decide_tool_call
        refusal = await self._update(
            ctx, agent, lambda state, turn: decide(state, call, turn_id=turn), self.core.refused
        )
        return call, None if refusal is None else refusal.message

    async def record(self, ctx: Context, agent: str, call: ToolCall, *, ok: bool, view: Any) -> str | None:
        """Record a call's outcome (``is_failure`` asked about ``view``, what the model reads); the policy's note for
        the model, if any (``warn=True``)."""
        if not self.core.records_outcomes:
            return None
        ok, policy = self.core.ok(ok, view), self.policy

        def change(state: GuardState, turn: str | None) -> str | None:
            policy.record_tool_result(state, call, ok=ok, result=view, turn_id=turn)
            return policy.warning(state, call)

        return await self._update(ctx, agent, change, None)

    async def results(self, agent: BaseWorkflowAgent, ctx: Context, results: list[ToolCallResult]) -> None:
        """Fires with a response's tool results, before the agent's ``handle_tool_call_results`` puts them in its
        scratchpad: a call of a tool the agent lacks (LlamaIndex answered it "not found" itself, base_agent.py:647)
        gets its batch decision: a refusal replaces the SDK's text; else it is recorded as the failure it is."""
        guarded = {tool.metadata.name for tool in agent.tools or [] if isinstance(tool, GuardedTool)}
        for result in (result for result in results if result.tool_name not in (*guarded, HANDOFF)):
            call, refusal = await self._decide(ctx, agent.name, result.tool_name, result.tool_kwargs)
            if refusal is not None:
                result.tool_output = _refused(refusal, result.tool_name, result.tool_kwargs)
            else:
                view = model_view(result.tool_output)
                await self.record(ctx, agent.name, call, ok=succeeded(result.tool_output), view=view)

    # -- the state -----------------------------------------------------------------------------------------------

    async def _update(
        self,
        ctx: Context,
        agent: str,
        change: Callable[[GuardState, str | None], T],
        outage: T,
        prepare: Callable[[dict[str, Any]], None] | None = None,
        after: Callable[[dict[str, Any], T], None] | None = None,
    ) -> T:
        """Apply ``change(state, turn_id)`` to agent ``agent``'s state, in the run's ``Context`` store (or the store
        under ``<conversation>/<agent>``), under a lock per run; ``prepare`` changes the run's dict first (its turn),
        ``after`` with the result (the batch's decisions)."""
        async with self._lock(ctx):
            run = dict(await ctx.store.get(STATE_KEY, default=None) or {})
            if prepare is not None:
                prepare(run)
            turn = run.get("turn")
            scope: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if observe.OBSERVERS:  # the observers hear the conversation (a caller's request) and the agent
                scope = self.core.scope(self.core.conversation_id(), agent)
            with scope:
                if self.core.store is None:
                    slot = ContextSlot(run, agent, self._states)
                    result = self.core.update_now(slot, lambda state: change(state, turn), outage=outage)
                else:
                    key = self.core.key(self.core.conversation_id(), agent)
                    if key is None:
                        raise GuardSetupError(NO_CONVERSATION)
                    result = await self.core.update(key, lambda state: change(state, turn), outage=outage)
            if after is not None:
                after(run, result)
            await ctx.store.set(STATE_KEY, run)
            return result

    def _lock(self, ctx: Context) -> asyncio.Lock:
        """The lock of the run's store: the calls of one response run as concurrent steps (num_workers=4)."""
        store = ctx.store
        lock = self._locks.get(store)
        if lock is None:
            lock = self._locks[store] = asyncio.Lock()
        return lock


class GuardedTool(FunctionTool):
    """A tool as the guard hands it to the agent: the same name, description and schema (``inner``'s metadata), and
    the run's ``Context`` (``requires_context`` set here, so no annotation is read: ``from __future__ import
    annotations`` anywhere changes nothing). ``acall`` is ``RepeatGuard.run_tool``."""

    def __init__(self, guard: RepeatGuard, inner: AsyncBaseTool, agent: str) -> None:
        super().__init__(async_fn=self.acall, metadata=inner.metadata)
        self.requires_context, self.ctx_param_name = True, _CTX
        self.guard, self.inner, self.agent = guard, inner, agent

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the call through the guard (LlamaIndex passes the run's Context as ``repeat_hooks_ctx``)."""
        ctx = kwargs.pop(_CTX, None)
        if ctx is None or args:
            raise GuardSetupError(
                f"repeat-hooks: guarded tool {self.metadata.name!r} runs inside a guarded agent's run, which hands it "
                "the run's Context; call the original tool directly outside one"
            )
        return await self.guard.run_tool(self, ctx, kwargs)

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Guarded tools run only asynchronously, as workflow agents call them (``acall``)."""
        raise GuardSetupError(f"repeat-hooks: guarded tool {self.metadata.name!r} runs only in an agent's run (acall)")


class _Guarded:
    """The guarded agent classes' own methods, before the agent class's (``_guarded_class``)."""

    _repeat_guard: RepeatGuard | None

    async def take_step(
        self, ctx: Context, llm_input: list[ChatMessage], tools: Sequence[AsyncBaseTool], memory: BaseMemory
    ) -> AgentOutput:
        """The agent's step, through its guard (``RepeatGuard.step``)."""
        guard = self._repeat_guard
        if guard is None:
            raise GuardSetupError("repeat-hooks: build a guarded agent with guard.agent(agent), not its class")
        step = super().take_step  # type: ignore[misc]
        return await guard.step(self, step, ctx, llm_input, tools, memory)  # type: ignore[arg-type]

    async def handle_tool_call_results(self, ctx: Context, results: list[ToolCallResult], memory: BaseMemory) -> None:
        """The response's results, seen by the guard first (``RepeatGuard.results``), then the agent's own."""
        guard = self._repeat_guard
        if guard is not None:
            await guard.results(self, ctx, results)  # type: ignore[arg-type]
        await super().handle_tool_call_results(ctx, results, memory)  # type: ignore[misc]


@functools.cache
def _guarded_class(cls: Any) -> Any:
    """The guarded subclass of an agent class (one per class): ``_Guarded``'s methods first, a private attribute for
    the guard."""
    namespace = {
        "__module__": __name__,
        "__qualname__": f"Guarded{cls.__name__}",
        "__annotations__": {"_repeat_guard": Any},
        "_repeat_guard": PrivateAttr(default=None),
    }
    return type(cls)(f"Guarded{cls.__name__}", (_Guarded, cls), namespace)


def _refused(message: str, name: str, arguments: Any) -> ToolOutput:
    """A refusal as the output the model reads: an error, so a refused ``return_direct`` tool does not end the run
    with it (base_agent.py:697-730)."""
    return ToolOutput(content=message, tool_name=name, raw_input=arguments, raw_output=message, is_error=True)


def _release(agent: str, call: ToolCall, run: dict[str, Any]) -> None:
    """Give ``call`` back to its batch (claimed no more): its step runs again when the human answers."""
    entries = run.get("batch", {}).get(agent, [])
    entry = next((e for e in entries if e[0] == call.name and e[2] == call.call_id and e[3]), None)
    if entry is not None:
        run["batch"] = {**run["batch"], agent: [[*e[:3], False, e[4]] if e is entry else e for e in entries]}


async def _stop_output(agent: BaseWorkflowAgent, ctx: Context, stop: Stop) -> AgentOutput:
    """The stopped run's output: the stop message as the agent's answer, put where the agent's ``finalize`` moves it
    into memory (a FunctionAgent's scratchpad, function_agent.py:188; a ReActAgent's reasoning, react_agent.py:297),
    and the ``Stop`` in ``raw`` (``stop_of``). The step is not a model call: the SDK's ``max_iterations`` is kept from
    tripping on it (base_agent.py:537-552 would raise, or call the model, instead of ending with the stop)."""
    message = ChatMessage(role="assistant", content=stop.message)
    if isinstance(agent, ReActAgent):
        reasoning = await ctx.store.get(agent.reasoning_key, default=[])
        step = ResponseReasoningStep(thought="The repeat guard ended the turn.", response=stop.message)
        await ctx.store.set(agent.reasoning_key, [*reasoning, step])
    else:
        key = getattr(agent, "scratchpad_key", "scratchpad")
        await ctx.store.set(key, [*await ctx.store.get(key, default=[]), message])
    done, most = await ctx.store.get("num_iterations", default=0), await ctx.store.get("max_iterations", default=20)
    if done + 1 >= most:
        await ctx.store.set("num_iterations", most - 2)
    raw = {STOP_KEY: stop.model_dump(mode="json")}
    return AgentOutput(response=message, tool_calls=[], raw=raw, current_agent_name=agent.name)
