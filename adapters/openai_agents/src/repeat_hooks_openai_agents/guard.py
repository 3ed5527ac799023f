"""The guard and its hook points: ``guard_agent`` builds a guarded clone whose hooks are a ``RepeatGuardHooks``.

``guard_agent(agent, ...)`` takes the policy (``Policy()`` by default, a ``Policy``, or its settings as
keywords) and what feeds its budgets (``cost=``, ``clock=``), and returns a clone of ``agent``, and of
every agent it can hand off to, on which the guard sits at these points of the SDK's loop:

- **turn start**: ``RepeatGuardHooks.on_start`` (the clone's agent hooks) fires when a run starts; after a
  handoff, on resume and in a nested run the turn goes on.
- **a response's calls**: ``RepeatGuardHooks.on_llm_end`` fires after each model response: it counts the
  model call (with its seconds and cost) and decides the response's function calls as one batch, before
  any of them runs.
- **before a tool runs**: ``RefuseRepeats``, a tool *input* guardrail on every function tool and local
  MCP server, returns its call's decision: allow, or ``reject_content(refusal.message)`` (the tool does
  not run; the model reads the refusal as the call's output).
- **after a tool ran**: ``RecordOutcome``, a tool *output* guardrail (only when the policy needs
  outcomes), records ok or failed and what the model reads of the result.
- **before the next model call**: ``EndTurn``, the clone's ``tool_use_behavior``, fires after each batch
  of function tools: a stop ends the run with no further model call, with ``final_output = stop.message``
  (a text agent) or by raising ``RepeatGuardStopped`` (a structured ``output_type``, or ``on_stop="raise"``).
- **human approval**: ``AskUnlessRefused``, the guarded tools' ``needs_approval``: a call the guard refused
  with its batch is never put to a human; ``EndTurn`` withdraws a call a human rejected: it counts as a rejected
  call (the same call rejected ``max_calls`` times is refused, ``RefusalKind.REJECTED``, without asking).

The clone keeps no counts: they live in each run's context (a ``GuardState``, see ``state``), so one
guarded agent serves concurrent conversations. Your own tools, guardrails, hooks and
``tool_use_behavior`` are kept: your guardrails run first (a call they reject was still decided with its
batch), your agent hooks are called by ``RepeatGuardHooks``, and your behaviour is asked before the
guard's stop.

Out of reach: hosted tools (web search, file search, code interpreter, hosted MCP, image generation) run
at OpenAI and never pass through a guardrail; shell, apply_patch, computer and custom tools have no
input guardrails (use their ``needs_approval`` / ``on_approval``). They are left as they are and not
counted; a policy naming one fails at ``guard_agent`` (``GuardSetupError``). An agent used as a tool
(``other.as_tool()``) is guarded as a call; to guard the tools *inside* it, build the tool from a guarded
agent: ``guard_agent(other).as_tool(...)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import weakref
from typing import Any, Literal, TypeVar

from agents import (
    Agent,
    AgentHookContext,
    AgentHooks,
    ApplyPatchTool,
    ComputerTool,
    CustomTool,
    FunctionTool,
    FunctionToolResult,
    Handoff,
    LocalShellTool,
    ModelResponse,
    RunContextWrapper,
    ShellTool,
    Tool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
    ToolsToFinalOutputResult,
    Usage,
    UserError,
)
from agents.agent import StopAtTools, ToolsToFinalOutputFunction
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem
from agents.tool_context import ToolContext
from pydantic import TypeAdapter

import repeat_hooks
from repeat_hooks import GuardState, Policy, observe
from repeat_hooks.call import batch_call_ids
from repeat_hooks.kit import Clock, CostOf, Stopwatch, check_budgets, check_tool_names, policy_from
from repeat_hooks.kit.clock import monotonic
from repeat_hooks.stop_rules import HookPoint

from .calls import FailureCheck, McpHints, batch_of, call_of, failed, model_view, output_type_of, tool_call
from .state import (
    GuardSetupError,
    RepeatGuardStopped,
    Run,
    check_turn,
    fail,
    has_worked,
    require_state,
    run_of,
    turn_for_run,
    turn_in_run,
    turn_of,
)
from .tracing import last_event, trace_events

TContext = TypeVar("TContext")
_ALLOW = ToolGuardrailFunctionOutput.allow()
_GO_ON = ToolsToFinalOutputResult(is_final_output=False, final_output=None)
_OWNER = "guard_agent"
_SPELLING = "guard_agent(agent, Policy(...))"

OnStop = Literal["reply", "raise"]
"""How a stop ends a text agent's run (``guard_agent(..., on_stop=...)``); typed-output agents always raise."""

ToolUseBehavior = Any
"""What ``Agent.tool_use_behavior`` accepts: ``"run_llm_again"``, ``"stop_on_first_tool"``, a
``StopAtTools`` dict, or a ``ToolsToFinalOutputFunction``."""


def guard_agent(
    agent: Agent[TContext],
    policy: Policy | None = None,
    *,
    cost: CostOf | None = None,
    clock: Clock | None = monotonic,
    is_failure: FailureCheck | None = None,
    on_stop: OnStop = "reply",
    check_tools: bool = True,
    **settings: Any,
) -> Agent[TContext]:
    """A guarded clone of ``agent``; call it once at start-up and share the result across runs.

    ``policy``: a ``Policy``, or its settings as keywords (``guard_agent(agent, max_calls=2)``); neither:
    ``Policy()``. ``cost`` prices each response's ``Usage`` in US dollars (``cost=TokenPrices(3, 15)``),
    for ``max_cost_usd``; ``clock`` times each model call (seconds), for ``max_model_seconds`` (inside a
    Temporal workflow: ``temporalio.workflow.time``; ``None``: no time recorded). ``is_failure(output) ->
    bool`` marks tool outputs that mean the call failed, on top of the SDK's own error text for a tool that
    raised or timed out (``is_sdk_error``). ``on_stop``: how a stop ends a text agent's run: ``"reply"`` (its
    ``final_output`` is the stop's message) or ``"raise"`` (``RepeatGuardStopped``, as the SDK raises
    ``MaxTurnsExceeded``); an agent with a structured ``output_type`` always raises, so that its output
    guardrails, ``on_end`` hooks and callers never receive the stop text as its output. ``check_tools``: at
    the first model call, the tool names of ``limits``, ``exempt``, ``read_only`` and ``destructive`` must be
    tools of the guarded agents or of their MCP servers; ``False`` for tools that appear later (an MCP server
    whose tool list changes during the run).

    Run the clone with the conversation's state in its context: ``Runner.run(agent, input,
    context=GuardState())``. Raises ``GuardSetupError`` at once for a budget nothing feeds
    (``max_cost_usd`` without ``cost``, ``max_model_seconds`` with ``clock=None``), ``TypeError`` for a
    policy given wrongly, ``GuardSetupError`` at once for a policy naming a tool the guard cannot reach (a
    hosted tool, which runs on OpenAI's servers; a shell, apply_patch, computer or custom tool, which has no
    tool guardrails), whatever ``check_tools``. Guarding a guarded agent replaces its guard (nothing is
    attached twice).
    """
    guard = RepeatGuardHooks(
        policy, cost=cost, clock=clock, is_failure=is_failure, on_stop=on_stop, check_tools=check_tools, **settings
    )
    guarded = _Guarding(guard).agent(agent)
    _check_reach(guard)
    return guarded


class RepeatGuardHooks(AgentHooks[Any]):
    """The guard on a guarded agent: its policy, what feeds its budgets, and the agent hooks of the SDK's loop.

    ``guard_agent`` builds one and sets it as the clone's ``hooks`` (read it back as ``agent.hooks``);
    ``RepeatGuardHooks()`` alone holds the default ``Policy()``. Every hook calls the same hook of the
    agent's own hooks (``inner``) after the guard's work. Keeps nothing of a run (that lives beside the run,
    see ``state``): one instance serves concurrent runs.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        is_failure: FailureCheck | None = None,
        on_stop: OnStop = "reply",
        inner: AgentHooks[Any] | None = None,
        check_tools: bool = True,
        **settings: Any,
    ) -> None:
        self.policy: Policy = policy_from(policy, settings, owner=_OWNER, spelling=_SPELLING)
        """The settings every run of the guarded agents follows."""
        self.cost = cost
        """Maps a response's ``Usage`` to US dollars, for ``max_cost_usd``."""
        self.clock = clock
        """Times each model call, for ``max_model_seconds``."""
        self.is_failure = is_failure
        """Marks tool outputs that mean the call failed."""
        if on_stop not in ("reply", "raise"):
            raise TypeError(
                f"{_OWNER} takes on_stop='reply' (a text agent's final_output is the stop message) or "
                f"on_stop='raise' (RepeatGuardStopped), not {on_stop!r}"
            )
        self.on_stop: OnStop = on_stop
        """``"reply"``: a text agent's stopped run ends with the stop's message; ``"raise"``: every stop raises."""
        self.check_tools = check_tools
        """Whether the first model call checks the tool names the policy names (``False``: tools appear later)."""
        self.inner: AgentHooks[Any] | None = inner.inner if isinstance(inner, RepeatGuardHooks) else inner
        """The agent's own hooks, called after the guard's work."""
        check_budgets(self.policy, owner=_OWNER, cost=cost, clock=clock, error=GuardSetupError)
        self._points = self.policy.hook_points()
        self._graph = _Graph()

    def wrapping(self, inner: AgentHooks[Any] | None) -> RepeatGuardHooks:
        """The same guard around another agent's own hooks (for the agents it hands off to)."""
        sibling = object.__new__(RepeatGuardHooks)
        sibling.__dict__.update(self.__dict__)
        sibling.inner = inner.inner if isinstance(inner, RepeatGuardHooks) else inner
        return sibling

    # -- the agent hooks -------------------------------------------------------------------------------------

    async def on_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Fires when the agent starts (run start, handoff, resume, nested run): starts the run's turn, or keeps it.

        Raises ``MissingGuard`` when the context holds no ``GuardState``, ``GuardSetupError`` when this run's
        turn was replaced by another run's on the same state.
        """
        state = require_state(context.context)
        if turn_of(context.usage) is not None:
            turn_in_run(state, context.usage)  # a handoff or a nested run: the turn goes on, if it is still ours
        else:
            with _observed(agent.name):
                observe.apply(self.policy.start_turn, state, turn_id=turn_for_run(context.usage, state))
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Fires before each model call: checks the run, the first time the tool names, then starts the clock.

        Raises ``GuardSetupError`` when the run's state was taken over by another run, or when the policy names
        a tool (in ``limits``, ``exempt``, ``read_only``, ``destructive``) that none of the guarded agents has
        (checked once, at the first model call, when the MCP servers' tools are listed too).
        """
        state = require_state(context.context)
        run = run_of(context.usage)
        check_turn(state, run, context.usage)
        if self.check_tools and not self._graph.checked:
            await self._check_tool_names(context)
        if self.clock is not None and run is not None:
            run.stopwatches.setdefault(id(context), Stopwatch(self.clock)).start()
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        """Fires after each model response: counts the model call, then decides its function calls as one batch.

        The model call is recorded with its seconds (``clock``) and cost (``cost`` of its ``Usage``). Every
        function call of the response is then decided before any of them runs (``decide_tool_calls``), so
        no result of the batch restarts another's count; the input guardrail hands each call its decision.
        Raises ``GuardSetupError`` when the guard has ``max_cost_usd`` and the model reported no usage at
        all (some third-party providers): its cost would always be 0 dollars.
        """
        state = require_state(context.context)
        usage = context.usage
        run = run_of(usage)
        turn_id = check_turn(state, run, usage, resumed=run is None and has_worked(usage))
        stopwatch = None if run is None else run.stopwatches.pop(id(context), None)
        cost = 0.0
        if self.cost is not None:
            if self.policy.max_cost_usd is not None and not _reports_usage(response.usage):
                fail(usage, _no_usage(agent, self.policy.max_cost_usd))
            cost = self.cost(response.usage)
        seconds = stopwatch.seconds() if stopwatch is not None else 0.0
        with _observed(agent.name):
            observe.apply(self.policy.record_model_call, state, seconds=seconds, cost_usd=cost, turn_id=turn_id)
            self._decide_batch(state, run, turn_id, agent, response)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    def _decide_batch(
        self, state: GuardState, run: Run | None, turn_id: str, agent: Agent[Any], response: ModelResponse
    ) -> None:
        calls = batch_of(response, agent, _server_hints(agent), run.invoked if run is not None else {})
        if not calls:
            return
        since = last_event(state)
        if run is not None and run.batched_at == state.turn.responses:
            # No EndTurn since the last batch (a response that also handed off): open a new response first.
            observe.apply(self.policy.decide_model_call, state, turn_id=turn_id)
        decisions = observe.apply(self.policy.decide_tool_calls, state, calls, turn_id=turn_id)
        trace_events(state, since, calls, decisions)
        if run is None:
            return  # a resumed run's response: its calls keep their own ids
        # Known before the SDK asks a human about any of them (AskUnlessRefused): a refused call is never asked.
        run.refused.update(
            call.call_id for call, refusal in zip(calls, decisions, strict=True) if refusal and call.call_id
        )
        run.batch.clear()
        for call, decided_as in zip(calls, batch_call_ids(calls), strict=True):
            run.batch.setdefault((call.call_id or "", call.name, str(call.arguments)), []).append(decided_as)
        run.batched_at = state.turn.responses

    async def _check_tool_names(self, context: RunContextWrapper[Any]) -> None:
        policy, graph = self.policy, self._graph
        named = set(policy.limits) | policy.exempt | policy.read_only | policy.destructive
        agents = [agent for agent in (ref() for ref in graph.agents) if agent is not None]
        names = {tool.name for agent in agents for tool in agent.tools if isinstance(tool, FunctionTool)}
        if not named <= names:  # only then list the MCP servers' tools (a round trip without a tool cache)
            for agent in agents:
                if agent.mcp_servers:
                    names |= {tool.name for tool in await agent.get_mcp_tools(context)}
        try:
            check_tool_names(policy, names, owner=_OWNER)
        except repeat_hooks.GuardSetupError as error:
            fail(context.usage, GuardSetupError(f"repeat-hooks: {error}"))
        graph.checked = True

    # -- the agent's own hooks, called through ------------------------------------------------------------------

    async def on_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
        """Fires when the agent produced its final output: calls your hooks' ``on_end``."""
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], agent: Agent[Any], source: Agent[Any]) -> None:
        """Fires when the agent is handed off to: calls your hooks' ``on_handoff``."""
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        """Fires before one of the agent's tools runs (its guardrails let it): calls your hooks' ``on_tool_start``."""
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any) -> None:
        """Fires after one of the agent's tools ran: calls your hooks' ``on_tool_end``."""
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


def _check_reach(guard: RepeatGuardHooks) -> None:
    """Raises ``GuardSetupError`` when the policy names a tool of the guarded agents that no guardrail of the
    guard sees: its calls could be neither counted nor refused, so the setting would silently do nothing."""
    policy = guard.policy
    agents = [agent for agent in (ref() for ref in guard._graph.agents) if agent is not None]
    guarded = {tool.name for agent in agents for tool in agent.tools if isinstance(tool, FunctionTool)}
    for setting in ("limits", "exempt", "read_only", "destructive"):
        for name in sorted(set(getattr(policy, setting)) - guarded):
            for agent in agents:
                for tool in agent.tools:
                    if tool.name == name:
                        raise GuardSetupError(_out_of_reach(setting, name, tool, agent))


_LOCAL = (ShellTool, LocalShellTool, ApplyPatchTool, ComputerTool, CustomTool)
"""Tools that run here without tool guardrails; every other tool that is not a ``FunctionTool`` is hosted."""


def _out_of_reach(setting: str, name: str, tool: Tool, agent: Agent[Any]) -> str:
    kind = type(tool).__name__
    said = f"repeat-hooks: Policy({setting}=...) names {name!r}"
    hosted_shell = isinstance(tool, ShellTool) and tool.environment is not None and tool.environment["type"] != "local"
    if isinstance(tool, _LOCAL) and not hosted_shell:
        gate = "gate its calls with its needs_approval / on_approval" if hasattr(tool, "needs_approval") else ""
        return (
            f"{said}, a {kind} of agent {agent.name!r}: the OpenAI Agents SDK runs it with no tool guardrails, so "
            f"the guard can neither count nor refuse its calls. Take {name!r} out of the policy; "
            f"{gate + ', or ' if gate else ''}bound the turn with max_model_calls=N"
        )
    return (
        f"{said}, a hosted tool ({kind}) of agent {agent.name!r}: hosted tools run on OpenAI's servers and their "
        "calls never pass through the guard, so it can neither count nor refuse them. Take "
        f"{name!r} out of the policy; to cap the hosted tool calls of one response, set "
        "ModelSettings(extra_args={'max_tool_calls': N}) (Responses API); to bound the turn, max_model_calls=N; "
        "to guard the action itself, give the agent a @function_tool that does it"
    )


class _Graph:
    """What the siblings of one ``guard_agent`` call share: the agents guarded, and whether their tool names
    were checked against the policy."""

    __slots__ = ("agents", "checked")

    def __init__(self) -> None:
        self.agents: list[weakref.ref[Agent[Any]]] = []
        self.checked = False


def _reports_usage(usage: Usage) -> bool:
    return bool(usage.requests or usage.input_tokens or usage.output_tokens or usage.total_tokens)


def _no_usage(agent: Agent[Any], budget: float) -> GuardSetupError:
    return GuardSetupError(
        f"repeat-hooks: max_cost_usd={budget:g} can never trip: the model of agent {agent.name!r} reported no "
        "token usage, so cost=... prices every call at 0 dollars. Use a model that reports usage (streamed Chat "
        "Completions need ModelSettings(include_usage=True)), or limit the turn with max_model_calls"
    )


def _observed(agent_name: str | None) -> contextlib.AbstractContextManager[object]:
    """The observers' scope of a hook call: the running agent's name (``repeat_hooks.observe.otel``'s
    ``gen_ai.agent.name``); nothing to enter with no observer registered."""
    return observe.scope(agent_name=agent_name) if observe.OBSERVERS else _UNOBSERVED


_UNOBSERVED = contextlib.nullcontext()


def guard_of(agent: Any) -> RepeatGuardHooks | None:
    """The guard on ``agent`` (its ``hooks``), or ``None`` for an agent not built with ``guard_agent``."""
    hooks = getattr(agent, "hooks", None)
    return hooks if isinstance(hooks, RepeatGuardHooks) else None


# -- before and after a tool: the guardrails -----------------------------------------------------------------


def _call_in_run(tool_context: ToolContext[Any]) -> tuple[GuardState, str, Run | None]:
    """The state, turn and run a guarded call belongs to; raises as ``require_state`` / ``turn_in_run`` do.

    A call a human approved runs, on resume, before the run's ``on_start``: it belongs to the state's turn.
    """
    state = require_state(tool_context.context)
    run = run_of(tool_context.usage)
    resumed = run is None and tool_context.is_tool_approved(tool_context.tool_name, tool_context.tool_call_id)
    return state, check_turn(state, run, tool_context.usage, resumed=resumed is True), run


class RefuseRepeats:
    """The input guardrail's function: fires before each call of a guarded tool; returns its decision.

    ``guard``: the guard of the agent whose function tools carry it; ``None`` on a local MCP server, which
    unguarded agents may share: the guard of the agent running the call decides, and an unguarded agent's
    calls pass unchecked. ``hints``: the MCP server's annotations of its tools.
    """

    def __init__(self, guard: RepeatGuardHooks | None, hints: McpHints | None = None) -> None:
        self.guard = guard
        self.hints = hints

    def __call__(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Returns "allow", or ``reject_content(refusal.message)``: the call's decision, made with its batch."""
        guard = self.guard or guard_of(data.agent)
        if guard is None:
            return _ALLOW
        tool_context = data.context
        state, turn_id, run = _call_in_run(tool_context)
        call_id = tool_context.tool_call_id
        if run is not None and call_id:
            call_id = run.batch_id(call_id, tool_context.tool_name, tool_context.tool_arguments)
            run.claimed[id(tool_context)] = call_id
        with _observed(data.agent.name):
            refusal = observe.apply(
                guard.policy.decide_tool_call, state, call_of(tool_context, self.hints, call_id), turn_id=turn_id
            )
        if refusal is None:
            return _ALLOW
        if run is not None:
            run.claimed.pop(id(tool_context), None)
            run.refused.add(tool_context.tool_call_id)
        return ToolGuardrailFunctionOutput.reject_content(refusal.message, output_info=refusal)


class RecordOutcome:
    """The output guardrail's function: fires after a guarded tool ran and records its outcome.

    Passes the guard whether the call failed (``calls.failed``: the SDK's error text, or the guard's
    ``is_failure`` on the tool's own output) and what the model reads of its result (``calls.model_view``:
    digested by the core, never stored). Always allows the output through unchanged. ``guard`` and
    ``hints`` as for ``RefuseRepeats``; ``output_type``: the tool's ``TypeAdapter`` when it has an
    ``output_type``.
    """

    def __init__(
        self,
        guard: RepeatGuardHooks | None,
        hints: McpHints | None = None,
        output_type: TypeAdapter[Any] | None = None,
    ) -> None:
        self.guard = guard
        self.hints = hints
        self.output_type = output_type

    def __call__(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Record the call's outcome and result in the run's state; returns "allow"."""
        guard = self.guard or guard_of(data.agent)
        if guard is None or HookPoint.POST_TOOL_CALL not in guard._points:
            return _ALLOW
        tool_context = data.context
        state, turn_id, run = _call_in_run(tool_context)
        call_id = run.claimed.pop(id(tool_context), None) if run is not None else None
        call = call_of(tool_context, self.hints, call_id or tool_context.tool_call_id)
        output = data.output
        with _observed(data.agent.name):
            observe.apply(
                guard.policy.record_tool_result,
                state,
                call,
                ok=not failed(output, guard.is_failure),
                result=model_view(output, self.output_type),
                turn_id=turn_id,
            )
        return _ALLOW


def is_ours(guardrail: object) -> bool:
    """``True`` for a guardrail this adapter made (so guarding twice attaches nothing twice)."""
    return isinstance(getattr(guardrail, "guardrail_function", None), (RefuseRepeats, RecordOutcome))


def _server_hints(agent: Agent[Any]) -> list[McpHints]:
    """The hints of the agent's local MCP servers, as their guardrails hold them."""
    found = []
    for server in agent.mcp_servers:
        for guardrail in server.tool_input_guardrails or []:
            function = getattr(guardrail, "guardrail_function", None)
            if isinstance(function, RefuseRepeats) and function.hints is not None:
                found.append(function.hints)
                break
    return found


# -- before the next model call: tool_use_behavior ---------------------------------------------------------


class EndTurn:
    """A guarded agent's ``tool_use_behavior``: fires after each batch of function tools, before the next model call.

    The SDK calls it after every batch of function-tool results (``run_internal/turn_resolution.py``
    ``check_for_final_output_from_tools``); a final output there ends the run with no further model call,
    which is exactly the guard's ``pre_llm_call``. Returns the agent's own decision when it ends the run
    (for example ``"stop_on_first_tool"``: its output stands); otherwise the guard's ``decide_model_call``: a
    ``Stop`` becomes ``ToolsToFinalOutputResult(is_final_output=True, final_output=stop.message)`` (the run's
    ``final_output``, whatever the agent's ``output_type``), and no stop lets the model run again.

    With ``raises`` (an agent with a structured ``output_type``, or ``on_stop="raise"``) a stop raises
    ``RepeatGuardStopped`` instead, before the SDK hands any final output to the agent's output guardrails
    and ``on_end`` hooks; the SDK attaches the run's ``run_data`` to it, as it does to ``MaxTurnsExceeded``.

    A call the guard refused did not run, so it never becomes the caller's output: ``"stop_on_first_tool"``
    and ``StopAtTools`` look only at the calls that ran (a callable behaviour of yours sees every result,
    refusals included). A call a human rejected at approval did not run either: it is withdrawn
    (``Policy.record_rejection``: it counts as a rejected call) before the stop is decided.
    """

    def __init__(
        self, original: ToolUseBehavior, guard: RepeatGuardHooks, *, raises: bool = False, agent_name: str | None = None
    ) -> None:
        self.original: ToolUseBehavior = original.original if isinstance(original, EndTurn) else original
        """The agent's own behaviour, asked first."""
        self.guard = guard
        self.raises = raises
        """``True``: a stop raises ``RepeatGuardStopped`` instead of becoming the run's ``final_output``."""
        self.agent_name = agent_name
        """The name of the agent it ends the turns of, for the observers (``observe.scope``)."""

    async def __call__(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        """Decide whether the batch ends the run; see the class docstring."""
        state = require_state(context.context)
        run = run_of(context.usage)
        turn_id = check_turn(state, run, context.usage, resumed=run is None and _decided_by_human(context, results))
        self._withdraw_rejected(state, run, turn_id, context, results)
        decided = await self._original_decision(context, results, run)
        if decided.is_final_output:
            return decided
        since = last_event(state)
        with _observed(self.agent_name):
            stop = observe.apply(self.guard.policy.decide_model_call, state, turn_id=turn_id)
        if stop is None:
            return decided
        trace_events(state, since)
        if self.raises:
            raise RepeatGuardStopped(stop)
        return ToolsToFinalOutputResult(is_final_output=True, final_output=stop.message)

    def _withdraw_rejected(
        self,
        state: GuardState,
        run: Run | None,
        turn_id: str,
        context: RunContextWrapper[Any],
        results: list[FunctionToolResult],
    ) -> None:
        """Withdraw the calls a human rejected at approval: they never ran, and count as rejected calls.

        The SDK hands a rejected call's rejection text to ``tool_use_behavior`` with the batch, and no guardrail
        runs for it. After a resume in a fresh process the run knows no batch: the call is found by its id in
        the state (the turn's response did not move on while the run was paused).
        """
        for result in results:
            if result.tool.needs_approval is False:
                continue  # never put to a human, so never rejected by one
            call_id = _call_id(result)
            if not call_id or context.is_tool_approved(result.tool.name, call_id) is not False:
                continue
            name, arguments, decided_as = result.tool.name, "", call_id
            item = run.invoked.get(call_id) if run is not None else None
            if run is not None and item is not None:
                arguments = item.arguments
                decided_as = run.batch_id(call_id, name, arguments) or call_id
            observe.apply(
                self.guard.policy.record_rejection, state, tool_call(name, arguments, decided_as), turn_id=turn_id
            )

    async def _original_decision(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult], run: Run | None
    ) -> ToolsToFinalOutputResult:
        # The same rules as the SDK's check_for_final_output_from_tools (turn_resolution.py:776).
        original = self.original
        if not results:
            return _GO_ON
        if not isinstance(original, str | dict):
            return await self._ask(original, context, results)
        if run is not None:
            results = [r for r in results if _call_id(r) not in run.refused]  # they did not run
        if not results or original == "run_llm_again":
            return _GO_ON
        if original == "stop_on_first_tool":
            return ToolsToFinalOutputResult(is_final_output=True, final_output=results[0].output)
        if isinstance(original, dict):
            names = _stop_names(original)
            for result in results:
                if result.tool.name in names or result.tool.qualified_name in names:
                    return ToolsToFinalOutputResult(is_final_output=True, final_output=result.output)
        return _GO_ON

    @staticmethod
    async def _ask(
        function: ToolsToFinalOutputFunction[Any], context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        decided = function(context, results)
        if inspect.isawaitable(decided):
            decided = await decided
        if not isinstance(decided, ToolsToFinalOutputResult):  # as the SDK itself checks
            raise UserError("Agent tool_use_behavior callable must return ToolsToFinalOutputResult.")
        return decided


def _call_id(result: FunctionToolResult) -> str | None:
    raw = getattr(result.run_item, "raw_item", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return call_id if isinstance(call_id, str) else None


def _decided_by_human(context: RunContextWrapper[Any], results: list[FunctionToolResult]) -> bool:
    """``True`` for a batch holding a call a human approved or rejected: on resume it ends before ``on_start``."""
    for result in results:
        if result.tool.needs_approval is False:
            continue
        call_id = _call_id(result)
        if call_id is not None and context.is_tool_approved(result.tool.name, call_id) is not None:
            return True
    return False


class AskUnlessRefused:
    """A guarded function tool's ``needs_approval``: a call the guard refused with its batch is never asked about.

    The SDK asks ``needs_approval`` after the model response (so after ``on_llm_end`` decided its calls) and
    before it pauses the run for a human (``util/_approvals.py`` ``evaluate_function_tool_approval``, from
    ``run_internal/turn_resolution.py``). For a call the guard refused, it answers ``False``: the SDK then
    runs the call's input guardrails, which hand the model the refusal, and nobody is asked to approve a call
    that would not run. For every other call it answers as the tool's own setting does (``True``, or your
    callable, asked with the same arguments).
    """

    def __init__(self, original: Any) -> None:
        self.original: Any = original.original if isinstance(original, AskUnlessRefused) else original
        """The tool's own ``needs_approval``: a ``bool`` or ``(context, params, call_id) -> bool`` (maybe async)."""

    async def __call__(self, context: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        """``False`` for a call the guard refused in this run, else the tool's own answer."""
        run = run_of(context.usage)
        if run is not None and call_id in run.refused:
            return False
        original = self.original
        if isinstance(original, bool):
            return original
        asked = original(context, params, call_id)
        if inspect.isawaitable(asked):
            asked = await asked
        return bool(asked)


def _stop_names(behavior: StopAtTools | dict[str, Any]) -> list[str]:
    return list(behavior.get("stop_at_tool_names", []))


# -- building the guarded clone ----------------------------------------------------------------------------


class _Guarding:
    """One guard_agent call: guards each agent of the handoff graph once."""

    def __init__(self, guard: RepeatGuardHooks) -> None:
        self.guard = guard
        self.outcomes = HookPoint.POST_TOOL_CALL in guard._points
        self.done: dict[int, tuple[Agent[Any], Agent[Any]]] = {}

    def agent(self, agent: Agent[TContext]) -> Agent[TContext]:
        done = self.done.get(id(agent))
        if done is not None:
            guarded: Agent[TContext] = done[1]
            return guarded
        guard = self.guard.wrapping(agent.hooks)
        clone = agent.clone(
            tools=[self.tool(tool, guard) for tool in agent.tools],
            tool_use_behavior=EndTurn(
                agent.tool_use_behavior,
                guard,
                raises=guard.on_stop == "raise" or not _text_output(agent),
                agent_name=agent.name,
            ),
            hooks=guard,
        )
        self.done[id(agent)] = (agent, clone)  # before the handoffs: they may lead back here
        guard._graph.agents.append(weakref.ref(clone))
        clone.handoffs = [self.handoff(entry) for entry in agent.handoffs]
        for server in agent.mcp_servers:
            # Shared with other agents: the guardrails ask the running agent for its guard (none: no check).
            hints = McpHints(server)
            inputs = list(server.tool_input_guardrails or [])
            if not any(is_ours(g) for g in inputs):
                server.tool_input_guardrails = [*inputs, ToolInputGuardrail(RefuseRepeats(None, hints), name=_IN)]
            outputs = list(server.tool_output_guardrails or [])
            if not any(is_ours(g) for g in outputs):
                outcome: ToolOutputGuardrail[Any] = ToolOutputGuardrail(RecordOutcome(None, hints), name=_OUT)
                server.tool_output_guardrails = [*outputs, outcome]
        return clone

    def tool(self, tool: Tool, guard: RepeatGuardHooks) -> Tool:
        if not isinstance(tool, FunctionTool):
            return tool  # hosted, shell, computer, ... tools: no input guardrails (see module doc)
        inputs = [g for g in tool.tool_input_guardrails or [] if not is_ours(g)]
        outputs = [g for g in tool.tool_output_guardrails or [] if not is_ours(g)]
        inputs.append(ToolInputGuardrail(RefuseRepeats(guard), name=_IN))
        if self.outcomes:
            outputs.append(ToolOutputGuardrail(RecordOutcome(guard, output_type=output_type_of(tool)), name=_OUT))
        asks = tool.needs_approval
        if asks is not False:
            asks = AskUnlessRefused(asks)
        return dataclasses.replace(
            tool, tool_input_guardrails=inputs, tool_output_guardrails=outputs, needs_approval=asks
        )

    def handoff(self, entry: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
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

        copy = dataclasses.replace(entry, on_invoke_handoff=on_invoke_handoff)
        if guarded_target is not None:
            copy._agent_ref = weakref.ref(guarded_target)
        return copy


def _text_output(agent: Agent[Any]) -> bool:
    """``True`` when the agent's final output is text (the SDK's own test, ``turn_resolution.py``)."""
    output_type = agent.output_type
    if output_type is None or output_type is str:
        return True
    return isinstance(output_type, AgentOutputSchemaBase) and output_type.is_plain_text()


_IN = "repeat_hooks"
_OUT = "repeat_hooks_outcome"
