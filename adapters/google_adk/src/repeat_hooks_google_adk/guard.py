"""``RepeatGuardPlugin``: the guard as an ADK Runner plugin, one for every session and invocation of its runner (the
ADK facts behind each callback: the README, "How it maps to Google ADK")."""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.context import Context
from google.adk.agents.llm_agent import LlmAgent
from google.adk.agents.loop_agent import LoopAgent
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from opentelemetry import context as otel

from repeat_hooks import GuardSetupError, GuardState, Policy, StateCorrupt, Stop, observe
from repeat_hooks.kit import Batch, GuardCore, GuardStopped, ParsedStates, Stopwatch, common, monotonic
from repeat_hooks.result import error_text

from .calls import FEEDS, NOTE_KEY, Refused, answer_of, failed, function_response, model_view, tool_call
from .state import SCOPE_SEPARATOR, STATE_KEY, STOP_METADATA, SessionSlot, conversation_key, stop_metadata

if TYPE_CHECKING:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.sessions.session import Session
    from google.adk.tools.tool_context import ToolContext
    from opentelemetry.context import Context as Traced

    from repeat_hooks.kit import Clock, CostOf, Fail, FailureCheck, OnStop
    from repeat_hooks.stores import StateStore

_OWNER = "RepeatGuardPlugin"
_BOUND = 4096  # entries kept in process per kind (agents' model calls, loop iterations, stops delivered...)
_T = TypeVar("_T")
_Callback = TypeVar("_Callback", bound=Callable[..., Awaitable[Any]])


class RepeatGuardStopped(GuardStopped):
    """The guard ended an invocation with ``on_stop="raise"``; ADK re-raises it as a ``RuntimeError`` naming the
    plugin (catch that: ``stop_of(error)`` is the stop)."""


@dataclass(frozen=True)
class Scope:
    """Where a call is counted: the key of its counts (in the session state, or the store) and its turn id."""

    key: str
    turn_id: str


@dataclass(eq=False)
class _Agent:
    """One agent in one branch of an invocation: its model call let through (timed) on the way to its response's
    event, its tools in a live session (later responses have no callback), its response's decided calls."""

    watch: Stopwatch
    batch: Batch = field(default_factory=Batch)
    offered: tuple[dict[str, BaseTool], Scope, Traced | None] | None = None
    live_tools: dict[str, BaseTool] | None = None


def _in_scope(callback: _Callback) -> _Callback:
    """Runs a callback in ``core.scope(session, agent)`` for the observers (the event's author, else the agent)."""

    @functools.wraps(callback)
    async def scoped(self: RepeatGuardPlugin, **kwargs: Any) -> Any:
        if not observe.OBSERVERS:
            return await callback(self, **kwargs)
        context = kwargs.get("invocation_context") or kwargs.get("callback_context") or kwargs.get("tool_context")
        invocation = getattr(context, "_invocation_context", context)
        event = kwargs.get("event")
        agent = event.author if isinstance(event, Event) else getattr(getattr(invocation, "agent", None), "name", None)
        session = getattr(getattr(invocation, "session", None), "id", None)
        with self.core.scope(self.core.conversation_id(session), agent):
            return await callback(self, **kwargs)

    return scoped  # type: ignore[return-value]


class RepeatGuardPlugin(BasePlugin):
    """The loop guard for an ADK ``Runner``: ``App(..., plugins=[RepeatGuardPlugin()])``.

    The common keywords (``repeat_hooks.kit``); ``store`` keeps each session's state under ``<app>/<user>/<session
    id>`` (``None``: in the session state); ``cost`` reads ``usage_metadata``; ``is_failure`` the function response
    dict. ADK's own: ``state_key``, the session-state key (with a ``:``, which a ``state_schema`` leaves alone; no
    ``temp:``, which ADK does not persist); ``name``, ADK's key for the plugin (``adk web --extra_plugins`` passes
    only that). Misuse fails at construction, at an invocation's start or at its first model call."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        store: StateStore | None = None,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        is_failure: FailureCheck | None = None,
        check_tools: bool = True,
        on_stop: OnStop = "reply",
        fail: Fail = "open",
        state_key: str = STATE_KEY,
        name: str = "repeat_hooks",
        **settings: Any,
    ) -> None:
        super().__init__(name=name)
        self.core = GuardCore(
            policy, settings, owner=_OWNER, keywords=("state_key", "name"), feeds=FEEDS, **common(locals())
        )
        self.policy: Policy = self.core.policy
        if ":" not in state_key or state_key.startswith("temp:") or SCOPE_SEPARATOR in state_key or "#" in state_key:
            raise GuardSetupError(
                f"repeat-hooks: state_key={state_key!r} must hold a ':' (ADK validates plain keys against an agent's "
                "state_schema), must not start with 'temp:' (ADK does not persist those) and must hold no '@' or "
                "'#' (the guard's scope and event keys add them); e.g. 'repeat_hooks:guard'"
            )
        self.state_key = state_key
        self._names_tools = any(getattr(self.policy, name) for name in ("limits", "exempt", "read_only", "destructive"))
        self._enclosing: ContextVar[tuple[str, str] | None] = ContextVar(f"repeat_hooks_{id(self)}", default=None)
        """The root key and turn of the tool call running in this task: an agent used as a tool runs a nested Runner
        there (a session and an invocation of its own), in the caller's turn."""
        self._agents: OrderedDict[tuple[str, str, str], _Agent] = OrderedDict()
        self._iterations: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._delivered: OrderedDict[str, Stop] = OrderedDict()
        self._live: OrderedDict[str, int] = OrderedDict()
        self._trees: set[int] = set()
        self._states = ParsedStates()

    # -- where the counts live ------------------------------------------------------------------------------

    def turn_of(self, invocation_id: str) -> str:
        """The turn of an invocation's callbacks: the caller's ``kit.request(turn_id=...)``, else the invocation id
        (live: ``<id>#<n>``, its ``n``-th user message); in an agent used as a tool, its caller's turn."""
        enclosing = self._enclosing.get()
        if enclosing is not None:
            return enclosing[1]
        number = self._live.get(invocation_id)
        turn = self.core.turn_id(invocation_id) or invocation_id
        return turn if number is None else f"{turn}#{number}"

    def scope_of(self, context: InvocationContext) -> Scope:
        """Where the agent running in ``context`` counts its calls: the invocation's own state, or the scope of its
        branch and the loops around it, each loop's iteration in the turn id (``<turn>@par.a/loop#3``)."""
        return self._scope(context, self._root(context))

    def _scope(self, context: InvocationContext, root: Scope) -> Scope:
        """``scope_of(context)``, given the invocation's ``root`` scope (``_root(context)``)."""
        parent = getattr(context.agent, "parent_agent", None)  # none: no loop around it (no _loops walk)
        names = [] if parent is None else _loops(context.agent)
        loops = [(name, self._iterations.get((context.invocation_id, name), 1)) for name in names]
        if not context.branch and not loops:
            return root
        name = (context.branch or "") + "".join(f"/{loop}" for loop, _ in loops)
        path = (context.branch or "") + "".join(f"/{loop}#{iteration}" for loop, iteration in loops)
        return Scope(f"{root.key}{SCOPE_SEPARATOR}{name}", f"{root.turn_id}{SCOPE_SEPARATOR}{path}")

    def _root(self, context: InvocationContext) -> Scope:
        """The invocation's own state: its budgets, its stop, the calls on no branch and in no loop."""
        enclosing = self._enclosing.get()
        if enclosing is not None:  # an agent used as a tool: its caller's key and turn
            return Scope(enclosing[0], enclosing[1])
        core = self.core
        key = self.state_key if core.store is None else conversation_key(context.session, core.conversation_id)
        return Scope(key, self.turn_of(context.invocation_id))

    async def _update(
        self, key: str, session: Session, target: Context | Event, change: Callable[[GuardState], _T], outage: _T
    ) -> _T:
        """One policy verb on the state under ``key``, committed: in the store, or in the session through ``target``
        (the callback's context, or the event on its way to the session)."""
        core = self.core
        if core.store is None:  # the same update as core.update's, without a coroutine of its own
            return core.update_now(SessionSlot(self._states, session, key, target), change, outage=outage)
        return await core.update(key, change, outage=outage)

    def _agent(self, invocation_id: str, agent: str, branch: str | None) -> _Agent:
        key = (invocation_id, agent, branch or "")
        return self._agents.get(key) or _put(self._agents, key, _Agent(Stopwatch(self.core.clock)))

    # -- invocations and agents ------------------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        """Fires when an invocation starts or resumes: raises ``GuardSetupError`` for a second guard on the state key
        or ``RunConfig.max_llm_calls`` below ``max_model_calls``. Returns ``None``."""
        plugins = invocation_context.plugin_manager.plugins
        guards = [p for p in plugins if isinstance(p, RepeatGuardPlugin) and p.state_key == self.state_key]
        if len(guards) > 1:
            raise GuardSetupError(
                f"repeat-hooks: {len(guards)} RepeatGuardPlugins share the session-state key {self.state_key!r} "
                f"({', '.join(repr(p.name) for p in guards)}): every call would be counted twice. Register one "
                "RepeatGuardPlugin, on the Runner or on the App, not both."
            )
        config, limit = invocation_context.run_config, self.policy.max_model_calls
        max_llm_calls = config.max_llm_calls if config is not None else 0
        if limit is not None and 0 < max_llm_calls < limit:
            raise GuardSetupError(
                f"repeat-hooks: Policy(max_model_calls={limit}) can never trip: RunConfig(max_llm_calls="
                f"{max_llm_calls}) raises LlmCallsLimitExceededError first. Lower max_model_calls to "
                f"{max_llm_calls} or less, or raise max_llm_calls."
            )
        return None

    async def before_agent_callback(self, *, agent: BaseAgent, callback_context: CallbackContext) -> None:
        """Fires before each agent runs: counts loop iterations; once the invocation has stopped, ends the agent (in
        a loop with an event that escalates). Returns ``None``."""
        context = callback_context._invocation_context
        parent = agent.parent_agent
        if isinstance(parent, LoopAgent) and parent.sub_agents and parent.sub_agents[0] is agent:
            key = (context.invocation_id, parent.name)
            _put(self._iterations, key, self._iterations.get(key, 0) + 1)
        if not self._stopped(context):
            return None
        context.end_invocation = True
        if _loops(agent):  # ADK emits the callback's event only with a state delta: rewrite one
            callback_context.actions.escalate = True
            callback_context.state[self.state_key] = callback_context.state.get(self.state_key)
        return None

    def _stopped(self, context: InvocationContext) -> bool:
        """Whether the invocation has stopped: here, or as its session state says (a store's: its next model call)."""
        if self._live_key(context.invocation_id) in self._delivered:
            return True
        if self.core.store is not None:
            return False
        try:
            turn = SessionSlot(self._states, context.session, self.state_key).read(peek=True).turn
        except StateCorrupt:
            return False  # the next update says so, and fail= decides
        return turn.stop is not None and turn.id == self.turn_of(context.invocation_id)

    def _live_key(self, invocation_id: str) -> str:
        number = self._live.get(invocation_id)
        return invocation_id if number is None else f"{invocation_id}#{number}"

    async def _check_tool_names(self, context: CallbackContext) -> None:
        """Once per agent tree: every tool the policy names is one of the tree's tools (toolsets listed)."""
        if not self.core.check_tools or not self._names_tools or self._enclosing.get() is not None:
            return  # nothing named, or a nested run (its caller's tree, which holds it, was checked)
        agent = context._invocation_context.agent
        if not isinstance(agent, BaseAgent) or id(agent.root_agent) in self._trees:
            return  # checked, or an ADK 2.x workflow node: no agent tree to list
        self.core.check_tool_names(await _tool_names(agent.root_agent, context))
        if len(self._trees) < _BOUND:
            self._trees.add(id(agent.root_agent))

    # -- model calls -----------------------------------------------------------------------------------------

    @_in_scope
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Fires before each model call: returns ``None``, or the stop's final text-only response (the model is not
        called); raises ``GuardSetupError`` for a tool name the tree lacks, ``RepeatGuardStopped`` to raise a stop."""
        await self._check_tool_names(callback_context)
        context = callback_context._invocation_context
        invocation_id, session, live = context.invocation_id, context.session, context.live_request_queue is not None
        if live:  # run_live screens each user message here: a new turn
            _put(self._live, invocation_id, self._live.get(invocation_id, 0) + 1)
        stop: Stop | None = None
        root = self._root(context)
        own = self._scope(context, root)
        for scope in (root,) if own == root else (root, own):
            change = partial(self.policy.decide_model_call, turn_id=scope.turn_id)
            stop = stop or await self._update(scope.key, session, callback_context, change, self.core.ended)
        if stop is not None:
            return self._end(callback_context, stop)
        agent = self._agent(invocation_id, callback_context.agent_name, context.branch)
        agent.offered = (llm_request.tools_dict, scope, otel.get_current() if observe.OBSERVERS else None)
        agent.live_tools = llm_request.tools_dict if live else None
        agent.watch.start()
        return None

    def _end(self, context: CallbackContext, stop: Stop) -> LlmResponse:
        """The stop's final event, escalating and ending the invocation (live: answering this user message); the
        invocation's later model calls (other branches): an empty response, no event, that ends the agent."""
        invocation_id = context.invocation_id
        if invocation_id not in self._live:
            context._invocation_context.end_invocation = True
            if invocation_id in self._delivered:
                return LlmResponse()
            context.actions.escalate = True
        _put(self._delivered, self._live_key(invocation_id), stop)
        error = self.core.stopped(stop, RepeatGuardStopped)
        if error is not None:
            raise error
        return stop_response(stop)

    @_in_scope
    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Fires after each model response (partial chunks skipped): records the call, its seconds and its cost, for
        the policy's budgets, and its text when it calls no function, for ``max_same_answers``. Returns ``None``."""
        if llm_response.partial or not self.core.records_model_calls:
            return None
        context, usage = callback_context._invocation_context, llm_response.usage_metadata
        watch = self._agent(context.invocation_id, callback_context.agent_name, context.branch).watch
        root, cost = self._root(context), self.core.cost_of(usage) if usage is not None else 0.0
        record = partial(
            self.policy.record_model_call,
            seconds=watch.seconds(),
            cost_usd=cost,
            answer=answer_of(llm_response),
            turn_id=root.turn_id,
        )
        await self._update(root.key, callback_context.session, callback_context, record, None)
        return None

    # -- events ----------------------------------------------------------------------------------------------

    @_in_scope
    async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> Event | None:
        """Fires for each event before the session service appends it: decides a model response's calls; drops the
        stop text from an ``output_key``; makes the guard's state in a delta the latest. Returns ``None``."""
        content = event.content
        if not event.partial and content is not None and content.role == "model":
            agent = self._agent(invocation_context.invocation_id, event.author, event.branch)
            offered, agent.offered = agent.offered, None
            if offered is not None:  # the response to a model call this plugin let through
                token = otel.attach(offered[2]) if offered[2] is not None else None  # the model call's span
                try:
                    await self._respond(invocation_context, event, offered[0], offered[1])
                finally:
                    if token is not None:
                        otel.detach(token)
                return None
            if agent.live_tools is not None and event.get_function_calls():  # a live session's later response
                for scope in dict.fromkeys((self._root(invocation_context), self.scope_of(invocation_context))):
                    change = partial(self.policy.decide_model_call, turn_id=scope.turn_id)
                    await self._update(scope.key, invocation_context.session, event, change, None)
                await self._respond(invocation_context, event, agent.live_tools, scope)
                return None
        delta = event.actions.state_delta
        if STOP_METADATA in (event.custom_metadata or {}) and content is not None:
            text = "".join(part.text or "" for part in content.parts or [])
            for key in [key for key, value in delta.items() if value == text]:
                del delta[key]  # an output_key: the stop message is no agent's output
            if not isinstance(invocation_context.agent, BaseAgent):
                invocation_context.abort()  # an ADK 2.x Workflow loops on whatever its nodes answer
        state = invocation_context.session.state
        for key in delta:
            if key.startswith(self.state_key) and state.get(key) is not None:
                delta[key] = state[key]
        return None

    async def _respond(
        self, context: InvocationContext, event: Event, tools: dict[str, BaseTool], scope: Scope
    ) -> None:
        """A model response's calls, decided as one batch and committed before any of them runs."""
        given = event.get_function_calls()
        calls = [tool_call(tools.get(str(call.name)), call.args, call.id, name=call.name) for call in given]
        if calls:
            decide = partial(self.policy.decide_tool_calls, calls=calls, turn_id=scope.turn_id)
            decisions = await self._update(scope.key, context.session, event, decide, [self.core.refused] * len(calls))
            batch = self._agent(context.invocation_id, event.author, event.branch).batch
            batch.decided(calls, decisions, tags=[scope] * len(calls))

    # -- tool calls ------------------------------------------------------------------------------------------

    @_in_scope
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Fires before each tool call: returns ``None`` to let it run, or ``Refused({"error": <refusal text>})``,
        which ADK hands the model instead (a call of no batch, replayed on a resume, is decided here)."""
        context = tool_context._invocation_context
        batch = self._agent(context.invocation_id, tool_context.agent_name, context.branch).batch
        call_id = tool_context.function_call_id
        entry = batch.claim(tool.name, call_id, tool_args, given=tool_context)
        confirmation = tool_context.tool_confirmation
        root = self._root(context)
        scope, call = self._scope(context, root), tool_call(tool, tool_args, call_id)
        if (
            entry is None and confirmation is not None
        ):  # the human's answer: approved, the call runs as its batch counted it
            entry = batch.add(call, None, given=tool_context, tag=scope)
            if not confirmation.confirmed:  # rejected: it counts as a rejected call
                entry.settled = True
                change = partial(self.policy.record_rejection, call=call, turn_id=scope.turn_id)
                await self._update(scope.key, context.session, tool_context, change, None)
        else:
            decide = partial(self.policy.decide_tool_call, call=call, turn_id=scope.turn_id)
            refusal = await self._update(scope.key, context.session, tool_context, decide, self.core.refused)
            entry = batch.add(call, refusal, given=tool_context, tag=scope)
        if entry.refusal is not None:
            return Refused(entry.refusal)
        self._enclosing.set((root.key, root.turn_id))  # this call's task only (root: _root(context), turn_of's turn)
        return None

    @_in_scope
    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Fires after each tool call (refused ones too): records the outcome with what the model reads of the
        result; a call that asked for confirmation did not run. Returns ``None``, or with ``warn=True`` the result
        with the guard's note for the model under ``NOTE_KEY``."""
        if tool_context.function_call_id in tool_context.actions.requested_tool_confirmations:
            await self._record(tool, tool_args, tool_context, None, None)  # asking is not running: settled only
        elif self.core.records_outcomes:
            view = model_view(result, tool)
            ok = self.core.ok(not failed(result, tool), view)
            note = await self._record(tool, tool_args, tool_context, ok, view)
            if note is not None:
                return {**function_response(result), NOTE_KEY: note}
        return None

    @_in_scope
    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        """Fires when a tool raises (or its name is unknown): records a failure, with the error's type and text.
        Returns ``None``: ADK goes on as without the guard (a cancelled call is not recorded)."""
        if not isinstance(error, asyncio.CancelledError):
            await self._record(tool, tool_args, tool_context, False, error_text(error))
        return None

    async def _record(
        self, tool: BaseTool, args: Any, tool_context: ToolContext, ok: bool | None, result: Any
    ) -> str | None:
        """The outcome of a call this plugin let through (``ok=None``: none, the call is only settled), once: not a
        refused call, not one another plugin answered first, not twice when ADK runs the after callbacks on an
        error an error callback answered. Returns the guard's note for the model (``Policy.warning``), if any."""
        context = tool_context._invocation_context
        batch = self._agent(context.invocation_id, tool_context.agent_name, context.branch).batch
        entry = batch.settle(tool.name, tool_context.function_call_id, args, given=tool_context)
        if entry is None or entry.refusal is not None or ok is None or not self.core.records_outcomes:
            return None
        scope: Scope = entry.tag
        call = entry.call

        def change(state: GuardState) -> str | None:
            self.policy.record_tool_result(state, call, ok=ok, result=result, turn_id=scope.turn_id)
            return self.policy.warning(state, call)

        return await self._update(scope.key, context.session, tool_context, change, None)


def stop_response(stop: Stop) -> LlmResponse:
    """The response that ends a turn: the stop message as the model's text, the whole ``Stop`` in its metadata."""
    text = types.Content(role="model", parts=[types.Part(text=stop.message)])
    return LlmResponse(content=text, custom_metadata=stop_metadata(stop))


def _put(entries: OrderedDict[Any, _T], key: Any, value: _T) -> _T:
    """``entries[key] = value``, the newest; past ``_BOUND`` entries the oldest goes."""
    entries[key] = value
    entries.move_to_end(key)
    if len(entries) > _BOUND:
        entries.popitem(last=False)
    return value


async def _tool_names(agent: BaseAgent, context: ReadonlyContext, seen: set[int] | None = None) -> set[str]:
    """Every tool name in the agent tree under ``agent``, as its models call them (toolsets listed, agents used as
    tools included); ``transfer_to_agent`` where agents have sub-agents."""
    seen = seen if seen is not None else set()
    if id(agent) in seen:
        return set()
    seen.add(id(agent))
    tools = await agent.canonical_tools(context) if isinstance(agent, LlmAgent) else []
    names = {tool.name for tool in tools} | ({"transfer_to_agent"} if agent.sub_agents else set())
    for child in [*agent.sub_agents, *(tool.agent for tool in tools if isinstance(tool, AgentTool))]:
        names |= await _tool_names(child, context, seen)
    return names


def _loops(agent: object) -> list[str]:
    """The ``LoopAgent``s enclosing ``agent``, outermost first (each runs its sub-agents again until one escalates)."""
    parent, loops = getattr(agent, "parent_agent", None), list[str]()
    while parent is not None:
        if isinstance(parent, LoopAgent):
            loops.insert(0, parent.name)
        parent = parent.parent_agent
    return loops
