"""``RepeatGuardMiddleware``: repeat-hooks as a LangChain v1 agent middleware for ``create_agent``.

Where each rule of the guard runs in the agent's graph (no extra node per step: the loop's own model
and tool nodes do the work, so the guard costs almost nothing per call):

- ``before_agent`` (once per ``invoke`` / ``ainvoke`` / ``stream`` / ``astream``; not again when an
  interrupted run resumes): a new turn.
- ``wrap_model_call`` (inside the model node, one per step), before the model: records the outcomes of
  the last batch of tool calls (``ToolMessage.status``, and the content as the model reads it:
  ``calls.model_view``), then asks whether the turn must end; if so, the model is not called and the
  node's answer is an ``AIMessage`` holding the stop message, which ends the loop (no tool calls).
  After the model: counts the call with its seconds and its cost from ``usage_metadata``, and decides
  every tool call of the response as one batch (``Policy.decide_tool_calls``), before any of them runs,
  so the results of parallel calls never restart each other's counts. The counters and the decisions
  go into the state.
- ``wrap_tool_call`` (one per tool call, in parallel): a refused call gets the refusal as its
  ``ToolMessage`` and the tool does not run; an allowed call runs as usual.

The counters live in the graph state under ``repeat_guard`` (see ``state``), so they are checkpointed
with the thread. The middleware object holds settings only: one compiled agent serves every thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from langchain.agents.middleware import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from repeat_hooks import (
    Clock,
    CostOf,
    Feed,
    GuardSetupError,
    GuardState,
    Stopwatch,
    check_feeds,
    check_tool_names,
    policy_from,
)
from repeat_hooks.clock import monotonic

from .calls import (
    Hints,
    answered_positions,
    failed,
    guard_call,
    last_ai_message,
    last_batch,
    model_messages,
    model_view,
    request_position,
    tool_hints,
)
from .state import REFUSALS_KEY, STATE_KEY, RepeatGuardState, dump_state, load_state

ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
ToolHandler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]

OWNER = "RepeatGuardMiddleware"

_HOW_TO_FEED = {
    Feed.COST: f"{OWNER}(policy, cost=TokenPrices(input_usd_per_million, output_usd_per_million))",
    Feed.SECONDS: f"{OWNER}(policy, clock=repeat_hooks.clock.monotonic)",
}
"""The spelling that feeds each budget, for ``check_feeds``'s message."""


class RepeatGuardMiddleware(AgentMiddleware[RepeatGuardState, Any, Any]):
    """Stops a ``create_agent`` agent calling the same tool over and over; ends a stuck turn.

    ::

        agent = create_agent(model, tools=[track_parcel], checkpointer=checkpointer,
                             middleware=[RepeatGuardMiddleware()])          # Policy() by default

    ``policy``: the rules (a ``repeat_hooks.Policy``), or the settings as keywords
    (``RepeatGuardMiddleware(max_calls=2, max_refusals=3)``); neither: ``Policy()``. ``cost``: the dollars
    of one response from its ``usage_metadata`` (``cost=TokenPrices(3, 15)``), required when
    ``max_cost_usd`` is set. ``clock``: times each model call for ``max_model_seconds``
    (``repeat_hooks.clock.monotonic``; ``None``: 0 seconds). A setting the middleware could not feed fails
    here, with ``repeat_hooks.GuardSetupError``; a tool named in the policy that the agent does not have
    fails at the agent's first tool call, when the tool node's full list is known.
    """

    state_schema = RepeatGuardState

    def __init__(
        self,
        policy: Any = None,
        *,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        **settings: Any,
    ) -> None:
        super().__init__()
        self.policy = policy_from(policy, settings, owner=OWNER)
        """The rules, shared by every thread (settings only; the counts are in each thread's state)."""
        fed = {Feed.OUTCOMES, Feed.MODEL_CALLS}
        fed |= {feed for feed, given in ((Feed.COST, cost), (Feed.SECONDS, clock)) if given is not None}
        check_feeds(self.policy, can=fed, owner=OWNER, how=_HOW_TO_FEED)
        self.cost = cost
        """Maps a response's ``usage_metadata`` to US dollars, for ``max_cost_usd`` (``None``: 0 dollars)."""
        self.clock = clock
        """Times each model call, for ``max_model_seconds`` (``None``: 0 seconds)."""
        policy = self.policy
        self._names_tools = bool(policy.limits or policy.exempt or policy.read_only or policy.destructive)

    # -- a turn --------------------------------------------------------------------------------------

    def before_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires once per ``invoke`` / ``stream`` (not on a resume): starts a turn. Returns the reset counters."""
        guard = load_state(state)
        self.policy.start_turn(guard, turn_id=_turn_id(runtime))
        return {STATE_KEY: dump_state(guard)}

    async def abefore_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_agent`` for ``ainvoke`` / ``astream``."""
        return self.before_agent(state, runtime)

    # -- model calls ---------------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Fires around each model call (inside the model node).

        Before: records the last tool results; if a rule trips, returns an ``AIMessage`` holding the stop
        message instead of calling the model (the loop ends; ``stop_of(result)`` gives the stop).
        After: counts the call (seconds, cost) and decides the response's tool calls as one batch. Returns
        the model's response unchanged, with the counters and decisions as a state update. A model call
        that raises is not counted (the error reaches the caller).
        """
        pending = self._before_model(request)
        if isinstance(pending, ExtendedModelResponse):
            return pending
        return self._after_model(request, pending, handler(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """``wrap_model_call`` for ``ainvoke`` / ``astream``."""
        pending = self._before_model(request)
        if isinstance(pending, ExtendedModelResponse):
            return pending
        return self._after_model(request, pending, await handler(request))

    # -- tool calls ----------------------------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage | Command[Any]:
        """Fires around each tool call: a refused call returns its refusal as its ``ToolMessage``
        (``status="error"``) without calling ``handler``; an allowed one returns ``handler``'s result.
        """
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        return handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler) -> ToolMessage | Command[Any]:
        """``wrap_tool_call`` for ``ainvoke`` / ``astream``."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        return await handler(request)

    # -- helpers -------------------------------------------------------------------------------------

    def _before_model(self, request: ModelRequest[Any]) -> _Pending | ExtendedModelResponse[Any]:
        """Records the last tool results; the stop answer if the turn must end, else the model call's
        counters, with its tools' hints and a started stopwatch."""
        state: Mapping[str, Any] = request.state
        hints = tool_hints(request.tools)
        guard = load_state(state)
        self._record_outcomes(guard, state.get("messages", ()), state.get(REFUSALS_KEY) or {}, hints)
        stop = self.policy.decide_model_call(guard)
        if stop is not None:
            answer = ModelResponse[Any](result=[AIMessage(content=stop.message)])
            return ExtendedModelResponse(model_response=answer, command=self._update(state, guard, {}))
        watch = Stopwatch(self.clock)
        watch.start()
        return _Pending(guard, hints, watch)

    def _after_model(
        self, request: ModelRequest[Any], pending: _Pending, response: ModelResponse[Any]
    ) -> ExtendedModelResponse[Any]:
        """Counts the model call and decides every tool call of its response as one batch."""
        guard, hints, watch = pending
        seconds = watch.seconds()
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
        self.policy.record_model_call(guard, seconds=seconds, cost_usd=cost)
        decisions: dict[str, str] = {}
        # Calls the model node answered itself (structured output with ToolStrategy) never reach a tool.
        answered = {m.tool_call_id for m in response.result if isinstance(m, ToolMessage)}
        # The tool node runs the calls of the last AIMessage (``factory.py:2008``).
        calls = next((message.tool_calls for message in reversed(messages) if message.tool_calls), [])
        if calls:
            skipped = {position for position, call in enumerate(calls) if call.get("id") and call["id"] in answered}
            batch = [position for position in range(len(calls)) if position not in skipped]
            refusals = self.policy.decide_tool_calls(guard, [guard_call(calls[position], hints) for position in batch])
            for position in skipped:
                decisions[str(position)] = ""  # not the guard's to decide
            for position, refusal in zip(batch, refusals, strict=True):
                if refusal is not None:
                    decisions[str(position)] = refusal.message
        return ExtendedModelResponse(model_response=response, command=self._update(request.state, guard, decisions))

    @staticmethod
    def _update(state: Mapping[str, Any], guard: GuardState, decisions: dict[str, str]) -> Command[Any]:
        update: dict[str, Any] = {STATE_KEY: dump_state(guard)}
        if decisions or state.get(REFUSALS_KEY):
            update[REFUSALS_KEY] = decisions  # written when there is something to set or to clear
        return Command(update=update)

    def _record_outcomes(
        self,
        guard: GuardState,
        messages: Sequence[AnyMessage],
        decisions: Mapping[str, str],
        hints: Mapping[str, Hints],
    ) -> None:
        """Records the outcome of each call of the last batch the guard let run (its ``ToolMessage``)."""
        message, answers = last_batch(messages)
        if message is None:
            return
        calls = message.tool_calls
        for answer, position in zip(answers, answered_positions(calls, answers), strict=True):
            if position is None or str(position) in decisions:
                continue  # not asked for in this message, refused by the guard, or not the guard's
            call = guard_call(calls[position], hints)
            # What the model read of the result (content, block ids left out), not the message object.
            self.policy.record_tool_result(guard, call, ok=not failed(answer), result=model_view(answer))

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        """The refusal decided for the call ``request`` runs, as its ``ToolMessage``; ``None``: let it run."""
        self._check_tool_names(request)
        decisions = request.state.get(REFUSALS_KEY)
        if not decisions:
            return None
        call = request.tool_call
        message = last_ai_message(request.state.get("messages", ()))
        position = None if message is None else request_position(message, call)
        text = None if position is None else decisions.get(str(position))
        if not text:
            return None
        return ToolMessage(content=text, tool_call_id=call.get("id") or "", name=call["name"], status="error")

    def _check_tool_names(self, request: ToolCallRequest) -> None:
        """The tools named in the policy must be the agent's: checked against the tool node's full list (not
        the model call's, which a tool-selecting middleware may have narrowed) at each tool call, when the
        policy names any tool. Keeps nothing on the middleware: one instance serves every agent and thread."""
        if not self._names_tools:
            return
        tools = getattr(request.runtime, "tools", None)
        if tools:
            check_tool_names(self.policy, (tool.name for tool in tools), owner=OWNER)


class _Pending(NamedTuple):
    """A model call under way: the thread's counters, its tools' hints, and the stopwatch timing it."""

    guard: GuardState
    hints: Mapping[str, Hints]
    watch: Stopwatch


def _turn_id(runtime: Runtime[Any]) -> str | None:
    """The id of the task running ``before_agent``: one per run (the same if that node is re-executed)."""
    info = getattr(runtime, "execution_info", None)
    task_id = getattr(info, "task_id", None)
    return task_id if isinstance(task_id, str) and task_id else None
