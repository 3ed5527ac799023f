"""``RepeatGuardHooks``, the guard as a Strands hook provider and plugin: each callback applies one verb of the
``Policy`` to the agent's state through the kit's ``GuardCore`` (the README's "How it maps to Strands" says which
event does what, and why); and its errors."""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from strands import hooks
from strands.plugins import Plugin
from strands.types.exceptions import EventLoopException

from repeat_hooks import GuardSetupError, GuardState, Policy, Stop, kit, observe
from repeat_hooks.stores import StateStore

from . import calls
from .calls import model_view, succeeded, tool_call
from .state import STATE_KEY, TURN_KEY, AgentSlot, conversation_key, mark_stop, session_manager

if TYPE_CHECKING:
    from strands import Agent
    from strands.types.tools import AgentTool

__all__ = ["GuardSetupError", "RepeatGuardHooks", "RepeatGuardStopped"]

_OWNER = "RepeatGuardHooks"
_Hook = TypeVar("_Hook", bound=Callable[[Any, Any], None])


class RepeatGuardStopped(kit.GuardStopped, EventLoopException):
    """The guard stopped the turn with ``on_stop="raise"``: raised out of ``agent(...)``. An ``EventLoopException``,
    which Strands' loop lets through unwrapped; ``stop`` says why, ``request_state`` is the invocation's."""

    def __init__(self, stop: Stop, request_state: Any = None) -> None:
        super().__init__(stop, request_state)  # GuardStopped(stop, *details) -> EventLoopException(text, state)
        self.original_exception = self


def _scoped(hook: _Hook) -> _Hook:
    """Runs a callback in ``core.scope(...)``, naming the conversation and the agent for the observers."""

    @functools.wraps(hook)
    def scoped(self: RepeatGuardHooks, event: Any) -> None:
        if not observe.OBSERVERS:
            return hook(self, event)
        session = getattr(session_manager(event.agent), "session_id", None)
        with self.core.scope(self.core.conversation_id(session), event.agent.name):
            hook(self, event)

    return scoped  # type: ignore[return-value]


class RepeatGuardHooks(Plugin):
    """The loop guard for Strands agents: ``Agent(..., hooks=[RepeatGuardHooks()])`` (or ``plugins=[...]``).

    The common keywords, as in every adapter (``repeat_hooks.kit.GuardCore``): ``policy`` (or its settings as
    keywords), ``store`` (``None``: each agent's ``agent.state``), ``cost`` (handed the response's Strands
    ``Usage``), ``clock``, ``is_failure`` (of what the model reads of a result), ``check_tools``, ``on_stop``
    (``"raise"``: ``agent(...)`` raises ``RepeatGuardStopped``) and ``fail``. Strands' own: ``state_key``, the
    ``agent.state`` key (and the store keys' prefix), so that two guards on one agent keep apart.
    """

    name = "repeat_hooks"
    """The plugin's name in the agent's plugin registry."""

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
        state_key: str = STATE_KEY,
        **settings: Any,
    ) -> None:
        super().__init__()
        if not isinstance(state_key, str) or not state_key.strip():
            raise GuardSetupError(f"repeat-hooks: {_OWNER}(state_key={state_key!r}) must be a non-empty string")
        self.core = kit.GuardCore(
            policy, settings, owner=_OWNER, keywords=("state_key",), feeds=calls.FEEDS, **kit.common(locals())
        )
        self.policy: Policy = self.core.policy
        self.state_key = state_key
        self._states = kit.ParsedStates()
        self._runs: weakref.WeakKeyDictionary[Any, _Run] = weakref.WeakKeyDictionary()
        self._agents: weakref.WeakSet[Any] = weakref.WeakSet()
        self._registries: weakref.WeakSet[hooks.HookRegistry] = weakref.WeakSet()

    def register_hooks(self, registry: hooks.HookRegistry, **kwargs: Any) -> None:
        """Fires when an agent is built with ``hooks=[guard]``: registers the callbacks (``GuardSetupError`` if they
        are there already)."""
        if registry in self._registries:
            raise GuardSetupError(
                f"repeat-hooks: this {_OWNER} is registered twice on one agent (hooks=[...] and plugins=[...]?): "
                "every call would be counted twice. Give it once."
            )
        self._registries.add(registry)
        for name in vars(RepeatGuardHooks):
            if name.startswith("_on_"):  # each for the event its annotation names
                registry.add_callback(None, getattr(self, name))

    def init_agent(self, agent: Agent) -> None:
        """Fires when an agent is built with ``plugins=[guard]``: registers the callbacks (``register_hooks``)."""
        self.register_hooks(agent.hooks)

    def _on_agent_initialized(self, event: hooks.AgentInitializedEvent) -> None:
        """Fires once the agent is built: remembers it (for the tool-name check); ``GuardSetupError`` if another
        guard on it has the same ``state_key``."""
        agent = event.agent
        for callback in agent.hooks.get_callbacks_for(event):
            other = getattr(callback, "__self__", None)
            if isinstance(other, RepeatGuardHooks) and other is not self and other.state_key == self.state_key:
                raise GuardSetupError(
                    f"repeat-hooks: two {_OWNER} share the agent.state key {self.state_key!r} on agent "
                    f"{agent.name!r}: every call would be counted twice. Give the agent one guard (or give each "
                    "its own state_key)."
                )
        self._agents.add(agent)

    def _on_multiagent_initialized(self, event: hooks.MultiAgentInitializedEvent) -> None:
        """Fires when a ``Swarm`` or ``Graph`` given ``hooks=[guard]`` is built: guards each of its agents (nested
        ones included) that this guard does not guard yet."""
        pending: list[Any] = [event.source]
        while pending:
            nodes = getattr(pending.pop(), "nodes", None)
            for node in nodes.values() if isinstance(nodes, dict) else ():
                executor: Any = getattr(node, "executor", None)
                registry = getattr(executor, "hooks", None)
                if isinstance(getattr(executor, "nodes", None), dict):
                    pending.append(executor)
                elif isinstance(registry, hooks.HookRegistry) and registry not in self._registries:
                    self.register_hooks(registry)
                    self._on_agent_initialized(hooks.AgentInitializedEvent(agent=executor))

    @_scoped
    def _on_before_invocation(self, event: hooks.BeforeInvocationEvent) -> None:
        """Fires when an invocation starts: starts (or, with the current turn's id or no new input, continues) the
        turn, and names it in the request's ``invocation_state`` (``TURN_KEY``), so that a graph running the agent
        again in the same request (its nodes share that dict) goes on with the same turn. With ``store=``, raises
        ``GuardSetupError`` if nothing names the conversation."""
        agent, run = event.agent, self._run(event.agent)
        run.reset()
        if self.core.store is not None:
            run.key = conversation_key(self.core, agent, self.state_key)
            if run.key is None:
                raise GuardSetupError(
                    f"repeat-hooks: {_OWNER}(store=...) keeps each conversation under its id, and agent "
                    f"{agent.name!r} has none: give it a session manager (Agent(session_manager="
                    "FileSessionManager(session_id=...))) or run it in repeat_hooks.kit.request(conversation_id=...)"
                )
        given = self.core.turn_id((event.invocation_state or {}).get(TURN_KEY))
        fresh, turn = given is not None or bool(event.messages), given or uuid.uuid4().hex
        if given is None and isinstance(event.invocation_state, dict):
            event.invocation_state[TURN_KEY] = turn  # the request's turn, for the graph's next run of an agent

        def start(state: GuardState) -> None:
            if fresh or not state.turn.number:  # else no new input: the current turn goes on
                self.policy.start_turn(state, turn_id=turn)

        self.core.update_now(run.where, start, outage=None)

    @_scoped
    def _on_before_model_call(self, event: hooks.BeforeModelCallEvent) -> None:
        """Fires before each model call: a stop sets ``event.cancel`` to its message, or raises ``RepeatGuardStopped``
        (``on_stop="raise"``). At the first, ``GuardSetupError`` for a tool the policy names that no agent has."""
        run = self._run(event.agent)
        if not run.tools_checked:
            self.core.check_tool_names({name for agent in (event.agent, *self._agents) for name in agent.tool_names})
            run.tools_checked = True
        if run.ahead:
            run.ahead = False  # AfterToolsEvent decided this call already
        else:
            stop = self.core.update_now(run.where, self.policy.decide_model_call, outage=self.core.ended)
            if stop is not None:
                stopped = self.core.stopped(stop, RepeatGuardStopped, mark_stop(event.invocation_state, stop))
                if stopped is not None:
                    raise stopped
                event.cancel, run.cancelled = stop.message, True
                return
        if self.core.records_model_calls:
            run.watch.start()

    @_scoped
    def _on_after_model_call(self, event: hooks.AfterModelCallEvent) -> None:
        """Fires after each model call: counts it, with its seconds and cost, and its text when it uses no tool (for
        ``max_same_answers``), when a rule needs them. Returns nothing."""
        run = self._run(event.agent)
        if run.cancelled:
            run.cancelled = False
            return
        response = event.stop_response
        if response is None or not self.core.records_model_calls:
            return
        seconds, metadata = run.watch.seconds(), response.message.get("metadata")
        cost = self.core.cost_of((metadata.get("usage") if isinstance(metadata, dict) else None) or {})
        answer = calls.answer_of(response.message)

        def record(state: GuardState) -> None:
            self.policy.record_model_call(state, seconds=seconds, cost_usd=cost, answer=answer)

        self.core.update_now(run.where, record, outage=None)

    @_scoped
    def _on_before_tools(self, event: hooks.BeforeToolsEvent) -> None:
        """Fires once per model response with tool uses, before any runs: decides them as one batch, committed
        before they run (the store; else the session manager saves the agent; else written when the batch ends)."""
        uses = [block["toolUse"] for block in event.message["content"] if "toolUse" in block]
        if event.cancel or not uses:
            return  # another hook cancelled the whole batch (nothing runs), or no tool use
        agent, run = event.agent, self._run(event.agent)
        calls = [tool_call(use, _lookup(agent, str(use.get("name", "")))) for use in uses]
        manager = session_manager(agent) if self.core.store is None else None
        run.in_batch, run.slot.staging = True, manager is None
        decisions = self.core.update_now(
            run.where, lambda state: self.policy.decide_tool_calls(state, calls), outage=[self.core.refused] * len(uses)
        )
        run.batch.decided(calls, decisions, given=uses)
        if manager is not None:
            run.slot.staging = True
            manager.sync_agent(agent)  # Strands saves the agent when a message is added: after the batch

    @_scoped
    def _on_before_tool_call(self, event: hooks.BeforeToolCallEvent) -> None:
        """Fires before each tool call: hands back its batch decision; a refusal sets ``event.cancel_tool`` to its
        text, which the model reads as the call's result. A direct call (``agent.tool.x(...)``) is left alone."""
        run, use = self._run(event.agent), event.tool_use
        entry = run.batch.claim(str(use.get("name", "")), use.get("toolUseId"), use.get("input"), given=use)
        if entry is None and run.in_batch:
            call = tool_call(use, event.selected_tool)
            refusal = self.core.update_now(
                run.where, lambda state: self.policy.decide_tool_call(state, call), outage=self.core.refused
            )
            entry = run.batch.add(call, refusal, given=use)
        if entry is not None and entry.refusal is not None:
            event.cancel_tool = entry.refusal.message

    @_scoped
    def _on_after_tool_call(self, event: hooks.AfterToolCallEvent) -> None:
        """Fires after each tool call: records whether it succeeded and what the model reads of it; a call another
        hook cancelled counts as rejected. Skips calls the guard refused and discarded attempts (``retry``). With
        ``warn=True``, a note the guard has for the model goes after the result, as a text block of its own."""
        if event.retry or not self.core.records_outcomes:
            return
        run, use = self._run(event.agent), event.tool_use
        entry = run.batch.settle(str(use.get("name", "")), use.get("toolUseId"), use.get("input"), given=use)
        if entry is None or entry.refusal is not None:
            return
        call = entry.call
        if event.cancel_message is not None:
            self.core.update_now(run.where, lambda state: self.policy.record_rejection(state, call), outage=None)
            return
        view = model_view(event.result)
        ok = self.core.ok(succeeded(event.result), view)

        def record(state: GuardState) -> str | None:
            self.policy.record_tool_result(state, call, ok=ok, result=view)
            return self.policy.warning(state, call)

        note = self.core.update_now(run.where, record, outage=None)
        if note is not None:
            event.result = calls.noted(event.result, note)

    @_scoped
    def _on_after_tools(self, event: hooks.AfterToolsEvent) -> None:
        """Fires after a response's tool calls: unless the turn ends or an interrupt pauses the batch, decides the
        next model call; a stop sets ``event.end_turn`` to its message (``"raise"``: the model call's hook does)."""
        run = self._run(event.agent)
        answered = {block["toolResult"].get("toolUseId") for block in event.message["content"] if "toolResult" in block}
        interrupted = any(entry.model_id not in answered for entry in run.batch.calls)
        run.batch.clear()
        run.in_batch = run.slot.staging = False
        if event.end_turn or interrupted or self.core.on_stop == "raise":
            if run.slot.pending is not None:  # written now (an interrupt's resume finds its calls by their ids)
                self.core.update_now(run.slot, lambda state: None, outage=None)
            return
        stop = self.core.update_now(run.where, self.policy.decide_model_call, outage=self.core.ended)
        if stop is None:
            run.ahead = True
        else:
            event.end_turn = stop.message
            mark_stop(event.invocation_state, stop)

    def _run(self, agent: Any) -> _Run:
        run = self._runs.get(agent)
        if run is None:
            slot = AgentSlot(agent, self.state_key, self._states)
            run = self._runs[agent] = _Run(slot, kit.Stopwatch(self.core.clock))
        return run


@dataclass(slots=True)
class _Run:
    """A guard's in-process part for one agent: where its state is, the response's calls, the model call in flight."""

    slot: AgentSlot
    watch: kit.Stopwatch
    key: str | None = None
    batch: kit.Batch = field(default_factory=kit.Batch)
    tools_checked: bool = False
    ahead: bool = False  # AfterToolsEvent decided the next model call already
    cancelled: bool = False  # BeforeModelCallEvent cancelled the model call: its AfterModelCallEvent is none
    in_batch: bool = False  # between BeforeToolsEvent and AfterToolsEvent

    @property
    def where(self) -> str | AgentSlot:
        """Where ``GuardCore.update_now`` finds the state: the store key, else ``agent.state``."""
        return self.slot if self.key is None else self.key

    def reset(self) -> None:
        """A new invocation: nothing of the previous one's responses is pending."""
        self.batch.clear()
        self.ahead = self.cancelled = self.in_batch = self.slot.staging = False
        self.slot.pending = None


def _lookup(agent: Any, name: str) -> AgentTool | None:
    """The tool ``name`` runs, as Strands' executor finds it (dynamic tools first)."""
    registry = agent.tool_registry
    tool: AgentTool | None = registry.dynamic_tools.get(name)
    return tool if tool is not None else registry.registry.get(name)
