"""The guard: ``guard_agent`` returns a guarded clone whose hooks (``RepeatGuardHooks``) keep each run and decide
each response's calls as a batch, whose tools carry the guard's guardrails and ``needs_approval``, and whose
``tool_use_behavior`` ends a stopped turn (where each sits in the SDK's loop: the README's "How it maps")."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import agents
from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    FunctionToolResult,
    ItemHelpers,
    RunContextWrapper,
    ToolOutputText,
    ToolsToFinalOutputResult,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.run_internal.turn_resolution import check_for_final_output_from_tools
from agents.tool import _is_programmatic_tool_call
from agents.tool_context import ToolContext
from agents.tool_guardrails import RejectContentBehavior
from agents.tracing import get_current_trace
from pydantic import TypeAdapter

import repeat_hooks
from repeat_hooks import GuardEvent, GuardState, Policy, Refusal, StateStore, Stop, ToolCall
from repeat_hooks.kit import (
    FEEDS,
    Clock,
    CostOf,
    Fail,
    FailureCheck,
    Feed,
    GuardCore,
    GuardStopped,
    OnStop,
    Slot,
    Stopwatch,
    common,
    noted,
    tool_call,
)
from repeat_hooks.kit.clock import monotonic

from .calls import annotations_of, batch_of, is_sdk_error, model_view
from .state import InContext, Run, Runs, find_state, has_worked, missing, next_turn
from .tracing import trace

TContext = TypeVar("TContext")
T = TypeVar("T")
_OWNER = "guard_agent"
_IN, _OUT = "repeat_hooks", "repeat_hooks_outcome"
_NONE: tuple[GuardEvent, ...] = ()
_NAMED = ("destructive", "read_only", "exempt", "limits")  # the settings naming tools (a later one wins)
_LOCAL = (agents.ShellTool, agents.LocalShellTool, agents.ApplyPatchTool, agents.ComputerTool, agents.CustomTool)
"""Tools that run here without tool guardrails; every other tool that is not a ``FunctionTool`` is hosted."""


class GuardSetupError(repeat_hooks.GuardSetupError, agents.UserError):
    """A guarded agent is set up or run wrongly; the message says how to fix it. The SDK's ``UserError`` too, so the SDK
    re-raises it as it is from a guardrail, a hook or a ``tool_use_behavior`` (not as "Error running tool")."""


class MissingGuard(GuardSetupError, TypeError):
    """The run context holds no ``GuardState`` and the guard has no ``store`` (a ``TypeError`` too, as in 0.1)."""


class RepeatGuardStopped(GuardStopped, agents.AgentsException):
    """The guard ended a run that may not end with its text (``on_stop="raise"``, a structured ``output_type``):
    raised from ``Runner.run`` as the SDK's ``MaxTurnsExceeded`` is (with ``run_data``); ``stop`` says why."""


NOT_STARTED = (
    "repeat-hooks: a guarded tool ran in a run whose agent never started a turn: the agent's hooks were replaced "
    "after guard_agent (agent.clone(hooks=...) or agent.hooks = ...), or the tool was taken from a guarded agent "
    "into another one. Guard the agent you run, after setting its hooks: guard_agent(Agent(..., hooks=yours))"
)
ONE_STATE_PER_CONVERSATION = (
    "repeat-hooks: one GuardState per conversation: another run started turn {new} on this state while this run "
    "(turn {old}) was still going, and the two runs would reset each other's counts. Give each conversation its "
    "own GuardState and run one turn of it at a time (queue or reject a message sent while a turn is running)"
)
NO_USAGE = (
    "repeat-hooks: max_cost_usd={budget:g} can never trip: the model of agent {agent!r} reported no token usage, so "
    "cost=... prices every call at 0 dollars. Use a model that reports usage (streamed Chat Completions need "
    "ModelSettings(include_usage=True)), or limit the turn with max_model_calls"
)
NO_CONVERSATION = (
    "repeat-hooks: guard_agent(..., store=...) keeps each conversation's counts in the store under the "
    "conversation's id, and this run names none: run it inside `with repeat_hooks.kit.request(conversation_id="
    "chat_id):` (with turn_id=request_id too, a retried request continues its turn)"
)


NO_ANSWERS = (
    "a text answer ends the run (agents/run.py:1351, the first NextStepFinalOutput), and each run is a turn, so no "
    "answer repeats within one"
)
"""Why ``max_same_answers`` can never trip here."""


def guard_agent(
    agent: Agent[TContext],
    policy: Policy | None = None,
    *,
    store: StateStore | None = None,
    cost: CostOf | None = None,
    clock: Clock | None = monotonic,
    is_failure: FailureCheck | None = None,
    check_tools: bool = True,
    on_stop: OnStop = "reply",
    fail: Fail = "open",
    **settings: Any,
) -> Agent[TContext]:
    """A guarded clone of ``agent`` and of every agent it can hand off to; build it once and share it.

    ``policy``: a ``Policy`` or its settings as keywords (neither: ``Policy()``). ``store``: a ``StateStore``
    keeping each conversation's state under its id (``repeat_hooks.kit.request(conversation_id=...)``); ``None``:
    the run context holds it (``context=GuardState()``). ``cost`` prices a response's ``Usage``, ``clock`` times a
    model call (Temporal: ``workflow.time``). ``is_failure`` is asked about what the model reads of a result.
    ``check_tools=False`` skips the first model call's check of the tool names the policy names (for tools an MCP
    server offers later). ``on_stop``: ``"reply"`` (the stop message is a text agent's ``final_output``) or
    ``"raise"`` (``RepeatGuardStopped``; a structured ``output_type`` always raises). ``fail``: ``"open"`` or
    ``"closed"`` when the store cannot be reached. Raises ``GuardSetupError`` for a budget nothing feeds and a
    policy naming a tool no guardrail sees (a hosted, shell, apply_patch, computer or custom tool).
    """
    spelling = "guard_agent(agent, Policy(...))"
    feeds = (*FEEDS, Feed.WARNINGS)  # RecordOutcome hands the model warn=True's note with the result
    why = {Feed.ANSWERS: NO_ANSWERS}
    core = GuardCore(
        policy,
        settings,
        owner=_OWNER,
        spelling=spelling,
        error=GuardSetupError,
        feeds=feeds,
        why=why,
        **common(locals()),
    )
    guarding = _Guarding(RepeatGuardHooks(core, name=agent.name))
    guarded = guarding.agent(agent)
    _check_reach(core.policy, [clone for _, clone in guarding.done.values()])
    return guarded


class RepeatGuardHooks(AgentHooks[Any]):
    """A guarded agent's hooks: the guard's ``core``, the ``runs`` it keeps (one per guard, shared by the agents it
    guards: it serves concurrent runs), and the agent's own hooks (``inner``), called after the guard's work."""

    def __init__(self, core: GuardCore, inner: AgentHooks[Any] | None = None, *, name: str | None = None) -> None:
        self.core, self.runs, self.inner = core, Runs(), inner
        self.name = name
        """The agent ``guard_agent`` guarded: its conversations' store keys are ``<conversation>/<name>``."""
        self.agents: list[weakref.ref[Agent[Any]]] = []
        """The guarded clones, for the tool-name check (``checked[0]`` once done)."""
        self.checked = [False]

    @property
    def policy(self) -> Policy:
        """The settings every run of the guarded agents follows."""
        return self.core.policy

    async def on_start(self, context: agents.AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Fires when an agent of the run starts (the run's start, a handoff, a resume, a nested run): keeps the run
        (its turn is entered at its first update). Raises ``MissingGuard`` with nowhere to keep the state."""
        run = self.runs.get(context.usage) or self._start(context, resumed=has_worked(context.usage))
        if run.error is not None:
            raise run.error
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any], *args: Any, **kw: Any) -> None:
        """Fires before each model call: the first checks the tool names the policy names (``GuardSetupError`` for
        one that none of the guarded agents and their MCP servers has); then the call is timed."""
        run = self._run(context)
        if self.core.check_tools and not self.checked[0]:
            await self._check_tool_names(context, run)
        if self.core.clock is not None:
            run.watch = run.watch or Stopwatch(self.core.clock)
            run.watch.start()
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, *args, **kw)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: agents.ModelResponse
    ) -> None:
        """Fires after each model response: counts the model call (seconds, cost), then decides its function calls
        as one batch, before any runs. ``GuardSetupError`` for ``max_cost_usd`` with a model reporting no usage."""
        run, policy = self._run(context), self.core.policy
        if self.core.cost is not None and policy.max_cost_usd is not None and not has_worked(response.usage):
            self._fail(run, GuardSetupError(NO_USAGE.format(budget=policy.max_cost_usd, agent=agent.name)))
        seconds = run.watch.seconds() if run.watch is not None else 0.0
        cost, calls = self.core.cost_of(response.usage), batch_of(response, agent, run.invoked)

        def decide(state: GuardState, *, turn_id: str) -> tuple[list[Refusal | None], tuple[GuardEvent, ...]]:
            since = state.events[-1] if state.events else None
            policy.record_model_call(state, seconds=seconds, cost_usd=cost, turn_id=turn_id)
            if not calls:
                return [], ()
            if state.turn.batch == state.turn.responses:  # this response already had a batch: open the next one
                policy.decide_model_call(state, turn_id=turn_id)
            return policy.decide_tool_calls(state, calls, turn_id=turn_id), tuple(state.events_since(since))

        outage = ([self.core.refused] * len(calls), _NONE)
        decisions, events = await self._update(run, agent.name, decide, outage=outage)
        trace(events, [(entry.model_id, entry.refusal) for entry in run.batch.decided(calls, decisions)])
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_end(self, context: agents.AgentHookContext[Any], agent: Agent[Any], *args: Any, **kw: Any) -> None:
        """Fires when the agent produced its final output: your hooks' ``on_end``."""
        if self.inner is not None:
            await self.inner.on_end(context, agent, *args, **kw)

    async def on_handoff(self, context: RunContextWrapper[Any], agent: Agent[Any], *args: Any, **kw: Any) -> None:
        """Fires when the agent is handed off to: your hooks' ``on_handoff``."""
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, *args, **kw)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], *args: Any, **kw: Any) -> None:
        """Fires before a tool its guardrails let through runs: your hooks' ``on_tool_start``."""
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, *args, **kw)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], *args: Any, **kw: Any) -> None:
        """Fires after a tool ran: your hooks' ``on_tool_end``."""
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, *args, **kw)

    # -- the run and its state ------------------------------------------------------------------------------------

    def _start(self, context: RunContextWrapper[Any], *, resumed: bool) -> Run:
        """Keep a new run: where its conversation's state lives (``NO_CONVERSATION``, ``MissingGuard`` if nowhere)."""
        core = self.core
        if core.store is not None:
            where: str | Slot | None = core.key(core.conversation_id(), self.name)
        else:
            where = InContext(require_state(context.context))
        if where is None:
            raise GuardSetupError(NO_CONVERSATION)
        conversation = core.conversation_id(getattr(get_current_trace(), "group_id", None))
        return self.runs.setdefault(context.usage, lambda: Run(where, conversation, core.turn_id(), resumed))

    def _run(self, context: RunContextWrapper[Any], *, resumed: bool = False) -> Run:
        """The run of ``context`` (its setup error raised again); unknown: ``NOT_STARTED``, unless ``resumed``."""
        run = self.runs.get(context.usage)
        if run is None and not resumed:
            raise GuardSetupError(NOT_STARTED)
        run = run or self._start(context, resumed=True)
        if run.error is not None:
            raise run.error
        return run

    def _fail(self, run: Run, error: Exception) -> NoReturn:
        run.error = run.error or error  # raised again at the run's every later step
        raise error

    def _enter(self, run: Run, state: GuardState) -> str:
        """The run's turn in ``state``, started at its first update; raises if another run's turn replaced it."""
        if run.turn_id is not None and state.turn.id != run.turn_id:
            raise GuardSetupError(ONE_STATE_PER_CONVERSATION.format(old=run.turn_id, new=state.turn.id))
        turn = run.turn_id or run.named or (state.turn.id if run.resumed and state.turn.id else next_turn(state))
        self.core.policy.start_turn(state, turn_id=turn)
        return turn

    async def _update(
        self, run: Run, agent: str | None, change: Callable[..., T], *args: Any, outage: T, **kw: Any
    ) -> T:
        """One update of the run's conversation state: its turn entered, then ``change(state, *args, turn_id=...,
        **kw)`` (a policy verb); ``outage`` when the state cannot be reached (``fail`` decides)."""

        def step(state: GuardState) -> tuple[str | None, T]:
            turn = self._enter(run, state)
            return turn, change(state, *args, turn_id=turn, **kw)

        with self.core.scope(run.conversation_id, agent):
            try:
                run.turn_id, result = await self.core.update(run.where, step, outage=(run.turn_id, outage))
            except repeat_hooks.GuardSetupError as error:
                self._fail(run, error)
        return result

    async def _check_tool_names(self, context: RunContextWrapper[Any], run: Run) -> None:
        policy = self.core.policy
        named = set(policy.limits) | policy.exempt | policy.read_only | policy.destructive
        agents = [agent for agent in (ref() for ref in self.agents) if agent is not None]
        names = {tool.name for agent in agents for tool in agent.tools if isinstance(tool, FunctionTool)}
        if not named <= names:  # only then list the MCP servers' tools (a round trip without a tool cache)
            for agent in agents:
                if agent.mcp_servers:
                    names |= {tool.name for tool in await agent.get_mcp_tools(context)}
        try:
            self.core.check_tool_names(names)
        except GuardSetupError as error:
            self._fail(run, error)
        self.checked[0] = True


def require_state(context: Any) -> GuardState:
    """The ``GuardState`` the run context holds; raises ``MissingGuard`` saying how to pass one."""
    state = find_state(context)
    if state is None:
        raise MissingGuard(missing(context))
    return state


def _check_reach(policy: Policy, clones: list[Agent[Any]]) -> None:
    """Raise ``GuardSetupError`` when the policy names a tool of the guarded agents that no guardrail sees: its
    calls could be neither counted nor refused, so the setting would silently do nothing."""
    guarded = {tool.name for agent in clones for tool in agent.tools if isinstance(tool, FunctionTool)}
    named = {name: setting for setting in _NAMED for name in getattr(policy, setting)}
    for tool, owner in [(tool, agent.name) for agent in clones for tool in agent.tools if tool.name not in guarded]:
        if tool.name not in named:
            continue
        kind, said = type(tool).__name__, f"repeat-hooks: Policy({named[tool.name]}=...) names {tool.name!r}"
        environment = getattr(tool, "environment", None) or {"type": "local"}
        if isinstance(tool, _LOCAL) and environment.get("type") == "local":
            gate = (
                "gate its calls with its needs_approval / on_approval, or " if hasattr(tool, "needs_approval") else ""
            )
            raise GuardSetupError(
                f"{said}, a {kind} of agent {owner!r}: the OpenAI Agents SDK runs it with no tool guardrails, "
                f"so the guard can neither count nor refuse its calls. Take {tool.name!r} out of the policy; "
                f"{gate}bound the turn with max_model_calls=N"
            )
        raise GuardSetupError(
            f"{said}, a hosted tool ({kind}) of agent {owner!r}: hosted tools run on OpenAI's servers and their "
            f"calls never pass through the guard, so it can neither count nor refuse them. Take {tool.name!r} out of "
            "the policy; to cap the hosted tool calls of one response, set ModelSettings(extra_args={'max_tool_calls': "
            "N}) (Responses API); to bound the turn, max_model_calls=N; to guard the action itself, give the agent a "
            "@function_tool that does it"
        )


# -- before and after a tool: the guardrails -------------------------------------------------------------------


class _Guardrail:
    """A tool guardrail's function: ``guard``, the guard of the tool's agent; ``None`` on a local MCP ``server``
    (shared): the running agent's guard, if any. ``output_type``: the tool's ``TypeAdapter``, if it has one."""

    def __init__(self, guard: RepeatGuardHooks | None, server: Any = None, output_type: TypeAdapter[Any] | None = None):
        self.guard, self.server, self.output_type = guard, server, output_type

    def _run(self, data: Any) -> tuple[RepeatGuardHooks, Run] | None:
        """The call's guard and run (a call a human approved runs, on resume, before the run's ``on_start``)."""
        hooks, context = getattr(data.agent, "hooks", None), data.context
        guard = self.guard or (hooks if isinstance(hooks, RepeatGuardHooks) else None)
        approved = context.is_tool_approved(context.tool_name, context.tool_call_id)
        return None if guard is None else (guard, guard._run(context, resumed=approved is True))

    def _call(self, context: ToolContext[Any]) -> ToolCall:
        name, annotations = context.tool_name, annotations_of([self.server], context.tool_name)
        return tool_call(name, context.tool_arguments, call_id=context.tool_call_id, annotations=annotations)


class RefuseRepeats(_Guardrail):
    """The input guardrail: fires before each call of a guarded tool; returns its decision, made with its batch."""

    async def __call__(self, data: agents.ToolInputGuardrailData) -> agents.ToolGuardrailFunctionOutput:
        """Returns "allow", or ``reject_content(refusal.message)``: the tool does not run, the model reads that."""
        found, context = self._run(data), data.context
        if found is None:
            return agents.ToolGuardrailFunctionOutput.allow()
        guard, run = found
        entry = run.batch.claim(context.tool_name, context.tool_call_id or None, context.tool_arguments)
        if entry is not None:
            refusal = entry.refusal
        else:  # a batch this process never saw (a resumed run): decided now
            call = self._call(context)
            decide = guard.core.policy.decide_tool_call
            refusal = await guard._update(run, data.agent.name, decide, call, outage=guard.core.refused)
            run.batch.add(call, refusal)
        if refusal is None:
            return agents.ToolGuardrailFunctionOutput.allow()
        return agents.ToolGuardrailFunctionOutput.reject_content(refusal.message, output_info=refusal)


class RecordOutcome(_Guardrail):
    """The output guardrail (when the policy needs outcomes, warnings included): fires after a guarded tool ran,
    before the SDK builds the output the model reads; records whether it failed (the SDK's error text, or
    ``is_failure`` of what the model reads) and what the model reads of the tool's own output, and asks, in the
    same update, for the policy's note (``Policy.warning``). ``output_schema``: the tool's ``output_json_schema``."""

    def __init__(
        self,
        guard: RepeatGuardHooks | None,
        server: Any = None,
        output_type: TypeAdapter[Any] | None = None,
        output_schema: dict[str, Any] | None = None,
    ):
        super().__init__(guard, server, output_type)
        self.output_schema = output_schema

    async def __call__(self, data: agents.ToolOutputGuardrailData) -> agents.ToolGuardrailFunctionOutput:
        """Record the call's outcome; returns "allow" (the model reads the tool's output), or, with a note for the
        model, ``reject_content`` of the tool's output as the model reads it with the note after it (the one way a
        tool guardrail changes the output: the SDK hands the model that message as the call's output, builds the
        tool's output item, its ``FunctionToolResult`` and ``on_tool_end`` from it, and runs no later guardrail);
        its ``output_info`` is the note. The tool's own output is what is recorded, and what ``tool_use_behavior``
        gets (``EndTurn``)."""
        found, context = self._run(data), data.context
        if found is None:
            return agents.ToolGuardrailFunctionOutput.allow()
        (guard, run), core = found, found[0].core
        if not core.records_outcomes:
            return agents.ToolGuardrailFunctionOutput.allow()
        policy = core.policy
        entry = run.batch.settle(context.tool_name, context.tool_call_id or None, context.tool_arguments)
        call = entry.call if entry is not None else self._call(context)
        view = model_view(data.output, self.output_type)
        ok = core.ok(not is_sdk_error(data.output), view)

        def record(state: GuardState, *, turn_id: str) -> str | None:
            policy.record_tool_result(state, call, ok=ok, result=view, turn_id=turn_id)
            return policy.warning(state, call)  # None without warn=True

        note = await guard._update(run, data.agent.name, record, outage=None)
        message = None if note is None else self._noted(context, data.output, note)
        if message is None:
            return agents.ToolGuardrailFunctionOutput.allow()
        if context.tool_call_id:
            run.own[context.tool_call_id] = data.output
        behavior = RejectContentBehavior(type="reject_content", message=message)
        return agents.ToolGuardrailFunctionOutput(output_info=note, behavior=behavior)

    def _noted(self, context: ToolContext[Any], output: Any, note: str) -> Any:
        """The tool's ``output`` as the model reads it, with ``note`` after it: the text the SDK would send
        (``ItemHelpers.tool_call_output_item``, with the tool's output type or schema) and the note, or a structured
        output (images, files) with the note as one more text part. ``None`` where no model reads it (a hosted
        program's call) or where the SDK rejects the output (it then fails the run as it would without the note)."""
        tool_call = context.tool_call
        if tool_call is None or _is_programmatic_tool_call(tool_call):
            return None
        if is_sdk_error(output):  # the SDK builds its own error text's item without the output schema
            read: Any = output
        else:
            try:
                read = ItemHelpers.tool_call_output_item(
                    tool_call, output, output_json_schema=self.output_schema, output_type_adapter=self.output_type
                )["output"]
            except Exception:  # the SDK raises its own error for this output, after this guardrail
                return None
        if isinstance(read, str):
            return noted(read, note)
        parts = list(output) if isinstance(output, list | tuple) else [output]
        return [*parts, ToolOutputText(text=note)]


def is_ours(guardrail: object) -> bool:
    """``True`` for a guardrail this adapter made (so guarding twice attaches nothing twice)."""
    return isinstance(getattr(guardrail, "guardrail_function", None), (RefuseRepeats, RecordOutcome))


# -- before the next model call: tool_use_behavior -------------------------------------------------------------


class EndTurn:
    """A guarded agent's ``tool_use_behavior``: fires after each batch of function tools. Your behaviour
    (``original``) first, given each tool's own output (a result that got the guard's note for the model has it
    taken off again: a ``"stop_on_first_tool"`` final output is the tool's); then a stop ends the run, no model call
    more: ``final_output = stop.message``, or ``RepeatGuardStopped`` when ``raises``. A call a human rejected is
    withdrawn first (it counts as rejected)."""

    def __init__(self, original: Any, guard: RepeatGuardHooks, *, raises: bool = False, agent_name: str | None = None):
        self.original: Any = original.original if isinstance(original, EndTurn) else original
        """The agent's own behaviour: ``"run_llm_again"``, ``"stop_on_first_tool"``, ``StopAtTools`` or a function."""
        self.guard, self.raises, self.agent_name = guard, raises, agent_name

    async def __call__(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        """Whether the batch ends the run (see the class)."""
        guard = self.guard
        run = guard._run(context, resumed=any(_decided(context, result) is not None for result in results))
        results = [_own(run, result) for result in results]
        rejected = [_rejected(run, result) for result in results if _decided(context, result) is False]
        decided = await self._original_decision(context, results, run)
        if decided.is_final_output and not rejected:
            return decided
        policy = guard.core.policy

        def end(state: GuardState, *, turn_id: str) -> tuple[Stop | None, tuple[GuardEvent, ...]]:
            for call in rejected:
                policy.record_rejection(state, call, turn_id=turn_id)
            if decided.is_final_output:
                return None, ()
            since = state.events[-1] if state.events else None
            return policy.decide_model_call(state, turn_id=turn_id), tuple(state.events_since(since))

        stop, events = await guard._update(run, self.agent_name, end, outage=(guard.core.ended, _NONE))
        if decided.is_final_output or stop is None:
            return decided
        trace(events)
        run.stop = stop
        if self.raises:
            raise RepeatGuardStopped(stop)
        return ToolsToFinalOutputResult(is_final_output=True, final_output=stop.message)

    async def _original_decision(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult], run: Run
    ) -> ToolsToFinalOutputResult:
        """The agent's own behaviour, by the SDK's own function, a refused call left out: it did not run, so its
        refusal is never the caller's output (your function sees every result)."""
        if not isinstance(self.original, str | dict):
            ran = results
        else:
            refused = {entry.model_id for entry in run.batch.calls if entry.refusal is not None}
            ran = [result for result in results if _call_id(result) not in refused]
        behaviour: Any = types.SimpleNamespace(tool_use_behavior=self.original)  # all the SDK reads of the agent
        return await check_for_final_output_from_tools(behaviour, ran, context)


def _own(run: Run, result: FunctionToolResult) -> FunctionToolResult:
    """``result`` with the tool's own output, where ``RecordOutcome`` handed the model its output with a note."""
    call_id = _call_id(result)
    if call_id is None or call_id not in run.own:
        return result
    return dataclasses.replace(result, output=run.own.pop(call_id))


def _call_id(result: FunctionToolResult) -> str | None:
    raw = getattr(result.run_item, "raw_item", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return call_id if isinstance(call_id, str) else None


def _decided(context: RunContextWrapper[Any], result: FunctionToolResult) -> bool | None:
    """A human's decision on the call (``None``: nobody was asked)."""
    call_id = _call_id(result)
    if result.tool.needs_approval is False or not call_id:
        return None
    return context.is_tool_approved(result.tool.name, call_id)


def _rejected(run: Run, result: FunctionToolResult) -> ToolCall:
    """The call a human rejected, as its batch decided it (a batch this process never saw: by its id)."""
    call_id = _call_id(result)
    entry = run.batch.settle(result.tool.name, call_id, claimed=False)
    return entry.call if entry is not None else tool_call(result.tool.name, "", call_id=call_id)


class AskUnlessRefused:
    """A guarded function tool's ``needs_approval``: ``False`` for a call its batch refused (its guardrail hands the
    model the refusal: nobody is asked), else the tool's own answer (``original``: a ``bool`` or your function)."""

    def __init__(self, original: Any, guard: RepeatGuardHooks) -> None:
        self.original: Any = original.original if isinstance(original, AskUnlessRefused) else original
        self.guard = guard

    async def __call__(self, context: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        """``False`` for a call the guard refused in this run, else the tool's own answer."""
        run = self.guard.runs.get(context.usage)
        if run is not None and any(e.model_id == call_id and e.refusal is not None for e in run.batch.calls):
            return False
        if isinstance(self.original, bool):
            return self.original
        asked = self.original(context, params, call_id)
        return bool(await asked if inspect.isawaitable(asked) else asked)


# -- building the guarded clone ----------------------------------------------------------------------------------


class _Guarding:
    """One ``guard_agent`` call: guards each agent of the handoff graph once."""

    def __init__(self, guard: RepeatGuardHooks) -> None:
        self.guard = guard
        self.done: dict[int, tuple[Agent[Any], Agent[Any]]] = {}

    def agent(self, agent: Agent[TContext]) -> Agent[TContext]:
        if id(agent) in self.done:
            return self.done[id(agent)][1]
        guard = copy.copy(self.guard)  # the same guard around this agent's own hooks
        guard.inner = agent.hooks.inner if isinstance(agent.hooks, RepeatGuardHooks) else agent.hooks
        text = agent.output_type in (None, str) or (  # the SDK's own test of a text output (turn_resolution.py)
            isinstance(agent.output_type, AgentOutputSchemaBase) and agent.output_type.is_plain_text()
        )
        clone = agent.clone(
            tools=[self.tool(tool, guard) for tool in agent.tools],
            tool_use_behavior=EndTurn(
                agent.tool_use_behavior, guard, raises=guard.core.on_stop == "raise" or not text, agent_name=agent.name
            ),
            hooks=guard,
        )
        self.done[id(agent)] = (agent, clone)  # before the handoffs: they may lead back here
        guard.agents.append(weakref.ref(clone))
        clone.handoffs = [self.handoff(entry) for entry in agent.handoffs]
        for server in agent.mcp_servers:  # shared with other agents: the guardrails ask the running agent's guard
            inputs, outputs = list(server.tool_input_guardrails or []), list(server.tool_output_guardrails or [])
            if not any(is_ours(g) for g in inputs + outputs):
                server.tool_input_guardrails = [
                    *inputs,
                    agents.ToolInputGuardrail(RefuseRepeats(None, server), name=_IN),
                ]
                server.tool_output_guardrails = [
                    *outputs,
                    agents.ToolOutputGuardrail(RecordOutcome(None, server), name=_OUT),
                ]
        return clone

    def tool(self, tool: agents.Tool, guard: RepeatGuardHooks) -> agents.Tool:
        if not isinstance(tool, FunctionTool):
            return tool  # hosted, shell, computer, ... tools: no input guardrails
        inputs = [g for g in tool.tool_input_guardrails or [] if not is_ours(g)]
        outputs = [g for g in tool.tool_output_guardrails or [] if not is_ours(g)]
        inputs.append(agents.ToolInputGuardrail(RefuseRepeats(guard), name=_IN))
        if guard.core.records_outcomes:
            adapter, schema = tool._output_type_adapter, tool.output_json_schema  # tool.py:543, for output_type=
            outcome = RecordOutcome(guard, output_type=adapter, output_schema=schema)
            outputs.append(agents.ToolOutputGuardrail(outcome, name=_OUT))
        asks = tool.needs_approval if tool.needs_approval is False else AskUnlessRefused(tool.needs_approval, guard)
        return dataclasses.replace(
            tool, tool_input_guardrails=inputs, tool_output_guardrails=outputs, needs_approval=asks
        )

    def handoff(self, entry: Agent[Any] | agents.Handoff[Any, Any]) -> Agent[Any] | agents.Handoff[Any, Any]:
        if isinstance(entry, Agent):
            return self.agent(entry)
        reference = entry._agent_ref  # the SDK's own link to the target, used to resume a RunState
        target = reference() if reference is not None else None
        guarded_target = self.agent(target) if isinstance(target, Agent) else None
        invoke = entry.on_invoke_handoff

        async def on_invoke_handoff(context: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
            chosen = await invoke(context, arguments)
            if guarded_target is not None and chosen is target:
                return guarded_target
            return self.agent(chosen)

        copied = dataclasses.replace(entry, on_invoke_handoff=on_invoke_handoff)
        if guarded_target is not None:
            copied._agent_ref = weakref.ref(guarded_target)
        return copied
