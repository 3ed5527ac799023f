"""``RepeatGuard`` on the two public seams of LlamaIndex workflow agents: a guarded subclass's ``take_step`` (turns,
stops, each response decided as one batch) and ``GuardedTool`` wrappers (see the README's "How it maps")."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import re
import types
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from llama_index.core.agent.react.types import ResponseReasoningStep
from llama_index.core.agent.workflow import (
    AgentOutput,
    AgentStream,
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

from repeat_hooks import GuardSetupError, GuardState, Policy, Refusal, StateCorrupt, Stop, ToolCall, kit, observe
from repeat_hooks.call import as_text, batch_call_ids
from repeat_hooks.stores import StateStore

from . import calls
from .calls import HANDOFF, batch_key, is_handoff, model_view, succeeded, tool_call
from .state import STATE_KEY, STOP_KEY, ContextSlot, run_of

__all__ = ["GuardSetupError", "GuardedTool", "RepeatGuard", "RepeatGuardStopped"]

_OWNER = "RepeatGuard"
_CTX = "repeat_hooks_ctx"  # the keyword GuardedTool takes the run's Context by (never one of the model's)
A = TypeVar("A", bound=BaseWorkflowAgent)
W = TypeVar("W", bound=AgentWorkflow)
T = TypeVar("T")
Step = Callable[[], Awaitable[AgentOutput]]
Tools = Sequence[AsyncBaseTool]

NO_ANSWERS = "a text answer ends the workflow run (base_agent.py:570-619), and a run is a turn: no answer repeats"
NO_CONVERSATION = (
    "repeat-hooks: RepeatGuard(store=...) keeps counts under the conversation's id, and this run names none: run it "
    "in `with repeat_hooks.kit.request(conversation_id=chat_id, turn_id=request_id):` (a retry continues its turn)"
)
UNSUPPORTED_AGENT = "repeat-hooks: RepeatGuard guards FunctionAgent and ReActAgent (and subclasses), not {name}: {why}"
CODEACT = "CodeActAgent runs your tools inside the code it executes (codeact_agent.py:125-149): no wrapper sees a call"


class RepeatGuardStopped(kit.GuardStopped):
    """The guard stopped the run with ``on_stop="raise"``: raised out of ``await handler``; ``stop`` says why."""


class RepeatGuard:
    """The loop guard for LlamaIndex agents: ``agent = RepeatGuard().agent(FunctionAgent(...))``, or ``workflow =
    guard.workflow(AgentWorkflow(...))``; then run them as usual. The common keywords of every adapter
    (``kit.GuardCore``); ``store=None``: the run's ``ctx.store[STATE_KEY]``; ``cost`` reads ``AgentOutput.raw``.
    Each agent counts its own calls (a handoff carries no counts over); one run of the workflow is one turn."""

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
        why = {kit.Feed.ANSWERS: NO_ANSWERS}
        self.core = kit.GuardCore(policy, settings, owner=_OWNER, feeds=calls.FEEDS, why=why, **kit.common(locals()))
        self.policy: Policy = self.core.policy
        self._states = kit.ParsedStates()
        self._locks: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._names: set[str] = set()  # the tools this guard wraps, for the tool-name check

    def agent(self, agent: A) -> A:
        """A guarded copy of ``agent`` (a ``FunctionAgent``, ``ReActAgent`` or subclass), its tools ``GuardedTool``s;
        ``GuardSetupError`` for an agent it cannot guard, and for a tool taking a ``Context`` LlamaIndex cannot see."""
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
        fields.update(timeout=getattr(agent, "_timeout", None), verbose=getattr(agent, "_verbose", False))
        guarded = _guarded_class(cast(Any, type(agent)))(**fields)
        guarded._repeat_guard = self
        return cast(A, guarded)

    def workflow(self, workflow: W) -> W:
        """A copy of ``workflow`` (an ``AgentWorkflow``) whose agents are guarded, each counting its own calls."""
        if not isinstance(workflow, AgentWorkflow):
            raise GuardSetupError(f"repeat-hooks: guard.workflow takes an AgentWorkflow, not {type(workflow).__name__}")
        kept = ("initial_state", "root_agent", "handoff_prompt", "handoff_output_prompt", "state_prompt")
        settings = {name: getattr(workflow, name) for name in (*kept, "output_cls", "structured_output_fn")}
        settings.update(timeout=getattr(workflow, "_timeout", None), verbose=getattr(workflow, "_verbose", False))
        agents = [self.agent(agent) for agent in workflow.agents.values()]
        return type(workflow)(agents=agents, early_stopping_method=workflow.early_stopping_method, **settings)

    def tool(self, tool: BaseTool | Callable[..., Any], agent: str) -> GuardedTool:
        """``tool`` (a LlamaIndex tool or a function) wrapped for agent ``agent``, for tools you add later. Raises
        ``GuardSetupError`` for another guard's tool, and for a ``Context`` parameter LlamaIndex does not detect."""
        if isinstance(tool, GuardedTool):
            if tool.guard is not self:
                raise GuardSetupError(f"repeat-hooks: tool {tool.metadata.name!r} is guarded by another RepeatGuard")
            tool = tool.inner
        inner = adapt_to_async_tool(tool if isinstance(tool, BaseTool) else FunctionTool.from_defaults(tool))
        plain = isinstance(inner, FunctionTool) and not inner.requires_context
        if plain and (unseen := _unseen_context(cast(FunctionTool, inner).real_fn)) is not None:
            raise GuardSetupError(
                f"repeat-hooks: tool {inner.metadata.name!r} takes {unseen}, which LlamaIndex does not see as the "
                "run's Context (function_tool.py:44 compares the class: no Optional, no string annotation): the "
                "model would be asked for it. Annotate it `ctx: Context` in a module without `from __future__ "
                "import annotations`"
            )
        if len(self._names) < 4096:
            self._names.add(inner.metadata.get_name())
        return GuardedTool(self, inner, agent)

    async def step(self, agent: BaseWorkflowAgent, ctx: Context, tools: Tools, take_step: Step) -> AgentOutput:
        """Each ``take_step``: the run's first starts the turn; a stop is the output, no model call (``"raise"``:
        ``RepeatGuardStopped``); else the model is called and counted, its calls decided as one batch."""
        own = [tool for tool in tools if isinstance(tool, GuardedTool) and tool.guard is self]
        handoffs = [tool for tool in tools if is_handoff(tool)]  # the workflow's own, never a user's of that name
        loose = [tool.metadata.get_name() for tool in tools if tool not in own and tool not in handoffs]
        if loose:
            raise GuardSetupError(
                f"repeat-hooks: agent {agent.name!r} offers tools the guard does not wrap: {', '.join(loose)}. Set the "
                "agent's tools before guard.agent(agent), or wrap the ones you add: guard.tool(tool, agent.name)"
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
        output = await take_step()
        seconds, cost = watch.seconds(), self.core.cost_of(calls.usage_of(output.raw))
        skip = HANDOFF if handoffs else None
        batch = [tool_call(t.tool_name, t.tool_kwargs, t.tool_id) for t in output.tool_calls if t.tool_name != skip]
        counts = self.core.records_model_calls

        def decide(state: GuardState, turn: str | None) -> list[Refusal | None]:
            if counts:
                policy.record_model_call(state, seconds=seconds, cost_usd=cost, turn_id=turn)
            return policy.decide_tool_calls(state, batch, turn_id=turn) if batch else []

        def keep(run: dict[str, Any], decisions: list[Refusal | None]) -> None:  # each call's decision, for its tool
            ids = batch_call_ids(batch)
            entries = [
                [call.name, batch_key(call.name, call.arguments, policy), ident, False, refusal and refusal.message]
                for call, ident, refusal in zip(batch, ids, decisions, strict=True)
            ]
            _put(run, name, entries)

        await self._update(ctx, name, decide, [self.core.refused] * len(batch), after=keep)
        return output

    async def run_tool(self, tool: GuardedTool, ctx: Context, arguments: dict[str, Any]) -> ToolOutput:
        """A guarded tool's call: a refusal is the ``ToolOutput`` the model reads; else the tool runs, its outcome
        recorded (an exception: a failure, raised on), with ``warn=True`` the guard's note after the result."""
        name, agent = tool.metadata.get_name(), tool.agent
        call, refusal, key = await self._decide(ctx, agent, name, arguments)
        if refusal is not None:
            return _refused(refusal, name, arguments)
        given = dict(arguments)
        if isinstance(tool.inner, FunctionTool) and tool.inner.requires_context and tool.inner.ctx_param_name:
            given[tool.inner.ctx_param_name] = ctx
        try:
            output = await tool.inner.acall(**given)
        except Exception as error:
            if isinstance(error, WaitingForEvent):  # a human is asked: the step runs again on the answer
                back = functools.partial(_settle, agent, call, key, False)
                await self._update(ctx, agent, lambda state, turn: None, None, back)
            else:
                await self.record(ctx, agent, call, key, ok=False, view=as_text(error))
            raise
        note = await self.record(ctx, agent, call, key, ok=succeeded(output), view=model_view(output))
        if note is None:
            return output
        noted = kit.noted(output.content, note)
        return ToolOutput(content=noted, tool_name=name, raw_input=arguments, raw_output=output.raw_output)

    async def _decide(self, ctx: Context, agent: str, name: str, args: Any) -> tuple[ToolCall, str | None, str | None]:
        """The batch's call a tool run is, claimed (the first unclaimed of this tool and arguments), its refusal (then
        settled) and call key; not in the batch (a step run elsewhere): decided now, without an id."""
        key, arguments = batch_key(name, args, self.policy), args
        async with self._locks.setdefault(ctx.store, asyncio.Lock()):  # the calls of a response run concurrently
            with contextlib.suppress(StateCorrupt):  # not the guard's: the outage is _update's
                run = run_of(await ctx.store.get(STATE_KEY, default=None))
                entries = [list(entry) for entry in run.get("batch", {}).get(agent, [])]
                entry = next((e for e in entries if e[0] == name and e[1] == key and not e[3]), None)
                if entry is not None:
                    entry[3] = True
                    _put(run, agent, [e for e in entries if e is not entry or e[4] is None])
                    await ctx.store.set(STATE_KEY, run)
                    return tool_call(name, arguments, entry[2]), entry[4], key
        call, decide = tool_call(name, arguments), self.policy.decide_tool_call
        refusal = await self._update(
            ctx, agent, lambda state, turn: decide(state, call, turn_id=turn), self.core.refused
        )
        return call, None if refusal is None else refusal.message, None

    async def record(
        self, ctx: Context, agent: str, call: ToolCall, key: str | None, *, ok: bool, view: Any
    ) -> str | None:
        """Record a call's outcome (``is_failure`` asked about ``view``, what the model reads), settling its batch
        entry (``key``: its call key); the policy's note for the model, if any (``warn=True``)."""
        settle = functools.partial(_settle, agent, call, key, True)
        if not self.core.records_outcomes:
            return await self._update(ctx, agent, lambda state, turn: None, None, settle)
        ok, policy = self.core.ok(ok, view), self.policy

        def change(state: GuardState, turn: str | None) -> str | None:
            policy.record_tool_result(state, call, ok=ok, result=view, turn_id=turn)
            return policy.warning(state, call)

        return await self._update(ctx, agent, change, None, settle)

    async def results(self, agent: BaseWorkflowAgent, ctx: Context, results: list[ToolCallResult]) -> None:
        """A response's results, before the agent's own: a call of a tool the agent lacks (answered "not found",
        base_agent.py:647) gets its batch decision: a refusal replaces the SDK's text; else it is a failure."""
        guarded = {tool.metadata.name for tool in agent.tools or [] if isinstance(tool, GuardedTool)}
        for result in (result for result in results if result.tool_name not in (*guarded, HANDOFF)):
            call, refusal, key = await self._decide(ctx, agent.name, result.tool_name, result.tool_kwargs)
            if refusal is not None:
                result.tool_output = _refused(refusal, result.tool_name, result.tool_kwargs)
            else:
                view = model_view(result.tool_output)
                await self.record(ctx, agent.name, call, key, ok=succeeded(result.tool_output), view=view)

    async def _update(
        self,
        ctx: Context,
        agent: str,
        change: Callable[[GuardState, str | None], T],
        outage: T,
        prepare: Callable[[dict[str, Any]], None] | None = None,
        after: Callable[[dict[str, Any], T], None] | None = None,
    ) -> T:
        """``change(state, turn_id)`` on ``agent``'s state (the ``Context``'s, or ``store=``'s), locked per run;
        ``prepare`` / ``after`` (with the result) change the run's dict. A dict of another shape: an outage."""
        async with self._locks.setdefault(ctx.store, asyncio.Lock()):  # the calls of a response run concurrently
            try:
                run, corrupt = run_of(await ctx.store.get(STATE_KEY, default=None)), None
            except StateCorrupt as error:  # not the guard's: an outage (``fail`` decides), the value left as it is
                run, corrupt = {}, error
            if prepare is not None:
                prepare(run)
            turn = run.get("turn")
            scope: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if observe.OBSERVERS:  # the observers hear the conversation (a caller's request) and the agent
                scope = self.core.scope(self.core.conversation_id(), agent)
            with scope:
                if self.core.store is None or corrupt is not None:
                    slot = ContextSlot(run, agent, self._states, corrupt)
                    result = self.core.update_now(slot, lambda state: change(state, turn), outage=outage)
                else:
                    key = self.core.key(self.core.conversation_id(), agent)
                    if key is None:
                        raise GuardSetupError(NO_CONVERSATION)
                    result = await self.core.update(key, lambda state: change(state, turn), outage=outage)
            if after is not None:
                after(run, result)
            if corrupt is None:
                await ctx.store.set(STATE_KEY, run)
            return result


class GuardedTool(FunctionTool):
    """A tool as the guard hands it to the agent: ``inner``'s metadata, and the run's ``Context`` (``requires_context``
    set here: no annotation read, ``from __future__`` imports change nothing); ``acall``: ``RepeatGuard.run_tool``."""

    def __init__(self, guard: RepeatGuard, inner: AsyncBaseTool, agent: str) -> None:
        super().__init__(async_fn=self.acall, metadata=inner.metadata)
        self.requires_context, self.ctx_param_name = True, _CTX
        self.guard, self.inner, self.agent = guard, inner, agent

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Run the call through the guard (LlamaIndex passes the run's Context as ``repeat_hooks_ctx``)."""
        ctx = kwargs.pop(_CTX, None)
        if ctx is None or args:
            raise GuardSetupError(
                f"repeat-hooks: {self.metadata.name!r} runs in a guarded agent's run: call the original"
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
        step = functools.partial(super().take_step, ctx, llm_input, tools, memory)  # type: ignore[misc]
        return await guard.step(self, ctx, tools, step)  # type: ignore[arg-type]

    async def handle_tool_call_results(self, ctx: Context, results: list[ToolCallResult], memory: BaseMemory) -> None:
        """The response's results, seen by the guard first (``RepeatGuard.results``), then the agent's own."""
        guard = self._repeat_guard
        if guard is not None:
            await guard.results(self, ctx, results)  # type: ignore[arg-type]
        await super().handle_tool_call_results(ctx, results, memory)  # type: ignore[misc]


@functools.cache
def _guarded_class(cls: Any) -> Any:
    """The guarded subclass of an agent class (one per class): ``_Guarded``'s methods first, the guard private."""
    name, guard = f"Guarded{cls.__name__}", PrivateAttr(default=None)
    namespace = {"__module__": __name__, "__qualname__": name, "__annotations__": {"_repeat_guard": Any}}
    return type(cls)(name, (_Guarded, cls), {**namespace, "_repeat_guard": guard})


def _refused(message: str, name: str, arguments: Any) -> ToolOutput:
    """A refusal as the output the model reads: an error, so a ``return_direct`` tool's does not end the run."""
    return ToolOutput(content=message, tool_name=name, raw_input=arguments, raw_output=message, is_error=True)


def _put(run: dict[str, Any], agent: str, entries: list[Any]) -> None:
    """Set ``agent``'s batch entries in the run's dict (none: its key goes)."""
    batch = {**run.get("batch", {}), agent: entries}
    run["batch"] = {name: value for name, value in batch.items() if value}


def _settle(agent: str, call: ToolCall, key: str | None, done: bool, run: dict[str, Any]) -> None:
    """``call``'s claimed batch entry settled (``done``: it goes) or given back (its step runs again on an answer)."""
    entries = [list(entry) for entry in run.get("batch", {}).get(agent, [])]
    entry = next((e for e in entries if e[:4] == [call.name, key, call.call_id, True]), None)
    if entry is not None:
        entry[3] = False
        _put(run, agent, [e for e in entries if e is not entry or not done])


async def _stop_output(agent: BaseWorkflowAgent, ctx: Context, stop: Stop) -> AgentOutput:
    """The stopped run's output: the stop as the answer where ``finalize`` takes it (function_agent.py:188,
    react_agent.py:297), streamed if the agent streams, ``Stop`` in ``raw``; ``max_iterations`` kept from tripping."""
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
    if agent.streaming:  # a UI rendering AgentStream.delta shows the stop, as it shows an answer
        text = stop.message
        ctx.write_event_to_stream(AgentStream(delta=text, response=text, raw=raw, current_agent_name=agent.name))
    return AgentOutput(response=message, tool_calls=[], raw=raw, current_agent_name=agent.name)


def _unseen_context(fn: Callable[..., Any]) -> str | None:
    """``fn``'s parameter (``name: annotation``) taking a workflows ``Context`` LlamaIndex does not detect, if any:
    the annotations resolved (``get_type_hints``), else read as text (``_names_context``)."""
    try:
        hints = get_type_hints(fn)
    except Exception:  # a name its module cannot resolve (a TYPE_CHECKING import): the text is all there is
        hints = {}
    for parameter in inspect.signature(fn).parameters.values():
        hint = hints.get(parameter.name, parameter.annotation)
        if _names_context(hint) if isinstance(hint, str) else _is_context(hint):
            given = parameter.annotation
            return f"{parameter.name}: {given if isinstance(given, str) else inspect.formatannotation(given)}"
    return None


def _is_context(hint: Any) -> bool:
    if hint is Context or get_origin(hint) is Context:
        return True
    return get_origin(hint) in (Union, types.UnionType) and any(map(_is_context, get_args(hint)))


def _names_context(text: str) -> bool:
    """Whether an annotation's text names ``Context`` (last dotted part), alone or in ``Optional``, ``Union``, ``|``."""
    while (found := re.search(r"([\w.]+)\s*\[([^\[\]]*)\]", text)) is not None:
        kept = f"({found[2]})" if found[1].rsplit(".", 1)[-1] in ("Optional", "Union") else found[1]
        text = text[: found.start()] + kept + text[found.end() :]
    return any(name.strip(" '\"").rsplit(".", 1)[-1] == "Context" for name in re.split(r"[|,()]", text))
