"""``RepeatGuardHooks``: the guard as a Strands hook provider and agent plugin.

``Agent(hooks=[RepeatGuardHooks()])`` and ``Agent(plugins=[RepeatGuardHooks()])`` do the same;
``Swarm(nodes, hooks=[guard])`` and ``Graph(..., hooks=[guard])`` guard each of their agents. One
instance may serve many agents (an orchestrator and the agents it uses as tools, a swarm's or a graph's
nodes), concurrently: it holds no counters. Each hook reads the agent's ``GuardState`` from
``agent.state`` (see ``state``), applies one verb of the ``Policy`` and writes it back. What it keeps in
the process is per agent and per model response only: the decisions of the response's tool calls until
each call's hook takes its own, the start of the model call in flight, and whether the next model call was
already decided.

A **turn** is one invocation that brings new input (``agent("...")``, ``invoke_async``, ``stream_async``,
an ``AfterInvocationEvent.resume`` with input). An invocation without new input continues the current turn
with its counts: resuming after an interrupt or from a checkpoint, or ``agent()`` to finish a turn that
a crash cut short, in this process or another that joined the same session.

Which hook does what:

- ``BeforeInvocationEvent``: starts a turn (fresh counts) when the invocation brings new input.
- ``BeforeModelCallEvent``: a stop sets ``event.cancel`` to the stop message: the model is not called,
  and Strands ends the turn with that text as the final assistant message (``stop_reason="end_turn"``;
  ``strands/event_loop/event_loop.py:549-577``). At an agent's first model call, checks the tool names the
  policy names (see ``RepeatGuardHooks``).
- ``AfterModelCallEvent``: counts the model call, with its seconds and its cost (the response's usage).
- ``BeforeToolsEvent``: the model's response with all its tool uses, before any runs: decides them as
  one batch (``Policy.decide_tool_calls``), so no result of the batch restarts another's count, however
  Strands' executor (concurrent by default) then runs them.
- ``BeforeToolCallEvent``: hands back the call's decision; a refusal sets ``event.cancel_tool`` to the
  refusal text, so the tool does not run and the model reads the text as the call's (error) result
  (``strands/tools/executors/_executor.py:223-247``).
- ``AfterToolCallEvent``: records the outcome and what the model reads of the result (``calls.model_view``).
- ``AfterToolsEvent``: the turn's next step is a model call: decides it here, and a stop sets
  ``event.end_turn`` to the stop message, so the loop ends with it as the final assistant message without
  another cycle (``strands/event_loop/event_loop.py:1007-1028``).

A stop is also put in the invocation's ``request_state``, so ``AgentResult.state["repeat_hooks_stop"]`` is
the stop reason; ``stop_of(agent)`` gives the whole ``Stop`` afterwards.
"""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from strands.hooks import (
    AfterModelCallEvent,
    AfterToolCallEvent,
    AfterToolsEvent,
    AgentInitializedEvent,
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    BeforeToolsEvent,
    HookRegistry,
    MultiAgentInitializedEvent,
)
from strands.plugins import Plugin

from repeat_hooks import GuardSetupError, GuardState, Policy, Refusal, Stop, ToolCall, observe
from repeat_hooks.call import batch_call_ids
from repeat_hooks.kit import Clock, CostOf, Stopwatch, check_budgets, check_tool_names, policy_from
from repeat_hooks.kit.clock import monotonic
from repeat_hooks.stop_rules import HookPoint

from .calls import model_view, succeeded, tool_call
from .state import STATE_KEY, ParsedStates

if TYPE_CHECKING:
    from strands import Agent
    from strands.types.tools import AgentTool, ToolUse

STOP_KEY = "repeat_hooks_stop"
"""The ``request_state`` key (``AgentResult.state``) holding the reason of a turn the guard stopped."""
_OWNER = "RepeatGuardHooks"

_claims: weakref.WeakKeyDictionary[Any, dict[str, RepeatGuardHooks]] = weakref.WeakKeyDictionary()
"""Agent -> the guard holding each state key of it: two guards on one key would count every call twice."""

_Hook = TypeVar("_Hook", bound=Callable[[Any, Any], None])


def _in_scope(hook: _Hook) -> _Hook:
    """Runs a hook callback in ``observe.scope(...)``: the agent's name and, with a session manager, its session
    id, which the observers read (``repeat_hooks.observe.otel``: ``gen_ai.agent.name``, ``gen_ai.conversation.id``).
    With no observer registered it runs the callback as it is."""

    @functools.wraps(hook)
    def scoped(self: Any, event: Any) -> None:
        if not observe.OBSERVERS:
            return hook(self, event)
        agent = event.agent
        session = getattr(_session_manager(agent), "session_id", None)
        with observe.scope(conversation_id=session if isinstance(session, str) else None, agent_name=agent.name):
            return hook(self, event)

    return scoped  # type: ignore[return-value]


class RepeatGuardHooks(Plugin):
    """The loop guard for Strands agents: ``Agent(..., hooks=[RepeatGuardHooks()])`` (or ``plugins=[...]``).

    ``policy`` is the settings: a ``Policy``, the settings as keywords (``RepeatGuardHooks(max_calls=2,
    max_refusals=3)``), or nothing for the default ``Policy()``. A ``StopRepeatedCalls`` is refused: the
    counts live in each agent's ``agent.state``.

    ``cost`` turns a model response's usage into US dollars, for ``max_cost_usd``:
    ``cost=TokenPrices(3, 15)`` (it is handed the response's Strands ``Usage`` as it is, ``{}`` where the
    response reported none: ``repeat_hooks.usage_tokens`` reads Strands' keys). ``clock`` times model calls, for
    ``max_model_seconds`` (``None``: no timing). ``check_tools=False`` skips the check of the tool names the
    policy names. ``state_key`` is the ``agent.state`` key.

    Misuse fails loudly: at construction (``TypeError`` or ``repeat_hooks.GuardSetupError``), a policy
    argument that is not one or a budget nothing feeds (``max_cost_usd`` without ``cost``,
    ``max_model_seconds`` without ``clock``); when the agent is built, the guard registered twice on it, or
    two guards on one state key (every call would be counted twice); at an agent's first model call, a tool
    name in ``limits``, ``exempt``, ``read_only`` or ``destructive`` that none of the agents this guard
    serves has (their tools are complete by then: MCP tools given as ``tools=[mcp_client]`` are listed when
    the agent is built; pass ``check_tools=False`` for tools added later).
    """

    name = "repeat_hooks"
    """The plugin's name in the agent's plugin registry."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        check_tools: bool = True,
        state_key: str = STATE_KEY,
        **settings: Any,
    ) -> None:
        super().__init__()
        self.policy: Policy = policy_from(policy, settings, owner=_OWNER)
        """The settings; the counters live in each agent's ``agent.state``."""
        check_budgets(self.policy, owner=_OWNER, cost=cost, clock=clock)
        if not isinstance(state_key, str) or not state_key.strip():
            raise GuardSetupError(f"repeat-hooks: state_key={state_key!r} must be a non-empty string")
        self.cost = cost
        self.clock = clock
        self.check_tools = check_tools
        self.state_key = state_key
        points = self.policy.hook_points()
        self._records_outcomes = HookPoint.POST_TOOL_CALL in points
        self._records_model_calls = HookPoint.POST_LLM_CALL in points
        self._states = ParsedStates()
        self._runs: weakref.WeakKeyDictionary[Any, _Run] = weakref.WeakKeyDictionary()
        self._agents: weakref.WeakSet[Any] = weakref.WeakSet()
        self._registries: weakref.WeakSet[HookRegistry] = weakref.WeakSet()

    # -- registration ------------------------------------------------------------------------------

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Fires when an agent is built with ``hooks=[guard]`` (or ``plugins=[guard]``): registers the guard's
        callbacks on the agent's hook registry. Raises ``GuardSetupError`` if they are there already."""
        if registry in self._registries:
            raise GuardSetupError(
                f"repeat-hooks: this {_OWNER} is registered twice on one agent (hooks=[...] and plugins=[...]?): "
                "every call would be counted twice. Give it once."
            )
        self._registries.add(registry)
        registry.add_callback(AgentInitializedEvent, self._on_agent_initialized)
        registry.add_callback(BeforeInvocationEvent, self._on_before_invocation)
        registry.add_callback(BeforeModelCallEvent, self._on_before_model_call)
        registry.add_callback(AfterModelCallEvent, self._on_after_model_call)
        registry.add_callback(BeforeToolsEvent, self._on_before_tools)
        registry.add_callback(BeforeToolCallEvent, self._on_before_tool_call)
        registry.add_callback(AfterToolCallEvent, self._on_after_tool_call)
        registry.add_callback(AfterToolsEvent, self._on_after_tools)
        registry.add_callback(MultiAgentInitializedEvent, self._on_multiagent_initialized)

    def init_agent(self, agent: Agent) -> None:
        """Fires when an agent is built with ``plugins=[guard]``: registers the callbacks (``register_hooks``)."""
        self.register_hooks(agent.hooks)

    def _on_agent_initialized(self, event: AgentInitializedEvent) -> None:
        """Fires once the agent is built: remembers it (for the tool-name check) and claims its state key.
        Raises ``GuardSetupError`` if another guard holds the same key on this agent."""
        self._claim(event.agent)

    def _claim(self, agent: Any) -> None:
        claims = _claims.setdefault(agent, {})
        holder = claims.setdefault(self.state_key, self)
        if holder is not self:
            raise GuardSetupError(
                f"repeat-hooks: two {_OWNER} share the agent.state key {self.state_key!r} on agent "
                f"{agent.name!r}: every call would be counted twice. Give the agent one guard (or give each "
                "its own state_key)."
            )
        self._agents.add(agent)

    def _on_multiagent_initialized(self, event: MultiAgentInitializedEvent) -> None:
        """Fires when a ``Swarm`` or ``Graph`` given ``hooks=[guard]`` is built: guards each of its agents (and
        those of the swarms and graphs nested in it) that this guard does not guard yet, as if each had been
        built with ``hooks=[guard]``. Returns nothing."""
        pending: list[Any] = [event.source]
        while pending:
            orchestrator = pending.pop()
            nodes = getattr(orchestrator, "nodes", None)
            for node in nodes.values() if isinstance(nodes, dict) else ():
                executor = getattr(node, "executor", None)
                registry = getattr(executor, "hooks", None)
                if isinstance(getattr(executor, "nodes", None), dict):
                    pending.append(executor)
                elif isinstance(registry, HookRegistry) and registry not in self._registries:
                    self.register_hooks(registry)
                    self._claim(executor)

    # -- turns and model calls ---------------------------------------------------------------------

    @_in_scope
    def _on_before_invocation(self, event: BeforeInvocationEvent) -> None:
        """Fires when an invocation starts: new input starts a turn (fresh counts, a new turn id); none
        (an interrupt's or a checkpoint's resume, ``agent()``) continues the current one. Returns nothing."""
        agent = event.agent
        run = self._run(agent)
        run.reset()
        state = self._read(agent)
        if not event.messages and state.turn.number:
            self._states.keep(agent, state)  # unchanged: parsed for the next read, not written
            return
        observe.apply(self.policy.start_turn, state, turn_id=uuid.uuid4().hex)
        self._write(agent, state)

    @_in_scope
    def _on_before_model_call(self, event: BeforeModelCallEvent) -> None:
        """Fires before each model call. When the turn must stop, sets ``event.cancel`` to the stop message:
        Strands skips the model and ends the turn with that text. Raises ``GuardSetupError`` at an agent's
        first model call for a tool name the policy names that none of the guarded agents has."""
        agent = event.agent
        run = self._run(agent)
        if not run.tools_checked:
            self._check_tool_names(agent)
            run.tools_checked = True
        if run.ahead:
            run.ahead = False  # AfterToolsEvent decided this call already
        else:
            state = self._read(agent)
            stop = observe.apply(self.policy.decide_model_call, state)
            self._write(agent, state)
            if stop is not None:
                event.cancel = stop.message
                run.cancelled = True
                _mark_stop(event.invocation_state, stop)
                return
        if self._records_model_calls:
            run.watch.start()

    @_in_scope
    def _on_after_model_call(self, event: AfterModelCallEvent) -> None:
        """Fires after each model call (and after a call the guard cancelled, which it skips): counts it,
        with its seconds and its cost, when the policy has a budget that needs them. A call that raised is
        not counted. Returns nothing."""
        run = self._run(event.agent)
        if run.cancelled:
            run.cancelled = False
            return
        response = event.stop_response
        if response is None or not self._records_model_calls:
            return
        seconds = run.watch.seconds()
        cost = 0.0
        if self.cost is not None:
            metadata = response.message.get("metadata")
            usage = metadata.get("usage") if isinstance(metadata, dict) else None
            cost = self.cost(usage if usage is not None else {})
        state = self._read(event.agent)
        observe.apply(self.policy.record_model_call, state, seconds=seconds, cost_usd=cost)
        self._write(event.agent, state)

    # -- tools ---------------------------------------------------------------------------------------

    @_in_scope
    def _on_before_tools(self, event: BeforeToolsEvent) -> None:
        """Fires once per model response with tool uses, before any runs: decides them all as one batch and
        saves the counts (the agent's session manager, if any, writes them now). Returns nothing."""
        if event.cancel:
            return  # another hook cancelled the whole batch: nothing runs
        agent = event.agent
        uses = [block["toolUse"] for block in event.message["content"] if "toolUse" in block]
        if not uses:
            return
        calls = [tool_call(use, _lookup(agent, str(use.get("name", "")))) for use in uses]
        state = self._read(agent)
        decisions = observe.apply(self.policy.decide_tool_calls, state, calls)
        run = self._run(agent)
        run.batch = [
            _Call(use=use, call=replace(call, call_id=call_id), refusal=refusal)
            for use, call, call_id, refusal in zip(uses, calls, batch_call_ids(calls), decisions, strict=True)
        ]
        run.in_batch = True
        manager = _session_manager(agent)
        if manager is None:
            self._stage(agent, state)  # written once, with the outcomes, when the batch ends
        else:
            self._write(agent, state)
            manager.sync_agent(agent)  # Strands saves the agent when a message is added: after the batch

    @_in_scope
    def _on_before_tool_call(self, event: BeforeToolCallEvent) -> None:
        """Fires before each tool call (concurrent calls: once each). Hands back the call's batch decision (a
        call of the batch that another hook renamed is decided here); a refusal sets ``event.cancel_tool`` to
        its text, so the tool does not run and the model reads the text as the call's result. A direct call
        by the application (``agent.tool.x(...)``, outside any batch) is left alone. Returns nothing."""
        agent = event.agent
        run = self._run(agent)
        entry = run.claim(event.tool_use)
        if entry is None:
            if not run.in_batch:
                return  # a direct call by the application (agent.tool.x(...)), not the model's: not guarded
            state = self._read(agent)
            call = tool_call(event.tool_use, event.selected_tool)
            entry = _Call(
                use=event.tool_use, call=call, refusal=observe.apply(self.policy.decide_tool_call, state, call)
            )
            entry.claimed = True
            run.batch.append(entry)
            self._stage(agent, state)
        if entry.refusal is not None:
            event.cancel_tool = entry.refusal.message

    @_in_scope
    def _on_after_tool_call(self, event: AfterToolCallEvent) -> None:
        """Fires after each tool call: records whether it succeeded and what the model reads of its result.
        A call another hook cancelled (a human rejected it at an interrupt, a guardrail) did not run: it is
        withdrawn, and counts as rejected (``Policy.record_rejection``). Skips calls the guard refused and
        attempts another hook discards (``retry``). Returns nothing."""
        if event.retry or not self._records_outcomes:
            return
        agent = event.agent
        if event.cancel_message is not None:
            entry = self._run(agent).settle(event.tool_use)
            if entry is not None and entry.refusal is None:
                state = self._read(agent)
                observe.apply(self.policy.record_rejection, state, entry.call)
                self._stage(agent, state)
            return
        entry = self._run(agent).settle(event.tool_use)
        if entry is None or entry.refusal is not None:
            return
        state = self._read(agent)
        result = event.result
        observe.apply(
            self.policy.record_tool_result, state, entry.call, ok=succeeded(result), result=model_view(result)
        )
        self._stage(agent, state)

    @_in_scope
    def _on_after_tools(self, event: AfterToolsEvent) -> None:
        """Fires after a response's tool calls, before their results join the conversation. Unless the turn
        already ends, the next step is a model call: decides it now, and a stop sets ``event.end_turn`` to
        the stop message (the final assistant message; no further cycle). Returns nothing."""
        agent = event.agent
        run = self._run(agent)
        answered = {block["toolResult"].get("toolUseId") for block in event.message["content"] if "toolResult" in block}
        interrupted = any(entry.use.get("toolUseId") not in answered for entry in run.batch)
        run.batch = []
        run.in_batch = False
        state = self._read(agent)
        if event.end_turn or interrupted:
            # No model call follows: the turn ends, or an interrupt pauses the batch (its resume decides the
            # same calls again in this response: each is found by its id, not counted twice).
            self._write(agent, state)
            return
        stop = observe.apply(self.policy.decide_model_call, state)
        self._write(agent, state)
        if stop is None:
            run.ahead = True
            return
        event.end_turn = stop.message
        _mark_stop(event.invocation_state, stop)

    # -- helpers -------------------------------------------------------------------------------------

    def _run(self, agent: Any) -> _Run:
        run = self._runs.get(agent)
        if run is None:
            run = self._runs[agent] = _Run(watch=Stopwatch(self.clock))
        return run

    def _read(self, agent: Any) -> GuardState:
        """The agent's state: the one a tool batch in progress holds, else ``agent.state``'s."""
        run = self._runs.get(agent)
        if run is not None and run.pending is not None:
            return run.pending
        return self._states.read(agent, self.state_key)

    def _write(self, agent: Any, state: GuardState) -> None:
        """Write ``state`` into ``agent.state`` (nothing is pending any more)."""
        run = self._runs.get(agent)
        if run is not None:
            run.pending = None
        self._states.write(agent, state, self.state_key)

    def _stage(self, agent: Any, state: GuardState) -> None:
        """During a tool batch, keep ``state`` for the batch's end (``AfterToolsEvent`` writes it, before the
        results join the conversation and a session manager saves the agent); outside one, write it now."""
        run = self._run(agent)
        if run.in_batch:
            run.pending = state
        else:
            self._write(agent, state)

    def _check_tool_names(self, agent: Any) -> None:
        """The tools the policy names are tools of the agents this guard serves (all of them: a name may be
        a tool of an agent used as a tool, or of another node)."""
        if not self.check_tools:
            return
        names: set[str] = set(agent.tool_names)
        for other in list(self._agents):
            names.update(other.tool_names)
        check_tool_names(self.policy, names, owner=_OWNER)


@dataclass
class _Call:
    """One tool use of the current model response, from its batch decision to its outcome."""

    use: ToolUse
    """The ``toolUse`` block (the very dict Strands hands the tool hooks)."""
    call: ToolCall
    """The call as its batch decided it (its id as ``batch_call_ids`` gave it)."""
    refusal: Refusal | None
    claimed: bool = False
    """Its ``BeforeToolCallEvent`` took the decision."""
    settled: bool = False
    """Its outcome was recorded."""


@dataclass
class _Run:
    """What the guard keeps in the process for one agent: only the current model response's calls, and
    the model call in flight."""

    watch: Stopwatch
    batch: list[_Call] = field(default_factory=list)
    ahead: bool = False
    """``AfterToolsEvent`` decided the next model call already (``BeforeModelCallEvent`` skips deciding)."""
    cancelled: bool = False
    """``BeforeModelCallEvent`` cancelled the model call (its ``AfterModelCallEvent`` is no model call)."""
    tools_checked: bool = False
    in_batch: bool = False
    """Between ``BeforeToolsEvent`` and ``AfterToolsEvent``."""
    pending: GuardState | None = None
    """The state a tool batch in progress changed, until ``AfterToolsEvent`` writes it."""

    def reset(self) -> None:
        """A new invocation: nothing of the previous one's responses is pending."""
        self.batch = []
        self.ahead = False
        self.cancelled = False
        self.in_batch = False
        self.pending = None

    def claim(self, use: ToolUse) -> _Call | None:
        """The batch decision of ``use``: by identity, else the first unclaimed call with its id and name."""
        entry = _find(self.batch, use, lambda e: not e.claimed)
        if entry is not None:
            entry.claimed = True
        return entry

    def settle(self, use: ToolUse) -> _Call | None:
        """The decided call ``use`` is the outcome of, once: by identity, else by its id and name."""
        entry = _find(self.batch, use, lambda e: e.claimed and not e.settled)
        if entry is not None:
            entry.settled = True
        return entry


def _find(batch: list[_Call], use: ToolUse, eligible: Callable[[_Call], bool]) -> _Call | None:
    """The entry of ``use`` among the eligible ones: the very block, else (a hook replaced the block) the first
    with its id, name and input, else the first with its id and name."""
    for entry in batch:
        if entry.use is use and eligible(entry):
            return entry
    name, identifier, arguments = use.get("name"), use.get("toolUseId"), use.get("input")
    matches = [e for e in batch if eligible(e) and e.use.get("toolUseId") == identifier and e.use.get("name") == name]
    exact = [e for e in matches if e.use.get("input") == arguments]
    found = exact or matches
    return found[0] if found else None


def _lookup(agent: Any, name: str) -> AgentTool | None:
    """The tool ``name`` runs, as Strands' executor finds it (dynamic tools first)."""
    registry = agent.tool_registry
    tool: AgentTool | None = registry.dynamic_tools.get(name)
    return tool if tool is not None else registry.registry.get(name)


def _session_manager(agent: Any) -> Any:
    """The agent's session manager (``Agent(session_manager=...)``), if it has one that saves agents."""
    manager = getattr(agent, "_session_manager", None)
    return manager if callable(getattr(manager, "sync_agent", None)) else None


def _mark_stop(invocation_state: dict[str, Any] | None, stop: Stop) -> None:
    """Put the stop's reason in the invocation's ``request_state`` (``AgentResult.state``)."""
    if invocation_state is not None:
        invocation_state.setdefault("request_state", {})[STOP_KEY] = stop.reason.value
