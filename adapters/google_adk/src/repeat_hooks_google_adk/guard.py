"""``RepeatGuardPlugin``: the guard as an ADK Runner plugin.

One plugin instance serves every session and invocation of its runner, concurrently. It holds no
counters: each callback reads the session's ``GuardState``s (see ``state``), applies one verb of the
``Policy`` and writes the state back through ADK's state delta.

**Turn and scopes.** A turn is one invocation (its id is the turn id): its budgets (model calls,
seconds, cost) and its stop are per invocation, and a stop ends the invocation for the whole agent
tree. Calls are counted per *scope*, so that a refusal's "you already called" is true for the model
that reads it (``scope_of``): the agents of one branch of the tree share one count (``transfer_to_agent``
keeps it: the agent transferred to sees the conversation, the calls included); each ``ParallelAgent``
branch counts apart (a branch does not see its siblings' calls), and each ``LoopAgent`` iteration starts
its counts afresh (each iteration is the app's deliberate re-run of its agents; the loop is bounded by
its ``max_iterations``, its exit condition, ``max_llm_calls`` and the guard's budgets). Refusals and
errors in a row are counted per scope too (they say how one model behaves). An agent used as a tool
(``AgentTool``) runs a nested Runner with an invocation of its own inside the call: it counts in the
caller's turn. The only things kept in the process are per model response and per call in flight, the
loop iterations of the invocations running here, the invocations whose stop was delivered, and a cache
of the states last written, by identity (``state.ParsedStates``).

Which callback does what:

- ``before_agent_callback``: counts a ``LoopAgent``'s iterations; once the invocation has stopped, ends
  every agent that starts (``end_invocation``), so later agents of a ``SequentialAgent`` do not run.
- ``before_model_callback``: a stop ends the invocation with a text-only ``LlmResponse`` (the final
  event the caller sees, ``custom_metadata["repeat_hooks_stop"]`` = the reason) that escalates, so every
  enclosing ``LoopAgent`` exits and a ``ParallelAgent`` cancels its other branches; the model is not
  called. A model call of an invocation whose stop was already delivered (another branch's) ends that
  agent without an event. At the first model call, checks the tool names the policy names.
- ``after_model_callback``: counts the model call, its seconds and its cost (``usage_metadata``), when
  the policy has a budget that needs them.
- ``on_event_callback``: the model's response, on its way to the session (ADK appends it before any of
  its calls runs): decides all its function calls as one batch (``Policy.decide_tool_calls``) and
  writes the state into that event's delta (one write a response). Keeps the stop text out of an
  ``output_key``; makes an event's delta carry the latest guard state (parallel calls).
- ``before_tool_callback``: hands back the call's decision; a refusal is returned as the tool's
  response (``Refused({"error": <refusal text>})``, a ``dict`` marked for your callbacks: ``refusal_of``).
- ``after_tool_callback`` / ``on_tool_error_callback``: the outcome and the result as the model reads
  it (``calls.model_view``), for the error and progress rules. A call that only asked for confirmation
  did not run: nothing is recorded until the human answers. Approved, it runs as the call its batch
  decided and counted; rejected, it is withdrawn (``Policy.record_rejection``): it counts as a rejected
  call, so the same call rejected ``max_calls`` times is refused without asking again.
- ``before_run_callback``: checks the setup once per invocation (see ``RepeatGuardPlugin``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
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

from repeat_hooks import GuardSetupError, GuardState, Policy, Refusal, Stop, ToolCall, observe
from repeat_hooks.call import batch_call_ids
from repeat_hooks.kit import Clock, CostOf, check_budgets, check_tool_names, policy_from
from repeat_hooks.kit.clock import monotonic
from repeat_hooks.result import error_text
from repeat_hooks.stop_rules import HookPoint

from .calls import function_response, mcp_is_error, model_view, tool_call
from .state import SCOPE_SEPARATOR, STATE_KEY, STOP_METADATA, ParsedStates

if TYPE_CHECKING:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.tools.tool_context import ToolContext
    from opentelemetry.context import Context

FailureCheck = Callable[[dict[str, Any]], bool]
"""Says whether a tool's response dict reports a failure (for tools that return errors instead of raising)."""

REFLECT_AND_RETRY = "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
"""The ``response_type`` of the response ADK's ``ReflectAndRetryToolPlugin`` hands the model for a failed
call: a failure, whichever plugin runs first."""
_OWNER = "RepeatGuardPlugin"
_BOUND = 4096
"""Entries kept in process per kind (model calls timed, responses' tools, undelivered decisions, ...)."""

_enclosing_turn: ContextVar[str | None] = ContextVar("repeat_hooks_enclosing_turn", default=None)
"""The turn of the tool call running in this task: an agent used as a tool (``AgentTool``) runs a
nested Runner inside the call, with an invocation id of its own, which belongs to the caller's turn."""


class Refused(dict[str, Any]):
    """The response the guard hands back for a refused call: ``{"error": <refusal text>}``, what the model
    reads, with the ``Refusal`` attached (``refusal``) so that an ``after_tool_callback`` of yours can tell
    it from a tool's result (``refusal_of(tool_response)``)."""

    refusal: Refusal

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(error=refusal.message)
        self.refusal = refusal


def refusal_of(tool_response: Any) -> Refusal | None:
    """The guard's ``Refusal`` if ``tool_response`` (what an ``after_tool_callback`` receives) is the guard's
    answer to a refused call, else ``None`` (the tool ran, or another callback answered)."""
    return tool_response.refusal if isinstance(tool_response, Refused) else None


def _traced_context() -> Context | None:
    """The OpenTelemetry context of the model call starting now, kept for its response's decisions (``None``
    with no observer registered: nothing would read it, and OpenTelemetry is not imported)."""
    if not observe.OBSERVERS:
        return None
    from opentelemetry import context  # ADK's own dependency

    return context.get_current()


@contextlib.contextmanager
def _traced_in(context: Context | None) -> Iterator[None]:
    """Within the block, ``context`` (a model call's, from ``_traced_context``) is the current OpenTelemetry
    context. ADK hands the plugin a model response's event in the invocation's context, where the model call's
    span (``call_llm``; in ADK 2.13, which opens none by default, the agent's ``invoke_agent``, which covers its
    model calls) is not current: deciding the response's calls in the model call's context puts the observers'
    refusal events on that span. (ADK's ``generate_content`` span is current only inside the model's stream and
    ends before any plugin callback receives the response: no decision can land on it.)"""
    if context is None:
        yield
        return
    from opentelemetry.context import attach, detach

    token = attach(context)
    try:
        yield
    finally:
        detach(token)


_Callback = TypeVar("_Callback", bound=Callable[..., Awaitable[Any]])


def _in_scope(callback: _Callback) -> _Callback:
    """Runs a plugin callback in ``observe.scope(...)``: the session's id and the running agent's name (an
    event's author), which the observers read (``repeat_hooks.observe.otel``: ``gen_ai.conversation.id``,
    ``gen_ai.agent.name``). With no observer registered it runs the callback as it is."""

    @functools.wraps(callback)
    async def scoped(self: Any, **kwargs: Any) -> Any:
        if not observe.OBSERVERS:
            return await callback(self, **kwargs)
        context = kwargs.get("invocation_context") or kwargs.get("callback_context") or kwargs.get("tool_context")
        invocation = getattr(context, "_invocation_context", context)  # a CallbackContext's (a ToolContext's)
        session = getattr(invocation, "session", None)
        event = kwargs.get("event")
        agent = event.author if isinstance(event, Event) else getattr(getattr(invocation, "agent", None), "name", None)
        with observe.scope(conversation_id=getattr(session, "id", None), agent_name=agent):
            return await callback(self, **kwargs)

    return scoped  # type: ignore[return-value]


@dataclass(frozen=True)
class Scope:
    """Where one call is counted: the session-state key of its counts and its turn id there."""

    key: str
    turn_id: str
    root: bool
    """The invocation's own state (``key`` is the plugin's ``state_key``): no branch, no loop."""


class RepeatGuardPlugin(BasePlugin):
    """The loop guard for an ADK ``Runner``: ``App(..., plugins=[RepeatGuardPlugin()])``.

    ``policy`` is the settings: a ``Policy``, or the settings as keywords
    (``RepeatGuardPlugin(max_calls=2, max_refusals=3)``), or nothing for the default ``Policy()``; so
    ``adk web --extra_plugins repeat_hooks_google_adk.RepeatGuardPlugin`` (which builds it with
    ``name=`` only) guards the agent with the default. A ``StopRepeatedCalls`` is refused: the state is
    kept in each session.

    ``cost`` turns a response's ``usage_metadata`` into dollars (``cost=TokenPrices(0.3, 2.5)``), for
    ``max_cost_usd``; ``clock`` times model calls, for ``max_model_seconds``; ``is_failure`` says whether
    a tool's response dict reports a failure (tools that raise, MCP results with ``isError`` and
    ``ReflectAndRetryToolPlugin``'s answers are failures anyway). ``check_tools=False`` skips the check of
    the tool names the policy names (for tools that only appear after the first model call).
    ``state_key`` is the session-state key.

    Misuse fails loudly: at construction (``TypeError`` or ``repeat_hooks.GuardSetupError``), a policy
    argument that is not one, a limit that could never trip (``max_cost_usd`` without ``cost``,
    ``max_model_seconds`` without ``clock``), a ``state_key`` ADK would validate or drop; at the start of
    each invocation, two guard plugins on one state key, or a ``RunConfig.max_llm_calls`` lower than
    ``max_model_calls`` (ADK would raise first); at the first model call, a tool name in ``limits``,
    ``exempt``, ``read_only`` or ``destructive`` that none of the agent tree's tools has. ADK re-raises
    what a plugin raises as a ``RuntimeError`` naming the plugin, with the guard's message in it, out of
    ``run_async``.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        is_failure: FailureCheck | None = None,
        check_tools: bool = True,
        state_key: str = STATE_KEY,
        name: str = "repeat_hooks",
        **settings: Any,
    ) -> None:
        super().__init__(name=name)
        self.policy: Policy = policy_from(policy, settings, owner=_OWNER)
        """The settings; the counters live in each session's state."""
        check_budgets(self.policy, owner=_OWNER, cost=cost, clock=clock)
        if ":" not in state_key or state_key.startswith("temp:") or SCOPE_SEPARATOR in state_key or "#" in state_key:
            raise GuardSetupError(
                f"repeat-hooks: state_key={state_key!r} must hold a ':' (ADK validates plain keys against an agent's "
                "state_schema), must not start with 'temp:' (ADK does not persist those) and must hold no '@' or "
                "'#' (the guard's scope and event keys add them); e.g. 'repeat_hooks:guard'"
            )
        self.cost = cost
        self.clock = clock
        self.is_failure = is_failure
        self.check_tools = check_tools
        self.state_key = state_key
        points = self.policy.hook_points()
        self._records_outcomes = HookPoint.POST_TOOL_CALL in points
        self._records_model_calls = HookPoint.POST_LLM_CALL in points
        self._names_tools = any(
            getattr(self.policy, setting) for setting in ("limits", "exempt", "read_only", "destructive")
        )
        self._checked_trees: set[int] = set()
        self._started: dict[int, float] = {}
        self._offered: OrderedDict[tuple[str, str, str], tuple[dict[str, BaseTool], Scope, Context | None]] = (
            OrderedDict()
        )
        self._decided: OrderedDict[tuple[str, str], list[_Decided]] = OrderedDict()
        self._iterations: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._delivered: OrderedDict[str, Stop] = OrderedDict()
        self._live: OrderedDict[str, int] = OrderedDict()
        self._live_tools: OrderedDict[tuple[str, str, str], dict[str, BaseTool]] = OrderedDict()
        self._states = ParsedStates()
        self._calls: weakref.WeakKeyDictionary[ToolContext, _Call] = weakref.WeakKeyDictionary()

    # -- setup checks --------------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        """Fires once when an invocation starts (and again when one resumes): checks the setup.

        Raises ``GuardSetupError`` for a second guard plugin on the same state key (every call would be
        counted twice) and for ``RunConfig.max_llm_calls`` below ``max_model_calls``. Returns ``None``:
        the turn itself starts lazily, at the first callback that sees the new invocation id.
        """
        guards = [
            plugin
            for plugin in invocation_context.plugin_manager.plugins
            if isinstance(plugin, RepeatGuardPlugin) and plugin.state_key == self.state_key
        ]
        if len(guards) > 1:
            raise GuardSetupError(
                f"repeat-hooks: {len(guards)} RepeatGuardPlugins share the session-state key {self.state_key!r} "
                f"({', '.join(repr(p.name) for p in guards)}): every call would be counted twice. Register one "
                "RepeatGuardPlugin, on the Runner or on the App, not both."
            )
        run_config = invocation_context.run_config
        max_llm_calls = run_config.max_llm_calls if run_config is not None else 0
        limit = self.policy.max_model_calls
        if limit is not None and 0 < max_llm_calls < limit:
            raise GuardSetupError(
                f"repeat-hooks: Policy(max_model_calls={limit}) can never trip: RunConfig(max_llm_calls="
                f"{max_llm_calls}) raises LlmCallsLimitExceededError first. Lower max_model_calls to "
                f"{max_llm_calls} or less, or raise max_llm_calls."
            )
        return None

    async def _check_tool_names(self, context: CallbackContext) -> None:
        """Once per agent tree: every tool the policy names is one of the tree's tools (toolsets listed)."""
        if not self.check_tools or not self._names_tools or _enclosing_turn.get() is not None:
            return  # nothing named, or a nested run (its caller's tree, which holds it, was checked)
        agent = context._invocation_context.agent
        if not isinstance(agent, BaseAgent):
            return  # an ADK 2.x workflow node: no agent tree to list (not checked)
        root = agent.root_agent
        if id(root) in self._checked_trees:
            return
        names = await _tool_names(root, context)
        check_tool_names(self.policy, names, owner=_OWNER)
        if len(self._checked_trees) >= _BOUND:
            self._checked_trees.clear()
        self._checked_trees.add(id(root))

    # -- agents --------------------------------------------------------------------------------

    async def before_agent_callback(self, *, agent: BaseAgent, callback_context: CallbackContext) -> None:
        """Fires before each agent runs. Counts a ``LoopAgent``'s iterations (its first sub-agent starting);
        once the invocation has stopped, ends the agent before it runs (``end_invocation``), with no event
        (or, inside a ``LoopAgent``, a content-less event that escalates, so the loop exits). Returns ``None``."""
        context = callback_context._invocation_context
        invocation_id = context.invocation_id
        parent = agent.parent_agent
        if isinstance(parent, LoopAgent) and parent.sub_agents and parent.sub_agents[0] is agent:
            key = (invocation_id, parent.name)
            self._iterations[key] = self._iterations.get(key, 0) + 1
            self._iterations.move_to_end(key)
            if len(self._iterations) > _BOUND:
                self._iterations.popitem(last=False)
        if not self._stopped(callback_context):
            return None
        context.end_invocation = True
        if _in_loop(agent):
            # ADK emits a callback's event only for content or a state delta: rewrite the invocation state.
            callback_context.actions.escalate = True
            self._states.write(callback_context, self._load(callback_context, self.state_key), self.state_key)
        return None

    def _stopped(self, context: CallbackContext) -> bool:
        """Whether the invocation of ``context`` has stopped (here, or as its persisted state says)."""
        if self._live_key(context.invocation_id) in self._delivered:
            return True
        turn = self._states.peek(context.session, self.state_key).turn
        return turn.stop is not None and turn.id == self.turn_of(context.invocation_id)

    def turn_of(self, invocation_id: str) -> str:
        """The turn of a callback of invocation ``invocation_id``: that id; in a live session (``run_live``)
        ``<id>#<n>``, its ``n``-th user message; inside a nested run of an agent used as a tool, the turn
        whose tool call runs it."""
        enclosing = _enclosing_turn.get()
        if enclosing is not None:
            return enclosing
        return self._live_key(invocation_id)

    def _live_key(self, invocation_id: str) -> str:
        number = self._live.get(invocation_id)
        return invocation_id if number is None else f"{invocation_id}#{number}"

    def scope_of(self, context: InvocationContext) -> Scope:
        """Where the calls of the agent running in ``context`` are counted.

        The invocation's own state for an agent on no branch and in no loop; else a scope named by the
        agent's branch (``ParallelAgent`` branches: ``par.a``) and the ``LoopAgent``s around it, with the
        loop's current iteration in the turn id (``<invocation id>@par.a/loop#3``): a new iteration is a
        new turn there, so its counts start afresh.
        """
        turn = self.turn_of(context.invocation_id)
        branch = context.branch or ""
        loops: list[tuple[str, int]] = []
        agent = context.agent
        if isinstance(agent, BaseAgent):
            parent = agent.parent_agent
            while parent is not None:
                if isinstance(parent, LoopAgent):
                    loops.append((parent.name, self._iterations.get((context.invocation_id, parent.name), 1)))
                parent = parent.parent_agent
        if not branch and not loops:
            return Scope(self.state_key, turn, True)
        loops.reverse()
        name = branch + "".join(f"/{loop}" for loop, _ in loops)
        path = branch + "".join(f"/{loop}#{iteration}" for loop, iteration in loops)
        return Scope(f"{self.state_key}{SCOPE_SEPARATOR}{name}", f"{turn}{SCOPE_SEPARATOR}{path}", False)

    # -- model ---------------------------------------------------------------------------------

    @_in_scope
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Fires before each model call. Returns ``None`` to let it happen, or, when the invocation must
        stop, the final text-only response (the stop message), which escalates; the model is not called.
        Raises ``GuardSetupError`` at the first model call for a tool name the policy names that the agent
        tree does not have."""
        await self._check_tool_names(callback_context)
        context = callback_context._invocation_context
        if context.live_request_queue is not None:
            # run_live calls this once per user message (ADK screens each before sending it): a new turn.
            invocation_id = callback_context.invocation_id
            _bounded_put(self._live, invocation_id, self._live.get(invocation_id, 0) + 1)
        scope = self.scope_of(context)
        root = self._load(callback_context, self.state_key)
        stop = observe.apply(self.policy.decide_model_call, root, turn_id=self.turn_of(callback_context.invocation_id))
        state = root
        if stop is None and not scope.root:
            state = self._load(callback_context, scope.key)
            stop = observe.apply(self.policy.decide_model_call, state, turn_id=scope.turn_id)
            if stop is None:
                self._states.stage(callback_context, root, self.state_key)
        if stop is not None:
            self._states.write(callback_context, root, self.state_key)
            if not scope.root:
                self._states.write(callback_context, state, scope.key)
            return self._end(callback_context, stop)
        offered = (callback_context.invocation_id, callback_context.agent_name, context.branch or "")
        _bounded_put(self._offered, offered, (llm_request.tools_dict, scope, _traced_context()))
        if context.live_request_queue is not None:
            _bounded_put(self._live_tools, offered, llm_request.tools_dict)
        # on_event_callback writes it into the response's event (on_model_error_callback, on an error).
        self._states.stage(callback_context, state, scope.key)
        if self._records_model_calls and self.clock is not None:
            if len(self._started) >= _BOUND:
                del self._started[next(iter(self._started))]
            self._started[id(callback_context.actions)] = self.clock()
        return None

    def _end(self, context: CallbackContext, stop: Stop) -> LlmResponse:
        """End the invocation: the stop's final event the first time, escalating (loops exit, a parallel
        agent cancels its other branches); later, an empty response (no event) that ends the agent."""
        invocation_id = context.invocation_id
        if invocation_id in self._live:
            # A live session: the stop answers this user message (ending the invocation would end the session).
            _bounded_put(self._delivered, self._live_key(invocation_id), stop)
            return stop_response(stop)
        context._invocation_context.end_invocation = True
        if invocation_id in self._delivered:
            return LlmResponse()
        _bounded_put(self._delivered, invocation_id, stop)
        context.actions.escalate = True
        return stop_response(stop)

    @_in_scope
    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Fires after each model response; a streamed call's partial chunks are skipped, its final
        response counts once. Records the call with its seconds and its cost in the invocation's state,
        when the policy has a budget that needs them. Returns ``None``."""
        if llm_response.partial or not self._records_model_calls:
            return None
        seconds = 0.0
        if self.clock is not None:
            started = self._started.pop(id(callback_context.actions), None)
            if started is not None:
                seconds = max(self.clock() - started, 0.0)
        cost = 0.0
        if self.cost is not None and llm_response.usage_metadata is not None:
            cost = self.cost(llm_response.usage_metadata)
        state = self._load(callback_context, self.state_key)
        observe.apply(
            self.policy.record_model_call,
            state,
            seconds=seconds,
            cost_usd=cost,
            turn_id=self.turn_of(callback_context.invocation_id),
        )
        self._states.stage(callback_context, state, self.state_key)  # on_event_callback writes it
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """Fires when a model call raises: forgets its start time and writes the state. Returns ``None``
        (ADK raises the error, unless another plugin or callback answers it)."""
        self._started.pop(id(callback_context.actions), None)
        scope = self.scope_of(callback_context._invocation_context)
        self._states.write(callback_context, self._load(callback_context, self.state_key), self.state_key)
        if not scope.root:
            self._states.write(callback_context, self._load(callback_context, scope.key), scope.key)
        return None

    # -- events --------------------------------------------------------------------------------

    @_in_scope
    async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> Event | None:
        """Fires for each event before the session service appends it (ADK holds the agent until then).

        For the model's response, decides all its function calls as one batch before any of them runs
        and writes the state (the model call counted, and the calls) into the event's delta; each
        call's ``before_tool_callback`` then hands back its decision. For the guard's stop event, drops
        the stop text from an ``output_key`` (no later agent reads it as the agent's output). For an
        event carrying the guard's state, makes it the latest one: ADK merges the deltas of parallel
        calls key by key, which could persist a mix of two calls' writes. Returns ``None`` (the event,
        changed in place)."""
        content = event.content
        if not event.partial and content is not None and content.role == "model":
            offered = self._offered.pop((invocation_context.invocation_id, event.author, event.branch or ""), None)
            if offered is not None:  # the response to a model call this plugin let through
                offered_tools, scope, traced = offered
                with _traced_in(traced):
                    self._respond(invocation_context, event, offered_tools, scope)
                return None
            tools = self._live_tools.get((invocation_context.invocation_id, event.author, event.branch or ""))
            if tools is not None and event.get_function_calls():
                # A live session's later response (no model callback runs for it): a model call of its own.
                self._live_response(invocation_context, event, tools)
                return None
        delta = event.actions.state_delta
        metadata = event.custom_metadata or {}
        if STOP_METADATA in metadata and content is not None:
            text = "".join(part.text or "" for part in content.parts or [])
            for key in [key for key, value in delta.items() if value == text]:
                del delta[key]  # an output_key: the stop message is no agent's output
            if not isinstance(invocation_context.agent, BaseAgent):
                # An ADK 2.x Workflow: its graph loops on whatever the nodes answer, and only an abort ends
                # it. The stop event is appended and delivered; ADK then seals the invocation.
                invocation_context.abort()
        state = invocation_context.session.state
        for key in delta:
            if key.startswith(self.state_key):
                latest = state.get(key)
                if latest is not None:
                    delta[key] = latest
        return None

    def _live_response(self, invocation_context: InvocationContext, event: Event, tools: dict[str, BaseTool]) -> None:
        """A live response with calls: counted as a model call; once the turn has stopped (refusals ignored,
        errors in a row, a budget) its calls are refused, the model told the turn has ended (a live session
        has no hook to end a turn between two responses)."""
        session = invocation_context.session
        scope = self.scope_of(invocation_context)
        root = self._states.read(session, self.state_key)
        observe.apply(self.policy.decide_model_call, root, turn_id=self.turn_of(invocation_context.invocation_id))
        if scope.root:
            self._respond(invocation_context, event, tools, scope, root)
            return
        self._states.write_event(session, event, root, self.state_key)
        state = self._states.read(session, scope.key)
        observe.apply(self.policy.decide_model_call, state, turn_id=scope.turn_id)
        self._respond(invocation_context, event, tools, scope, state)

    def _respond(
        self,
        invocation_context: InvocationContext,
        event: Event,
        tools: dict[str, BaseTool],
        scope: Scope,
        state: GuardState | None = None,
    ) -> None:
        """The model's response event: its calls decided as one batch, the state written into its delta."""
        session = invocation_context.session
        if state is None:
            state = self._states.read(session, scope.key)
        calls = event.get_function_calls()
        if calls:
            batch = [tool_call(tools.get(str(call.name)), call.args, call.id, name=call.name) for call in calls]
            invocation_id = invocation_context.invocation_id
            decisions = observe.apply(self.policy.decide_tool_calls, state, batch, turn_id=scope.turn_id)
            for call, call_id, refusal in zip(batch, batch_call_ids(batch), decisions, strict=True):
                decided = _Decided(call=replace(call, call_id=call_id), refusal=refusal, scope=scope)
                _bounded_append(self._decided, (invocation_id, str(call.call_id)), decided)
        self._states.write_event(session, event, state, scope.key)
        if not scope.root and self._records_model_calls:
            self._states.write_event(session, event, self._states.read(session, self.state_key), self.state_key)

    # -- tools ---------------------------------------------------------------------------------

    @_in_scope
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Fires before each tool call (parallel calls: once each). Returns ``None`` to let it run, or
        ``Refused({"error": <refusal text>})``: ADK then skips the tool and hands the model that response.

        A call of a model response hands back the decision its batch got (``on_event_callback``); any
        other call (one ADK replays when an invocation resumes, or runs once a confirmation came) is
        decided here."""
        decided = self._claim(tool_context, tool.name, tool_args)
        confirmation = tool_context.tool_confirmation
        if decided is not None:
            call, refusal, scope = decided.call, decided.refusal, decided.scope
        elif confirmation is not None:
            # The human's answer to a call that asked: that call was decided and counted with its batch. Approved,
            # it runs now (its outcome is recorded after it); rejected, it is withdrawn: it counts as a rejected
            # call (the same call rejected max_calls times is refused, RefusalKind.REJECTED, without asking).
            scope = self.scope_of(tool_context._invocation_context)
            call = tool_call(tool, tool_args, tool_context.function_call_id)
            answered = _Call(call=call, refused=False, scope=scope, settled=not confirmation.confirmed)
            self._calls[tool_context] = answered
            if not confirmation.confirmed:
                state = self._load(tool_context, scope.key)
                observe.apply(self.policy.record_rejection, state, call, turn_id=scope.turn_id)
                self._states.write(tool_context, state, scope.key)
            _enclosing_turn.set(self.turn_of(tool_context.invocation_id))
            return None
        else:
            scope = self.scope_of(tool_context._invocation_context)
            call = tool_call(tool, tool_args, tool_context.function_call_id)
            state = self._load(tool_context, scope.key)
            refusal = observe.apply(self.policy.decide_tool_call, state, call, turn_id=scope.turn_id)
            if refusal is not None or isinstance(tool, AgentTool):
                # An AgentTool's nested Runner starts from a copy of this session's state: the count must be in it.
                self._states.write(tool_context, state, scope.key)
            else:
                # The call runs: its outcome callback writes the state into this same event's delta.
                # Siblings running in parallel read the staged state meanwhile.
                self._states.stage(tool_context, state, scope.key)
        self._calls[tool_context] = _Call(call=call, refused=refusal is not None, scope=scope)
        if refusal is not None:
            return Refused(refusal)
        _enclosing_turn.set(self.turn_of(tool_context.invocation_id))  # this call's task only: ADK runs each in a task
        return None

    @_in_scope
    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Fires after each tool call, refused ones included (those are not recorded again): records the
        outcome and, as the result, what the model reads of it (``model_view``: the function response
        dict; for an MCP tool without its ``meta``). A failure is an MCP result with ``isError: true``,
        ``ReflectAndRetryToolPlugin``'s answer to a failed call, or a response ``is_failure`` says is one.
        A call that asked for confirmation (``require_confirmation``, ``tool_context.request_confirmation``)
        records nothing: asking is not running; the human's answer settles it (``before_tool_callback``).
        Returns ``None``: the response is left as it is."""
        if tool_context.function_call_id in tool_context.actions.requested_tool_confirmations:
            asked = self._calls.get(tool_context)
            if asked is not None:
                asked.settled = True  # its outcome comes with the run a human approves
            return None
        if not self._records_outcomes:
            return None  # the policy uses no outcome (count="per_turn", no failure rule)
        ok = not mcp_is_error(result, tool) and not _reflect_and_retry(result)
        if ok and self.is_failure is not None:
            ok = not self.is_failure(function_response(result))
        self._record(tool_context, ok, model_view(result, tool))
        return None

    @_in_scope
    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        """Fires when a tool raises (or its name is unknown): records a failure, with the error's type and
        text as its result. Returns ``None``, so ADK goes on as it would without the guard (another plugin
        or callback may answer the error; if none does, ADK raises it out of the invocation). A cancelled
        call is not recorded."""
        if isinstance(error, asyncio.CancelledError):
            return None
        self._record(tool_context, False, error_text(error))
        return None

    # -- helpers -------------------------------------------------------------------------------

    def _load(self, context: CallbackContext, key: str) -> GuardState:
        return self._states.read(context.session, key)

    def _claim(self, tool_context: ToolContext, name: str, arguments: dict[str, Any]) -> _Decided | None:
        """The batch decision of this call, taken out of the undelivered ones: by its id and, for an id the
        response used more than once, by its tool and arguments."""
        key = (tool_context.invocation_id, str(tool_context.function_call_id))
        decided = self._decided.get(key)
        if not decided:
            return None
        index = next(
            (i for i, d in enumerate(decided) if d.call.name == name and d.call.arguments == arguments),
            next((i for i, d in enumerate(decided) if d.call.name == name), 0),
        )
        claimed = decided.pop(index)
        if not decided:
            del self._decided[key]
        return claimed

    def _record(self, tool_context: ToolContext, ok: bool, result: Any) -> None:
        # Only calls this plugin decided get an outcome, and once: not a refused call (ADK runs the after
        # callbacks on the refusal too), not one another plugin answered before us, and not twice when an
        # error callback answered an error (ADK then runs the after callbacks as well).
        call = self._calls.get(tool_context)
        if call is None or call.refused or call.settled or not self._records_outcomes:
            return
        call.settled = True
        state = self._load(tool_context, call.scope.key)
        observe.apply(
            self.policy.record_tool_result, state, call.call, ok=ok, result=result, turn_id=call.scope.turn_id
        )
        self._states.write(tool_context, state, call.scope.key)


@dataclass
class _Decided:
    """A call of a model response, decided with its batch, until its ``before_tool_callback`` takes it."""

    call: ToolCall
    """The call as its batch decided it (its id as ``batch_call_ids`` gave it)."""
    refusal: Refusal | None
    scope: Scope


@dataclass
class _Call:
    """One call in flight, from ``before_tool_callback`` to its outcome (kept with its ``ToolContext``)."""

    call: ToolCall
    refused: bool
    scope: Scope
    settled: bool = field(default=False)


def _bounded_put(entries: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    entries[key] = value
    entries.move_to_end(key)
    if len(entries) > _BOUND:
        entries.popitem(last=False)


def _bounded_append(entries: OrderedDict[Any, list[Any]], key: Any, value: Any) -> None:
    entries.setdefault(key, []).append(value)
    if len(entries) > _BOUND:
        entries.popitem(last=False)


async def _tool_names(root: BaseAgent, context: ReadonlyContext) -> set[str]:
    """The names of every tool in the agent tree under ``root``, as its models call them (toolsets listed,
    prefixes applied), agents used as tools included; ``transfer_to_agent`` where agents have sub-agents."""
    names: set[str] = set()
    seen: set[int] = set()
    pending: list[BaseAgent] = [root]
    while pending:
        agent = pending.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        pending.extend(agent.sub_agents)
        if agent.sub_agents:
            names.add("transfer_to_agent")
        if isinstance(agent, LlmAgent):
            for tool in await agent.canonical_tools(context):
                names.add(tool.name)
                if isinstance(tool, AgentTool):
                    pending.append(tool.agent)
    return names


def _in_loop(agent: BaseAgent) -> bool:
    """Whether a ``LoopAgent`` encloses ``agent`` (it would run its sub-agents again until one escalates)."""
    parent = agent.parent_agent
    while parent is not None:
        if isinstance(parent, LoopAgent):
            return True
        parent = parent.parent_agent
    return False


def _reflect_and_retry(result: Any) -> bool:
    """Whether ``result`` is ``ReflectAndRetryToolPlugin``'s answer to a failed call."""
    return isinstance(result, dict) and result.get("response_type") == REFLECT_AND_RETRY


def turn_of(invocation_id: str) -> str:
    """The turn of a callback of invocation ``invocation_id``: that id, or, inside a nested run of an agent
    used as a tool, the id of the turn whose tool call runs it."""
    enclosing = _enclosing_turn.get()
    return enclosing if enclosing is not None else invocation_id


def stop_response(stop: Stop) -> LlmResponse:
    """The response that ends a turn: the stop message as the model's text, the reason in ``custom_metadata``."""
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=stop.message)]),
        custom_metadata={STOP_METADATA: stop.reason.value},
    )
