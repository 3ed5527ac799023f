"""``RepeatGuardMiddleware``: repeat-hooks as a LangChain v1 agent middleware for ``create_agent``.

Where each rule of the guard runs in the agent's graph (the loop's own nodes do the work; the guard adds
one ``before_model`` node per step, as ``ModelCallLimitMiddleware`` does, and one ``after_agent`` node):

- ``before_agent`` (once per ``invoke`` / ``ainvoke`` / ``stream`` / ``astream``; not again when an
  interrupted run resumes): a new turn.
- ``before_model`` (one per step, before the model node): records the outcomes of the last batch of tool
  calls (``ToolMessage.status``, and the content as the model reads it: ``calls.model_view``; a call a
  reviewer rejected is withdrawn, a call a reviewer edited is decided afresh on what ran), then asks
  whether the turn must end; if so, it ends the turn through the agent's own end jump
  (``{"jump_to": "end", "messages": [AIMessage(stop.message)]}``, as ``ModelCallLimitMiddleware`` does): the
  model node does not run, so no other middleware counts a model call that never happened.
- ``wrap_model_call`` (inside the model node): times the call, counts it with its cost from
  ``usage_metadata``, and decides every tool call of the response as one batch
  (``Policy.decide_tool_calls``), before any of them runs, so the results of parallel calls never restart
  each other's counts. A refused call is answered there (``refusal.refuse``): it leaves the response's
  ``tool_calls`` for its ``invalid_tool_calls``, and its refusal follows as its ``ToolMessage``. So no
  ``after_model`` hook (``HumanInTheLoopMiddleware``'s batched review among them) and no tool-call hook (its
  per-call review) ever sees it as a call to make, and the tool node does not run it. The decisions are
  committed with the response in one checkpoint.
- ``wrap_tool_call`` (one per tool call, in parallel): an allowed call runs as usual; a call a reviewer
  edited is decided afresh on its new arguments (refused: the refusal is its ``ToolMessage``).
- ``after_agent`` (when the loop ends): when it ended only because every call of the last response was
  refused, jumps back to the model (``{"jump_to": "model"}``), which reads the refusals in the same turn.
  ``after_agent`` hooks run in reverse list order, so the guard must be listed after every middleware that
  has one (``before_agent`` checks it: ``GuardSetupError`` before anything runs).

The counters live in the graph state under ``repeat_guard`` (see ``state``), so they are checkpointed
with the thread. The middleware object holds settings only: one compiled agent serves every thread.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, ParamSpec, TypeVar

from langchain.agents.middleware import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langchain_core.messages.tool import tool_call
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.runtime import Runtime
from langgraph.types import Command

from repeat_hooks import GuardSetupError, GuardState, observe
from repeat_hooks.kit import Clock, CostOf, Stopwatch, check_budgets, check_tool_names, policy_from
from repeat_hooks.kit.clock import monotonic

from .calls import (
    HITL_EDITS_KEY,
    Hints,
    answered_positions,
    dump_hints,
    edit_of,
    failed,
    guard_call,
    last_ai_message,
    last_batch,
    load_hints,
    model_messages,
    model_view,
    rejected_by_reviewer,
    request_position,
    same_call,
    tool_hints,
)
from .refusal import edit_refusal, ended_on_refusals, kept_positions, refuse
from .state import HINTS_KEY, STATE_KEY, UNDECIDED_KEY, RepeatGuardState, dump_state, load_state

ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
ToolHandler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]

OWNER = "RepeatGuardMiddleware"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _scoped(hook: Callable[_P, _R]) -> Callable[_P, _R]:
    """``hook``, its observations (``repeat_hooks.observe``, OpenTelemetry) in the run's thread (``thread_id``)
    and agent (``create_agent(name=...)``); with no observer registered, ``hook`` as it is."""

    @functools.wraps(hook)
    def scoped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not observe.OBSERVERS:
            return hook(*args, **kwargs)
        try:
            config = get_config()
        except RuntimeError:  # not inside a graph run
            config = {}
        thread = (config.get("configurable") or {}).get("thread_id")
        name = (config.get("metadata") or {}).get("lc_agent_name")
        with observe.scope(
            conversation_id=None if thread is None else str(thread), agent_name=name if isinstance(name, str) else None
        ):
            return hook(*args, **kwargs)

    return scoped


RAN_KEY = "repeat_guard_ran"
"""The ``response_metadata`` key of the ``ToolMessage`` of a call a reviewer edited: the call as it was
decided afresh (``{"name", "args", "refused"}``), so the next step's counts follow what ran. Never sent to
the model (chat model integrations do not send ``response_metadata``)."""

PER_CALL_ORDER = (
    "HumanInTheLoopMiddleware(interrupt_mode='per_call') reviews a call inside the tool-call chain, and it is "
    "listed after RepeatGuardMiddleware, so a reviewer's edit would run without being decided; list "
    "RepeatGuardMiddleware after it: create_agent(..., middleware=[HumanInTheLoopMiddleware(interrupt_on={...}, "
    "interrupt_mode='per_call'), RepeatGuardMiddleware(...)])"
)

TOOLS_OFFERED = (
    " (checked against the tools the model call is offered, request.tools: a middleware listed before "
    "RepeatGuardMiddleware that narrows them hides the others from it; list that middleware after the guard, "
    "or pass RepeatGuardMiddleware(check_tools=False))"
)


class RepeatGuardMiddleware(AgentMiddleware[RepeatGuardState, Any, Any]):
    """Stops a ``create_agent`` agent calling the same tool over and over; ends a stuck turn.

    ::

        agent = create_agent(model, tools=[track_parcel], checkpointer=checkpointer,
                             middleware=[RepeatGuardMiddleware()])          # Policy() by default

    ``policy``: the rules (a ``repeat_hooks.Policy``), or the settings as keywords
    (``RepeatGuardMiddleware(max_calls=2, max_refusals=3)``); neither: ``Policy()``. ``cost``: the dollars
    of one response from its ``usage_metadata`` (``cost=TokenPrices(3, 15)``), required when
    ``max_cost_usd`` is set. ``clock``: times each model call for ``max_model_seconds``
    (``repeat_hooks.kit.monotonic``; ``None``: 0 seconds). A setting the middleware could not feed fails
    here, with ``repeat_hooks.GuardSetupError``; a tool named in the policy that the model call is not
    offered (``request.tools``) fails at the first model call. ``check_tools=False`` skips that check, for
    tools a middleware listed after the guard adds at run time (an MCP server's tools loaded mid-run).

    Order: list the guard after every middleware that has an ``after_agent`` hook (checked before anything
    runs) and after a ``"per_call"`` review (``HumanInTheLoopMiddleware``; checked at its first review, before
    anyone is asked); each wrong order fails with ``GuardSetupError`` naming the right one. Nobody is asked
    about a call the guard refused, in either interrupt mode.
    """

    state_schema = RepeatGuardState

    def __init__(
        self,
        policy: Any = None,
        *,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        check_tools: bool = True,
        **settings: Any,
    ) -> None:
        super().__init__()
        self.policy = policy_from(policy, settings, owner=OWNER)
        """The rules, shared by every thread (settings only; the counts are in each thread's state)."""
        check_budgets(self.policy, owner=OWNER, cost=cost, clock=clock)
        self.cost = cost
        """Maps a response's ``usage_metadata`` to US dollars, for ``max_cost_usd`` (``None``: 0 dollars)."""
        self.clock = clock
        """Times each model call, for ``max_model_seconds`` (``None``: 0 seconds)."""
        policy = self.policy
        names_tools = bool(policy.limits or policy.exempt or policy.read_only or policy.destructive)
        self._names_tools = check_tools and names_tools

    # -- a turn --------------------------------------------------------------------------------------

    @_scoped
    def before_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires once per ``invoke`` / ``stream`` (not on a resume): starts a turn. Returns the reset counters.

        Raises ``GuardSetupError`` when a middleware listed after the guard has an ``after_agent`` hook (it
        would run before the guard's, which may send the agent back to the model): nothing has run yet.
        """
        _check_after_agent_order(self.name)
        guard = load_state(state)
        observe.apply(self.policy.start_turn, guard, turn_id=_turn_id(runtime))
        return {STATE_KEY: dump_state(guard)}

    async def abefore_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_agent`` for ``ainvoke`` / ``astream``."""
        return self.before_agent(state, runtime)

    # -- before each model call ----------------------------------------------------------------------

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires before each model call: records the last tool results, then ends the turn if a rule trips.

        The end is the agent's own jump (``{"jump_to": "end", "messages": [AIMessage(stop.message)]}``): the
        model node does not run; the caller's last message is the stop message (``stop_of(result)`` says why).
        """
        return self._before_model(state)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_model`` for ``ainvoke`` / ``astream``."""
        return self._before_model(state)

    @_scoped
    def _before_model(self, state: Mapping[str, Any]) -> dict[str, Any]:
        guard = load_state(state)
        hints = load_hints(state.get(HINTS_KEY))
        self._record_outcomes(guard, state.get("messages", ()), state.get(UNDECIDED_KEY) or (), hints)
        stop = observe.apply(self.policy.decide_model_call, guard)
        update: dict[str, Any] = {STATE_KEY: dump_state(guard)}
        if stop is not None:
            update["jump_to"] = "end"
            update["messages"] = [AIMessage(content=stop.message)]
            if state.get(UNDECIDED_KEY):
                update[UNDECIDED_KEY] = []
            if state.get(HINTS_KEY):
                update[HINTS_KEY] = {}
        return update

    # -- the end of the loop -------------------------------------------------------------------------

    @hook_config(can_jump_to=["model"])
    def after_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires when the agent loop ends (before ``invoke`` returns). When it ended only because the guard
        refused every call of the model's last response (no call was left for the tool node), returns
        ``{"jump_to": "model"}``: the model reads the refusals and answers again, in the same turn. Else
        ``None``.
        """
        if not ended_on_refusals(state.get("messages", ())):
            return None
        _check_after_agent_order(self.name)  # a run resumed on a graph built in another order
        return {"jump_to": "model"}

    @hook_config(can_jump_to=["model"])
    async def aafter_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``after_agent`` for ``ainvoke`` / ``astream``."""
        return self.after_agent(state, runtime)

    # -- model calls ---------------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Fires around each model call (inside the model node): times it, then counts it (seconds, cost)
        and decides its response's tool calls as one batch. Returns the model's response with each refused
        call answered by its refusal (``refusal.refuse``), and the counters as a state update. A model call
        that raises is not counted (the error reaches the caller).
        """
        self._check_tool_names(request.tools)
        watch = Stopwatch(self.clock)
        watch.start()
        response = handler(request)
        return self._after_model(request, watch, response)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """``wrap_model_call`` for ``ainvoke`` / ``astream``."""
        self._check_tool_names(request.tools)
        watch = Stopwatch(self.clock)
        watch.start()
        response = await handler(request)
        return self._after_model(request, watch, response)

    # -- tool calls ----------------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage | Command[Any]:
        """Fires around each tool call the guard allowed: returns ``handler``'s result. A call a reviewer
        edited is decided afresh on its new arguments: refused, it returns the refusal as its ``ToolMessage``
        (``status="error"``) without calling ``handler``.
        """
        verdict = self._verdict(request)
        if verdict.refusal is not None:
            return verdict.refusal
        try:
            return _stamp(handler(request), verdict)
        except GraphInterrupt as interrupt:
            _check_interrupt(interrupt)
            raise

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler) -> ToolMessage | Command[Any]:
        """``wrap_tool_call`` for ``ainvoke`` / ``astream``."""
        verdict = self._verdict(request)
        if verdict.refusal is not None:
            return verdict.refusal
        try:
            return _stamp(await handler(request), verdict)
        except GraphInterrupt as interrupt:
            _check_interrupt(interrupt)
            raise

    # -- helpers -------------------------------------------------------------------------------------

    @_scoped
    def _after_model(
        self, request: ModelRequest[Any], watch: Stopwatch, response: ModelResponse[Any]
    ) -> ExtendedModelResponse[Any]:
        """Counts the model call and decides every tool call of its response as one batch."""
        seconds = watch.seconds()
        state: Mapping[str, Any] = request.state
        guard = load_state(state)
        hints = tool_hints(request.tools)
        messages = model_messages(response.result)
        cost = 0.0
        if self.cost is not None:
            for message in messages:
                usage = message.usage_metadata
                if usage is None:
                    if self.policy.max_cost_usd is not None:
                        raise GuardSetupError(
                            "Policy(max_cost_usd=...) is set but the model's response has no usage_metadata, "
                            "so the budget could never trip; make the chat model report usage (e.g. "
                            "ChatOpenAI(stream_usage=True) when streaming), or drop max_cost_usd"
                        )
                    continue
                cost += self.cost(usage)
        # No delivery id: the count is committed with the response in one checkpoint, so a model node that
        # runs again (a crash before the commit) is a new, real model call.
        observe.apply(self.policy.record_model_call, guard, seconds=seconds, cost_usd=cost)
        # Calls the model node answered itself (structured output with ToolStrategy) never reach a tool.
        answered = {m.tool_call_id for m in response.result if isinstance(m, ToolMessage)}
        # The tool node runs the calls of the last AIMessage (``factory.py:2008``).
        last = next((candidate for candidate in reversed(messages) if candidate.tool_calls), None)
        calls = [] if last is None else last.tool_calls
        skipped = {position for position, call in enumerate(calls) if call.get("id") and call["id"] in answered}
        batch = [position for position in range(len(calls)) if position not in skipped]
        refused: dict[int, str] = {}
        if calls:
            refusals = observe.apply(
                self.policy.decide_tool_calls, guard, [guard_call(calls[position], hints) for position in batch]
            )
            for position, refusal in zip(batch, refusals, strict=True):
                if refusal is not None:
                    refused[position] = refusal.message
        kept = kept_positions(len(calls), refused)
        if last is not None and refused:
            response = ModelResponse(
                result=refuse(response.result, last, refused), structured_response=response.structured_response
            )
        update: dict[str, Any] = {STATE_KEY: dump_state(guard)}
        undecided = sorted(kept[position] for position in skipped)  # not the guard's to decide
        if undecided or state.get(UNDECIDED_KEY):
            update[UNDECIDED_KEY] = undecided  # written when there is something to set or to clear
        batch_hints = dump_hints(hints, [calls[position]["name"] for position in kept])
        if batch_hints or state.get(HINTS_KEY):
            update[HINTS_KEY] = batch_hints
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def _record_outcomes(
        self,
        guard: GuardState,
        messages: Sequence[AnyMessage],
        undecided: Sequence[int],
        hints: Mapping[str, Hints],
    ) -> None:
        """Records the outcome of each call of the last batch: what ran, as the model read it.

        A call a reviewer rejected did not run: withdrawn (it waits for no outcome, and counts as a rejected
        call). A call a reviewer edited is withdrawn the same way, and what ran is decided afresh, as the tool
        node decided it.
        """
        message, answers = last_batch(messages)
        if message is None:
            return
        calls = message.tool_calls
        for answer, position in zip(answers, answered_positions(calls, answers), strict=True):
            if position is None or position in undecided:
                continue  # a refusal (its call left tool_calls), or not the guard's (a structured-output call)
            original = guard_call(calls[position], hints)
            ran = answer.response_metadata.get(RAN_KEY) if isinstance(answer.response_metadata, dict) else None
            if isinstance(ran, dict) and isinstance(ran.get("name"), str):
                # A reviewer replaced the call: the original did not run; the new one was decided in the tool node.
                observe.apply(self.policy.record_rejection, guard, original)
                args = ran.get("args")
                ran_call = tool_call(name=ran["name"], args=args if isinstance(args, dict) else {}, id=None)
                edited = guard_call(ran_call, hints)
                if observe.apply(self.policy.decide_tool_call, guard, edited) is None and not ran.get("refused"):
                    observe.apply(
                        self.policy.record_tool_result, guard, edited, ok=not failed(answer), result=model_view(answer)
                    )
                continue
            if rejected_by_reviewer(answer):
                observe.apply(self.policy.record_rejection, guard, original)
                continue
            # What the model read of the result (content, block ids left out), not the message object.
            observe.apply(
                self.policy.record_tool_result, guard, original, ok=not failed(answer), result=model_view(answer)
            )

    @_scoped
    def _verdict(self, request: ToolCallRequest) -> _Verdict:
        """What to do with the call ``request`` runs (one the guard allowed, or a reviewer's edit of it): run it
        (and, when a reviewer edited it, the call that runs, for the next step's counts), or, for an edit the
        guard refuses, its refusal as a ``ToolMessage``."""
        state = request.state
        call = request.tool_call
        message = last_ai_message(state.get("messages", ()))
        position = None if message is None else request_position(message, call)
        if message is None or position is None:
            return _RUN
        original = message.tool_calls[position]
        running = edit_of(state.get(HITL_EDITS_KEY), call) or call
        if same_call(original, running):
            return _RUN
        # A reviewer replaced the call: decide the new one afresh, on the counts as the model node left them.
        hints = load_hints(state.get(HINTS_KEY))
        hints.update(tool_hints(getattr(request.runtime, "tools", None) or ()))
        guard = load_state(state)
        observe.apply(self.policy.record_rejection, guard, guard_call(original, hints))
        refusal = observe.apply(self.policy.decide_tool_call, guard, guard_call(running, hints))
        ran = {"name": running["name"], "args": running.get("args"), "refused": refusal is not None}
        if refusal is not None:
            return _Verdict(_refusal_message(call, edit_refusal(refusal.reason, running["name"]), ran), None)
        return _Verdict(None, ran)

    def _check_tool_names(self, tools: Sequence[object]) -> None:
        """The tools named in the policy must be among the tools the model call is offered (``request.tools``:
        the agent's tools, MCP tools given to ``create_agent`` among them), checked at every model call when
        the policy names any tool; raises ``GuardSetupError`` naming the closest one."""
        if not self._names_tools:
            return
        names = (name for name in (getattr(tool, "name", None) for tool in tools) if isinstance(name, str))
        try:
            check_tool_names(self.policy, names, owner=OWNER)
        except GuardSetupError as error:
            raise GuardSetupError(f"{error}{TOOLS_OFFERED}") from None


class _Verdict(NamedTuple):
    """A tool call's fate: its refusal (the tool does not run), or ``None`` and, for a call a reviewer edited,
    the call that runs (``{"name", "args", "refused"}``) to stamp on its result."""

    refusal: ToolMessage | None
    ran: dict[str, Any] | None


_RUN = _Verdict(None, None)


def _refusal_message(call: LangChainToolCall, text: str, ran: dict[str, Any]) -> ToolMessage:
    """The refusal of a reviewer's edit as the call's ``ToolMessage`` (``status="error"``)."""
    return ToolMessage(
        content=text,
        tool_call_id=call.get("id") or "",
        name=call["name"],
        status="error",
        response_metadata={RAN_KEY: ran},
    )


def _stamp(result: ToolMessage | Command[Any], verdict: _Verdict) -> ToolMessage | Command[Any]:
    """``result`` with the call that ran in its ``response_metadata``, when a reviewer edited the call."""
    if verdict.ran is None or not isinstance(result, ToolMessage):
        return result
    return result.model_copy(update={"response_metadata": {**result.response_metadata, RAN_KEY: verdict.ran}})


def _check_interrupt(interrupt: GraphInterrupt) -> None:
    """A per-call review raised inside the guard's tool-call hook: the reviewer's edit would run undecided."""
    for item in interrupt.args[0] if interrupt.args and isinstance(interrupt.args[0], Sequence) else ():
        value = getattr(item, "value", None)
        if isinstance(value, Mapping) and value.get("type") == "tool_approval":
            raise GuardSetupError(PER_CALL_ORDER) from None


_BRANCH = "branch:to:"
_AFTER_AGENT = ".after_agent"


def _check_after_agent_order(own: str) -> None:
    """Raises ``GuardSetupError`` when a middleware listed after the guard (``own``: its node name prefix) has
    an ``after_agent`` hook.

    ``create_agent`` chains the ``after_agent`` nodes in reverse list order (``langchain/agents/factory.py``,
    "Chain after_agent middleware"), so theirs would end the run before the guard's could send the agent back
    to the model. No public API lists a graph's nodes to a running node: they are read from the channels the
    running task reads the state through (LangGraph's ``CONFIG_KEY_READ``, a ``functools.partial`` of
    ``local_read(scratchpad, channels, ...)``; one ``"branch:to:<node>"`` channel per node, in the order
    ``create_agent`` added the nodes, which is the list order). Outside a graph run, or where that shape
    changes (``tests/adapters/langchain/test_order.py`` fails then), nothing is checked.
    """
    try:
        config = get_config()
    except RuntimeError:
        return
    read = (config.get("configurable") or {}).get("__pregel_read")
    args: Sequence[Any] = getattr(read, "args", None) or ()
    channels = args[1] if len(args) > 1 and isinstance(args[1], Mapping) else {}
    nodes = [
        channel[len(_BRANCH) : -len(_AFTER_AGENT)]
        for channel in channels
        if isinstance(channel, str) and channel.startswith(_BRANCH) and channel.endswith(_AFTER_AGENT)
    ]
    later = nodes[nodes.index(own) + 1 :] if own in nodes else []
    if later:
        raise GuardSetupError(_after_agent_order(later))


def _after_agent_order(later: Sequence[str]) -> str:
    """The error for middleware ``later`` (names) listed after the guard with an ``after_agent`` hook."""
    one = len(later) == 1
    names = ", ".join(later)
    return (
        f"{names} {'is' if one else 'are'} listed after RepeatGuardMiddleware and {'has' if one else 'have'} an "
        f"after_agent hook, which runs before the guard's (after_agent hooks run in reverse list order): when "
        f"the guard refuses every call of a response, its after_agent sends the agent back to the model, after "
        f"{'that hook' if one else 'those hooks'} had already run as if the run were over (ShellToolMiddleware "
        f"closes its shell); list RepeatGuardMiddleware after {'it' if one else 'them'}: create_agent(..., "
        f"middleware=[{', '.join(name + '(...)' for name in later)}, RepeatGuardMiddleware(...)])"
    )


def _turn_id(runtime: Runtime[Any]) -> str | None:
    """The id of the task running ``before_agent``: one per run (the same if that node is re-executed)."""
    info = getattr(runtime, "execution_info", None)
    task_id = getattr(info, "task_id", None)
    return task_id if isinstance(task_id, str) and task_id else None
