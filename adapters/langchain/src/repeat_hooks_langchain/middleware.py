"""``RepeatGuardMiddleware``: repeat-hooks as a LangChain v1 agent middleware for ``create_agent``.

Where each rule of the guard runs in the agent's graph (no extra node per step: the loop's own model
and tool nodes do the work, so the guard costs almost nothing per call):

- ``before_agent`` (once per ``invoke`` / ``ainvoke`` / ``stream`` / ``astream``; not again when an
  interrupted run resumes): a new turn.
- ``wrap_model_call`` (inside the model node, one per step), before the model: records the outcomes of
  the last batch of tool calls (``ToolMessage.status`` and content), then asks whether the turn must
  end; if so, the model is not called and the node's answer is an ``AIMessage`` holding the stop
  message, which ends the loop (no tool calls). After the model: counts the call with its seconds and
  its cost from ``usage_metadata``, and decides every tool call of the response together, in order,
  so parallel calls are counted exactly. The counters and the refusals go into the state.
- ``wrap_tool_call`` (one per tool call, in parallel): a refused call gets the refusal as its
  ``ToolMessage`` and the tool does not run; an allowed call runs as usual.

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
)
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from repeat_hooks import GuardState, Policy, StopRepeatedCalls

from .calls import failed, guard_call, last_batch, model_messages, read_only_hints, result_of
from .cost import CostOf
from .state import REFUSALS_KEY, STATE_KEY, RepeatGuardState, dump_state, load_state

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

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Fires around each model call (inside the model node).

        Before: records the last tool results; if a rule trips, returns an ``AIMessage`` holding the stop
        message instead of calling the model (the loop ends; the stop is in ``repeat_guard["stop"]``).
        After: counts the call (seconds, cost) and decides the response's tool calls. Returns the
        model's response unchanged, with the counters and refusals as a state update. A model call
        that raises is not counted (the error reaches the caller).
        """
        hints = read_only_hints(request.tools)
        guard, stopped = self._before_model(request.state, hints)
        if stopped is not None:
            return stopped
        started = self.clock() if self.clock is not None else 0.0
        response = handler(request)
        seconds = self.clock() - started if self.clock is not None else 0.0
        return self._after_model(request.state, guard, response, seconds, hints)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """``wrap_model_call`` for ``ainvoke`` / ``astream``."""
        hints = read_only_hints(request.tools)
        guard, stopped = self._before_model(request.state, hints)
        if stopped is not None:
            return stopped
        started = self.clock() if self.clock is not None else 0.0
        response = await handler(request)
        seconds = self.clock() - started if self.clock is not None else 0.0
        return self._after_model(request.state, guard, response, seconds, hints)

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

    def _before_model(
        self, state: Mapping[str, Any], hints: Mapping[str, bool]
    ) -> tuple[GuardState, ExtendedModelResponse[Any] | None]:
        """The counters with the last tool results recorded, and the stop answer if the turn must end."""
        guard = load_state(state)
        self._record_outcomes(guard, state.get("messages", ()), state.get(REFUSALS_KEY) or {}, hints)
        stop = self.policy.check_model_call(guard)
        if stop is None:
            return guard, None
        answer = ModelResponse[Any](result=[AIMessage(content=stop.message)])
        return guard, ExtendedModelResponse(model_response=answer, command=self._update(state, guard, {}))

    def _after_model(
        self,
        state: Mapping[str, Any],
        guard: GuardState,
        response: ModelResponse[Any],
        seconds: float,
        hints: Mapping[str, bool],
    ) -> ExtendedModelResponse[Any]:
        """Counts the model call and decides every tool call of its response, in order."""
        messages = model_messages(response.result)
        cost = 0.0
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
        # No delivery id: the count is committed with the response in one checkpoint, so a model node that
        # runs again (a crash before the commit) is a new, real model call.
        self.policy.record_model_call(guard, seconds=seconds, cost_usd=cost)
        refusals: dict[str, str] = {}
        # Calls the model node answered itself (structured output with ToolStrategy) never reach a tool.
        answered = {m.tool_call_id for m in response.result if isinstance(m, ToolMessage)}
        for message in messages:
            for call in message.tool_calls:
                if call.get("id") in answered:
                    continue
                refusal = self.policy.check_tool_call(guard, guard_call(call, hints))
                if refusal is not None and call.get("id"):
                    refusals[str(call["id"])] = refusal.message
        return ExtendedModelResponse(model_response=response, command=self._update(state, guard, refusals))

    @staticmethod
    def _update(state: Mapping[str, Any], guard: GuardState, refusals: dict[str, str]) -> Command[Any]:
        update: dict[str, Any] = {STATE_KEY: dump_state(guard)}
        if refusals or state.get(REFUSALS_KEY):
            update[REFUSALS_KEY] = refusals  # written when there is something to set or to clear
        return Command(update=update)

    def _record_outcomes(
        self,
        guard: GuardState,
        messages: Sequence[AnyMessage],
        refused: Mapping[str, str],
        hints: Mapping[str, bool],
    ) -> None:
        """Records the outcome of each call of the last batch that was not refused (its ``ToolMessage``)."""
        message, answers = last_batch(messages)
        if message is None:
            return
        calls = {call.get("id"): call for call in message.tool_calls}
        for answer in answers:
            call = calls.get(answer.tool_call_id)
            if call is None or answer.tool_call_id in refused:
                continue  # not asked for in this message, or the guard's own refusal
            self.policy.record_tool_result(guard, guard_call(call, hints), not failed(answer), result=result_of(answer))

    @staticmethod
    def _refusal(request: ToolCallRequest) -> ToolMessage | None:
        call = request.tool_call
        refusals = request.state.get(REFUSALS_KEY) or {}
        text = refusals.get(call.get("id") or "")
        if text is None:
            return None
        return ToolMessage(content=text, tool_call_id=call.get("id") or "", name=call["name"], status="error")


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
