"""``RepeatGuard``: the capability that runs the repeat-hooks ``Policy`` on a pydantic-ai agent.

One run (``run`` / ``run_sync`` / ``run_stream`` / ``iter``, with or without ``message_history``) is one
turn. ``for_run`` gives every run its own copy holding its own ``GuardState``, so one ``RepeatGuard``
(and one agent) serves any number of concurrent runs. The hooks, in the order they fire:

- ``before_run``: starts the turn (its id is ``ctx.run_id``) and picks the run's clock.
- ``before_model_request``: asks the policy whether the turn is over; if so, the model is not called
  and the run ends with the stop (see ``stopped``); else it reads the run clock.
- ``after_model_request``: records each model attempt, with its seconds on the run clock (since
  ``before_model_request`` or the previous attempt) and the cost of its usage (``cost=``).
- ``wrap_tool_execute``: before a tool runs, the policy counts the call; a refused call never runs and
  its refusal text is the tool's return value the model reads (the ``Refusal`` itself rides in the
  ``ToolReturnPart``'s metadata, which the model does not see: ``refusals_of(result)``). After it ran,
  its outcome (the return value, or the ``ModelRetry`` / ``ToolFailed`` / exception text) is recorded.
- ``on_tool_validate_error``: arguments the tool could not accept (malformed JSON, a schema mismatch)
  are recorded as a failed call; pydantic-ai then asks the model to fix them, as usual.

Every decision depends only on the run's own events and the run clock, which durable execution
replays (``workflow.now()`` under Temporal), so a replayed run decides the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from pydantic_ai import _utils
from pydantic_ai.capabilities import AbstractCapability, RawToolArgs, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipModelRequest,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
    UserError,
)
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.tools import RunContext, ToolDefinition

from repeat_hooks import GuardState, Policy, StopRepeatedCalls

from .calls import FailureCheck, error_text, tool_call
from .costs import CostOf
from .stopped import RepeatGuardStopped, refusal_return, stop_response

Clock = Callable[[], datetime]
"""A clock returning aware datetimes: the run clock (``workflow.now`` under Temporal)."""

_CONTROL_FLOW = (CallDeferred, ApprovalRequired, SkipToolExecution)
"""What a tool raises to defer or skip itself: not an outcome, nothing is recorded."""


def accepts_text(parameters: ModelRequestParameters) -> bool:
    """``True`` when the run's output takes plain text (``str``, or a union with ``str``).

    ``output_mode`` is ``"text"`` for ``output_type=str``, and ``"tool"`` with ``allow_text_output`` for a
    union that includes ``str``. ``"native"``, ``"prompted"`` and ``"auto"`` parse the text as the
    structured type, so a stop message would not be a valid output there.
    """
    mode = parameters.output_mode
    return mode == "text" or (mode == "tool" and parameters.allow_text_output)


@dataclass
class RepeatGuard(AbstractCapability[Any]):
    """Stops a pydantic-ai agent calling the same tool over and over::

        agent = Agent(model, tools=[track_parcel], capabilities=[RepeatGuard(Policy(max_refusals=3))])

    Each run is one turn; every limit of ``policy`` counts within it. Construction fails with a
    ``TypeError`` / ``ValueError`` naming the mistake when the settings cannot work (a
    ``StopRepeatedCalls`` instead of a ``Policy``, ``max_cost_usd`` without ``cost``).
    """

    policy: Policy
    """The settings (a ``repeat_hooks.Policy``); the counters live in each run's own state."""
    _: KW_ONLY
    cost: CostOf | None = None
    """Dollars of one response's ``RequestUsage`` (``token_prices(...)``); needed by ``max_cost_usd``."""
    is_failure: FailureCheck | None = None
    """Says a tool's return value means failure (for tools that return their errors instead of raising)."""
    id: str | None = "repeat_guard"
    """The capability's id: one ``RepeatGuard`` per agent; a run's ``capabilities=[RepeatGuard(...)]``
    replaces the agent's."""

    _state: GuardState | None = field(default=None, init=False, repr=False, compare=False)
    _clock: Clock | None = field(default=None, init=False, repr=False, compare=False)
    _started: datetime | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.policy, StopRepeatedCalls):
            raise TypeError(
                "RepeatGuard takes a Policy, not a StopRepeatedCalls (which holds one conversation's "
                "counters): RepeatGuard(Policy(...)); each run gets its own state."
            )
        if not isinstance(self.policy, Policy):
            raise TypeError(f"RepeatGuard takes a repeat_hooks.Policy, not {type(self.policy).__name__}")
        if self.policy.max_cost_usd is not None and self.cost is None:
            raise ValueError(
                "Policy(max_cost_usd=...) can never trip without prices: "
                "RepeatGuard(policy, cost=token_prices(input_usd_per_million, output_usd_per_million))"
            )

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[Any]]) -> AbstractCapability[Any]:
        """Two ``RepeatGuard`` on one agent would count every call twice: refused with a ``UserError``."""
        raise UserError(
            f"RepeatGuard was given {len(capabilities)} times to one agent; give one "
            "RepeatGuard(Policy(...)) with all the settings (a run's capabilities=[RepeatGuard(...)] "
            "replaces the agent's)."
        )

    # -- the run -------------------------------------------------------------------------------------

    async def for_run(self, ctx: RunContext[Any]) -> RepeatGuard:
        """Fires once per run, before any hook: returns this run's own copy, with a fresh ``GuardState``."""
        run = replace(self)  # same class and settings; the private per-run fields start empty
        run._state = GuardState()
        return run

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Fires when the run starts: starts the turn (``ctx.run_id``) and takes the run's clock.

        Raises ``UserError`` when the run holds two ``RepeatGuard`` (under different ids), or when the
        run's ``UsageLimits.request_limit`` is not above
        ``max_model_calls``: pydantic-ai checks its limit before this capability's
        ``before_model_request``, so the guard's step budget could never trip.
        """
        state = self._run_state()
        limits = ctx.usage_limits
        steps = self.policy.max_model_calls
        request_limit = limits.request_limit if limits is not None else None
        if request_limit is not None and steps is not None and request_limit <= steps:
            raise UserError(
                f"Policy(max_model_calls={steps}) can never trip: UsageLimits(request_limit={request_limit}) "
                "fails the run first. Set max_model_calls below request_limit (the guard then ends the run "
                "with its message)."
            )
        root = ctx.root_capability
        if root is not None:
            guards: list[AbstractCapability[Any]] = []
            root.apply(lambda capability: guards.append(capability) if isinstance(capability, RepeatGuard) else None)
            if len(guards) > 1:  # different ids slip past ``combine``
                raise UserError(
                    f"this run has {len(guards)} RepeatGuard capabilities (ids {sorted(str(g.id) for g in guards)}); "
                    "give one RepeatGuard(Policy(...)) with all the settings"
                )
        self._clock = (root.get_run_clock() if root is not None else None) or _utils.now_utc
        self.policy.start_turn(state, ctx.run_id)

    # -- model calls ---------------------------------------------------------------------------------

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Fires before each model request: lets it happen, or ends the run with the policy's ``Stop``.

        Text output: raises ``SkipModelRequest`` with the stop message as the response, so the run
        ends normally with ``result.output`` = the message. Structured output: raises
        ``RepeatGuardStopped``.
        """
        state = self._run_state()
        stop = self.policy.check_model_call(state, ctx.run_id)
        if stop is None:
            self._started = self._now()
            return request_context
        if accepts_text(request_context.model_request_parameters):
            raise SkipModelRequest(stop_response(stop))
        raise RepeatGuardStopped(stop, ctx.messages)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """Fires after each model attempt: records one model call, its run-clock seconds and its cost.

        The seconds run from ``before_model_request`` (or the previous attempt's end) to now.
        """
        state = self._run_state()
        now = self._now()
        started, self._started = self._started, now
        seconds = (now - started).total_seconds() if started is not None else 0.0
        cost = self.cost(response.usage) if self.cost is not None else 0.0
        self.policy.record_model_call(state, seconds, cost, turn_id=ctx.run_id)
        return response

    # -- tool calls ----------------------------------------------------------------------------------

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Fires around each tool call: returns the refusal (a ``ToolReturn``) without running the tool, or runs it.

        The tool's outcome is recorded with its result: the return value (a failure if ``is_failure``
        says so), or the text of a ``ModelRetry``, ``ToolFailed`` or any exception, which then goes on
        as pydantic-ai handles it. Deferrals (``CallDeferred``, ``ApprovalRequired``) record nothing.
        """
        state = self._run_state()
        request = tool_call(call, tool_def, args, self._scope(state))
        refusal = self.policy.check_tool_call(state, request, ctx.run_id)
        if refusal is not None:
            return refusal_return(refusal)
        try:
            result = await handler(args)
        except _CONTROL_FLOW:
            raise
        except ToolRetryError as error:
            self._record(ctx, request, False, error.tool_retry.content)
            raise
        except ToolFailedError as error:
            self._record(ctx, request, False, error.tool_failed.model_response_str(wrap_if_error=False))
            raise
        except (ModelRetry, ToolFailed) as error:
            self._record(ctx, request, False, error.message)
            raise
        except Exception as error:
            self._record(ctx, request, False, error_text(error))
            raise
        failed = self.is_failure is not None and bool(self.is_failure(result))
        self._record(ctx, request, not failed, result)
        return result

    async def on_tool_validate_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        error: ValidationError | ModelRetry,
    ) -> ValidatedToolArgs:
        """Fires when a call's arguments fail validation: records a failed call, then re-raises ``error``."""
        state = self._run_state()
        request = tool_call(call, tool_def, args, self._scope(state))
        self._record(ctx, request, False, error_text(error))
        raise error

    # -- helpers -------------------------------------------------------------------------------------

    def _run_state(self) -> GuardState:
        state = self._state
        if state is None:
            raise UserError(
                "RepeatGuard hook called on the agent's instance: pydantic-ai must call for_run() first "
                "(pass the RepeatGuard in Agent(capabilities=[...]) or run(capabilities=[...]))"
            )
        return state

    def _now(self) -> datetime:
        return (self._clock or _utils.now_utc)()

    @staticmethod
    def _scope(state: GuardState) -> str:
        return f"{state.turn}.{state.model_calls}"

    def _record(self, ctx: RunContext[Any], request: Any, ok: bool, result: Any) -> None:
        self.policy.record_tool_result(self._run_state(), request, ok, ctx.run_id, result=result)
