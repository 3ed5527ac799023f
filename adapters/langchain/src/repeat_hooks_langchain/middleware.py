"""``RepeatGuardMiddleware``: repeat-hooks as a LangChain v1 agent middleware for ``create_agent``.

Where each rule of the guard runs in the agent's graph:

- ``before_agent`` (once per ``invoke`` / ``ainvoke`` / ``stream`` / ``astream``; not again when an
  interrupted run resumes): a new turn.
- ``wrap_model_call`` (around each model call): counts the call, with its seconds and its cost from
  the response's ``usage_metadata``.
- ``after_model`` (one node, after each model response): decides every tool call of the response
  together, in order, so parallel calls are counted exactly; the decisions go into the state.
- ``wrap_tool_call`` (one per tool call, in parallel): a refused call gets the refusal as its
  ``ToolMessage`` and the tool does not run; an allowed call runs as usual.
- ``before_model`` (one node, before each model call): records the outcomes of the last batch of
  tool calls (``ToolMessage.status`` and content), then asks whether the turn must end; if so, the
  agent jumps to the end with an ``AIMessage`` holding the stop message.

The counters live in the graph state under ``repeat_guard`` (see ``state``), so they are checkpointed
with the thread. The middleware object holds settings only: one compiled agent serves every thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from repeat_hooks import GuardState, Policy, Refusal, StopRepeatedCalls

from .calls import failed, guard_call, last_batch, message_calling, model_messages, result_of
from .cost import CostOf
from .state import STATE_KEY, RepeatGuardState, dump_state, load_state

Clock = Callable[[], float]
"""A clock in seconds, read around each model call for ``Policy.max_model_seconds``."""

ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
ToolHandler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


class RepeatGuardMiddleware(AgentMiddleware[RepeatGuardState, Any, Any]):
    """Stops a ``create_agent`` agent calling the same tool over and over; ends a stuck turn.

    ::

        agent = create_agent(model, tools=[track_parcel], checkpointer=checkpointer,
                             middleware=[RepeatGuardMiddleware(Policy(max_refusals=3))])

    ``policy``: the rules (a ``repeat_hooks.Policy``). ``cost``: the dollars of one response from its
    ``usage_metadata`` (``token_prices(...)``), required when ``policy.max_cost_usd`` is set.
    ``clock``: times each model call for ``policy.max_model_seconds`` (``time.monotonic``).
    """

    state_schema = RepeatGuardState

    def __init__(
        self,
        policy: Policy,
        *,
        cost: CostOf | None = None,
        clock: Clock | None = time.monotonic,
        **misplaced: object,
    ) -> None:
        super().__init__()
        if misplaced:
            names = ", ".join(f"{name}={value!r}" for name, value in misplaced.items())
            raise TypeError(
                f"RepeatGuardMiddleware got {names}: the guard's settings belong in the Policy: "
                f"RepeatGuardMiddleware(Policy({names}))"
            )
        self.policy: Policy = _checked_policy(policy)
        """The rules, shared by every thread (settings only; the counts are in each thread's state)."""
        if self.policy.max_cost_usd is not None and cost is None:
            raise ValueError(
                "Policy(max_cost_usd=...) needs prices to count with: "
                "RepeatGuardMiddleware(policy, cost=token_prices(input_usd_per_million=..., "
                "output_usd_per_million=...))"
            )
        if self.policy.max_model_seconds is not None and clock is None:
            raise ValueError(
                "Policy(max_model_seconds=...) needs a clock: RepeatGuardMiddleware(policy, clock=time.monotonic)"
            )
        self.cost = cost
        """Maps a response's ``usage_metadata`` to US dollars, for ``max_cost_usd`` (``None``: 0 dollars)."""
        self.clock = clock
        """Times each model call, for ``max_model_seconds`` (``None``: 0 seconds)."""

    # -- a turn --------------------------------------------------------------------------------------

    def before_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires once per ``invoke`` / ``stream`` (not on a resume): starts a turn. Returns the reset counters."""
        guard = load_state(state)
        self.policy.start_turn(guard, _turn_id(runtime))
        return {STATE_KEY: dump_state(guard)}

    async def abefore_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_agent`` for ``ainvoke`` / ``astream``."""
        return self.before_agent(state, runtime)

    # -- model calls ---------------------------------------------------------------------------------

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires before each model call: records the last tool results, then may end the turn.

        Returns the updated counters; when a rule trips, also ``jump_to="end"`` and an ``AIMessage``
        holding the stop message (the caller's last message; the stop is in ``repeat_guard["stop"]``).
        """
        guard = load_state(state)
        self._record_outcomes(guard, state["messages"])
        stop = self.policy.check_model_call(guard)
        update: dict[str, Any] = {STATE_KEY: dump_state(guard)}
        if stop is not None:
            update["messages"] = [AIMessage(content=stop.message)]
            update["jump_to"] = "end"
        return update

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_model`` for ``ainvoke`` / ``astream``."""
        return self.before_model(state, runtime)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Fires around each model call: counts it once it answered, with its seconds and cost.

        Returns the model's response unchanged, with the updated counters as a state update.
        A model call that raises is not counted (the error reaches the caller).
        """
        started = self.clock() if self.clock is not None else 0.0
        response = handler(request)
        seconds = self.clock() - started if self.clock is not None else 0.0
        return self._counted(request.state, response, seconds)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """``wrap_model_call`` for ``ainvoke`` / ``astream``."""
        started = self.clock() if self.clock is not None else 0.0
        response = await handler(request)
        seconds = self.clock() - started if self.clock is not None else 0.0
        return self._counted(request.state, response, seconds)

    # -- tool calls ----------------------------------------------------------------------------------

    def after_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires after each model response: decides all its tool calls together, in order.

        Every call the model asked for is judged, also one another middleware already answered (a
        ``ToolCallLimitMiddleware`` block, a ``HumanInTheLoopMiddleware`` rejection): the model asked
        for it, so asking again is a repeat, and a model looping on blocked calls still reaches the
        refusal limit and the stop. That answer is the call's outcome. Returns the updated counters;
        ``wrap_tool_call`` reads the decisions from them.
        """
        message, _ = last_batch(state["messages"])
        if message is None:
            return None
        guard = load_state(state)
        for call in message.tool_calls:
            self.policy.check_tool_call(guard, guard_call(message, call))
        return {STATE_KEY: dump_state(guard)}

    async def aafter_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``after_model`` for ``ainvoke`` / ``astream``."""
        return self.after_model(state, runtime)

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

    def _counted(
        self, state: Mapping[str, Any], response: ModelResponse[Any], seconds: float
    ) -> ExtendedModelResponse[Any]:
        guard = load_state(state)
        cost = 0.0
        messages = model_messages(response.result)
        if self.cost is not None:
            for message in messages:
                usage = message.usage_metadata
                if usage is None:
                    if self.policy.max_cost_usd is not None:
                        raise ValueError(
                            "Policy(max_cost_usd=...) is set but the model's response has no usage_metadata, "
                            "so the budget could never trip; make the chat model report usage (e.g. "
                            "ChatOpenAI(stream_usage=True) when streaming), or drop max_cost_usd"
                        )
                    continue
                cost += self.cost(usage)
        delivery = f"model/{messages[-1].id}" if messages and messages[-1].id else None
        self.policy.record_model_call(guard, seconds=seconds, cost_usd=cost, delivery_id=delivery)
        return ExtendedModelResponse(model_response=response, command=Command(update={STATE_KEY: dump_state(guard)}))

    def _record_outcomes(self, guard: GuardState, messages: Sequence[AnyMessage]) -> None:
        message, answers = last_batch(messages)
        if message is None:
            return
        calls = {call.get("id"): call for call in message.tool_calls}
        for answer in answers:
            call = calls.get(answer.tool_call_id)
            if call is None:
                continue  # answered but not asked for in this message (e.g. a call a reviewer rejected)
            self.policy.record_tool_result(
                guard, guard_call(message, call), not failed(answer), result=result_of(answer)
            )

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        call = request.tool_call
        guard = load_state(request.state)
        message = message_calling(request.state.get("messages", ()), call.get("id"))
        if message is None:
            return None  # not a call of the conversation (run by hand): nothing decided it
        decided = guard_call(message, call)
        # Decided in after_model (same call id): this returns that decision without counting again. A call
        # that no after_model saw (added later by another middleware) is judged against the counts, uncounted.
        refusal: Refusal | None = self.policy.check_tool_call(guard, decided)
        if refusal is None:
            return None
        return ToolMessage(
            content=refusal.message, tool_call_id=call.get("id") or "", name=call["name"], status="error"
        )


def _turn_id(runtime: Runtime[Any]) -> str | None:
    """The id of the task running ``before_agent``: one per run (the same if that node is re-executed)."""
    info = getattr(runtime, "execution_info", None)
    task_id = getattr(info, "task_id", None)
    return task_id if isinstance(task_id, str) and task_id else None


def _checked_policy(policy: object) -> Policy:
    """The ``Policy`` passed, or a ``TypeError`` that says the right spelling."""
    if isinstance(policy, StopRepeatedCalls):
        raise TypeError(
            "RepeatGuardMiddleware takes a Policy, not a StopRepeatedCalls: the counts live in each "
            "thread's graph state, not in one guard object. Write RepeatGuardMiddleware(Policy(...)) with "
            "the same settings, e.g. RepeatGuardMiddleware(Policy(max_calls=2, max_refusals=3))"
        )
    if policy is Policy or (isinstance(policy, type) and issubclass(policy, Policy)):
        raise TypeError("RepeatGuardMiddleware takes a Policy instance: RepeatGuardMiddleware(Policy(max_calls=2))")
    if not isinstance(policy, Policy):
        raise TypeError(
            f"RepeatGuardMiddleware takes a repeat_hooks.Policy, got {type(policy).__name__}: "
            "write RepeatGuardMiddleware(Policy(max_calls=2, max_refusals=3))"
        )
    return policy
