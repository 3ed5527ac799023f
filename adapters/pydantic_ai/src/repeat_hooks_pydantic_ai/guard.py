"""``RepeatGuard``: the capability that runs the repeat-hooks ``Policy`` on a pydantic-ai agent.

One run (``run`` / ``run_sync`` / ``run_stream`` / ``iter``, with or without ``message_history``) is one
turn. ``for_run`` gives every run its own copy holding its own ``GuardState``, so one ``RepeatGuard``
(and one agent) serves any number of concurrent runs. The hooks, in the order they fire:

- ``before_run``: starts the turn (its id is ``ctx.run_id``) and picks the run's clock (the durability
  capability's run clock, when one offers it and ``clock`` is the default).
- ``before_model_request``: at the run's first request, checks the tool names the policy mentions
  against the agent's tools; then asks the policy whether the turn is over: if so, the model is not
  called and the run ends with the stop (see ``state``); else the stopwatch starts.
- ``after_model_request``: records each model attempt, with its seconds (since ``before_model_request``
  or the previous attempt) and the cost of its usage (``cost=``); then decides **all the function-tool
  calls of the response as one batch**, before any of them runs, so no result of the batch restarts
  another's count whatever order and timing pydantic-ai runs them in.
- ``on_tool_validate_error``: arguments the tool could not accept (malformed JSON, a schema mismatch)
  are recorded as a failed call, and pydantic-ai then asks the model to fix them, as usual; a call the
  batch refused gets its refusal instead (the validation error is dropped, the tool never runs).
- ``wrap_tool_execute``: a refused call never runs: its refusal text is the tool's return value the
  model reads (the ``Refusal`` itself rides in the ``ToolReturnPart``'s metadata, which the model does
  not see: ``refusals_of(result)``). After a call ran, its outcome (what the model reads of its return
  value, or of its ``ModelRetry`` / ``ToolFailed`` / exception) is recorded. A call no batch decided (an
  approved call resumed with ``deferred_tool_results=``) is decided here, alone.

Every decision depends only on the run's own events and its clock, which durable execution replays
(``workflow.now()`` under Temporal), so a replayed run decides the same.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_ai.capabilities import AbstractCapability, RawToolArgs, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipModelRequest,
    SkipToolExecution,
    UserError,
)
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.tools import RunContext, ToolDefinition

import repeat_hooks
from repeat_hooks import (
    Clock,
    CostOf,
    Feed,
    GuardState,
    Policy,
    Refusal,
    Stopwatch,
    ToolCall,
    check_feeds,
    check_tool_names,
    policy_from,
)
from repeat_hooks.clock import monotonic

from .calls import FailureCheck, failure_view, model_view, tool_call
from .state import RepeatGuardStopped, refusal_return, stop_response

OWNER = "RepeatGuard"
_CONTROL_FLOW = (CallDeferred, ApprovalRequired, SkipToolExecution)
"""What a tool raises to defer or skip itself: not an outcome, nothing is recorded."""
_FEEDS = frozenset({Feed.OUTCOMES, Feed.MODEL_CALLS})
"""What every ``RepeatGuard`` feeds the policy; ``Feed.SECONDS`` too with a clock, ``Feed.COST`` with ``cost=``."""
_HOW = {
    Feed.COST: "RepeatGuard(policy, cost=TokenPrices(input_usd_per_million, output_usd_per_million))",
    Feed.SECONDS: "RepeatGuard(policy, clock=time.monotonic) (the default)",
}


class GuardSetupError(repeat_hooks.GuardSetupError, UserError):
    """The guard cannot work as set up (the message says how to fix it): a ``repeat_hooks.GuardSetupError``
    that is also pydantic-ai's ``UserError``, as the agent's own setup mistakes are."""


@contextmanager
def _as_setup_error() -> Iterator[None]:
    """The core's setup checks, raising this package's ``GuardSetupError`` (also a pydantic-ai ``UserError``)."""
    try:
        yield
    except repeat_hooks.GuardSetupError as error:
        raise GuardSetupError(str(error)) from None


def accepts_text(parameters: ModelRequestParameters) -> bool:
    """``True`` when the run's output takes plain text (``str``, or a union with ``str``).

    ``output_mode`` is ``"text"`` for ``output_type=str``, and ``"tool"`` with ``allow_text_output`` for a
    union that includes ``str``. ``"native"``, ``"prompted"`` and ``"auto"`` parse the text as the
    structured type, so a stop message would not be a valid output there.
    """
    mode = parameters.output_mode
    return mode == "text" or (mode == "tool" and parameters.allow_text_output)


@dataclass(init=False)
class RepeatGuard(AbstractCapability[Any]):
    """Stops a pydantic-ai agent calling the same tool over and over::

        agent = Agent(model, tools=[track_parcel], capabilities=[RepeatGuard()])  # the default Policy()
        RepeatGuard(Policy(max_refusals=3))  # or the settings as keywords: RepeatGuard(max_refusals=3)

    Each run is one turn; every limit of the policy counts within it. Construction fails with a
    ``TypeError`` naming the mistake for a policy that is not a ``Policy`` (a ``StopRepeatedCalls``) or an
    unknown setting, and with ``GuardSetupError`` for a budget nothing would feed (``max_cost_usd``
    without ``cost=``, ``max_model_seconds`` with ``clock=None``).
    """

    policy: Policy = field(default_factory=Policy)
    """The settings (a ``repeat_hooks.Policy``); the counts live in each run's own state."""
    cost: CostOf | None = None
    """Dollars of one response's ``RequestUsage`` (``TokenPrices(3, 15)``); needed by ``max_cost_usd``."""
    is_failure: FailureCheck | None = None
    """Says a tool's return value means failure (for tools that return their errors instead of raising)."""
    clock: Clock | None = monotonic
    """Seconds for ``max_model_seconds``. The default, ``time.monotonic``, gives way to the run clock a
    durability capability offers (``get_run_clock``: ``workflow.now()`` under Temporal, replay-safe);
    ``None``: no timing (every model call takes 0 s, and ``max_model_seconds`` fails at construction)."""
    id: str | None = "repeat_guard"
    """The capability's id: one ``RepeatGuard`` per agent; a run's ``capabilities=[RepeatGuard(...)]``
    replaces the agent's. A default in the class body, so pydantic-ai hands two of them to ``combine``."""

    _state: GuardState | None = field(default=None, repr=False, compare=False)
    _stopwatch: Stopwatch | None = field(default=None, repr=False, compare=False)
    _batch: dict[str, tuple[ToolCall, Refusal | None]] = field(default_factory=dict, repr=False, compare=False)

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        cost: CostOf | None = None,
        is_failure: FailureCheck | None = None,
        clock: Clock | None = monotonic,
        id: str | None = "repeat_guard",
        **settings: Any,
    ) -> None:
        self.policy = policy_from(policy, settings, owner=OWNER)
        self.cost = cost
        self.is_failure = is_failure
        self.clock = clock
        self.id = id
        self._state = None
        self._stopwatch = None
        self._batch = {}
        feeds = _FEEDS | {feed for feed, fed in ((Feed.SECONDS, clock), (Feed.COST, cost)) if fed is not None}
        with _as_setup_error():
            check_feeds(self.policy, can=feeds, owner=OWNER, how=_HOW)

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[Any]]) -> AbstractCapability[Any]:
        """Two ``RepeatGuard`` on one agent would count every call twice: refused with ``GuardSetupError``."""
        raise GuardSetupError(
            f"RepeatGuard was given {len(capabilities)} times to one agent; give one "
            "RepeatGuard(Policy(...)) with all the settings (a run's capabilities=[RepeatGuard(...)] "
            "replaces the agent's)."
        )

    # -- the run -------------------------------------------------------------------------------------

    async def for_run(self, ctx: RunContext[Any]) -> RepeatGuard:
        """Fires once per run, before any hook: returns this run's own copy, with a fresh ``GuardState``."""
        run = copy.copy(self)  # same settings; the per-run fields are replaced below
        run._state = GuardState()
        run._stopwatch = None
        run._batch = {}
        return run

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Fires when the run starts: starts the turn (``ctx.run_id``) and takes the run's clock. Returns nothing.

        Raises ``GuardSetupError`` when the run holds two ``RepeatGuard`` (under different ids), or when
        the run's ``UsageLimits.request_limit`` is not above ``max_model_calls``: pydantic-ai checks its
        limit before this capability's ``before_model_request``, so the guard's step budget could never trip.
        """
        state = self._run_state()
        limits = ctx.usage_limits
        steps = self.policy.max_model_calls
        request_limit = limits.request_limit if limits is not None else None
        if request_limit is not None and steps is not None and request_limit <= steps:
            raise GuardSetupError(
                f"Policy(max_model_calls={steps}) can never trip: UsageLimits(request_limit={request_limit}) "
                "fails the run first. Set max_model_calls below request_limit (the guard then ends the run "
                "with its message)."
            )
        root = ctx.root_capability
        if root is not None:
            guards: list[AbstractCapability[Any]] = []
            root.apply(lambda capability: guards.append(capability) if isinstance(capability, RepeatGuard) else None)
            if len(guards) > 1:  # different ids slip past ``combine``
                raise GuardSetupError(
                    f"this run has {len(guards)} RepeatGuard capabilities (ids {sorted(str(g.id) for g in guards)}); "
                    "give one RepeatGuard(Policy(...)) with all the settings"
                )
        clock = self.clock
        if clock is monotonic and root is not None:  # the default gives way to a replay-safe run clock
            run_clock = root.get_run_clock()
            if run_clock is not None:
                clock = lambda: run_clock().timestamp()  # noqa: E731
        self._stopwatch = Stopwatch(clock)
        self.policy.start_turn(state, turn_id=ctx.run_id)

    # -- model calls ---------------------------------------------------------------------------------

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Fires before each model request: lets it happen (returns ``request_context``), or ends the run.

        At the run's first request, a tool named in the policy's ``limits``, ``exempt``, ``read_only`` or
        ``destructive`` that is none of the request's function tools raises ``GuardSetupError`` (tools
        that join the run later, after its first request, cannot be named there). When the policy ends
        the turn: with text output, raises ``SkipModelRequest`` with the stop message as the response,
        so the run ends normally with ``result.output`` = the message; with structured output only,
        raises ``RepeatGuardStopped``.
        """
        state = self._run_state()
        parameters = request_context.model_request_parameters
        if state.turn.responses == 0 and state.turn.stop is None:
            with _as_setup_error():
                check_tool_names(self.policy, (tool.name for tool in parameters.function_tools), owner=OWNER)
        stop = self.policy.decide_model_call(state, turn_id=ctx.run_id)
        if stop is None:
            self._watch().start()
            return request_context
        if accepts_text(parameters):
            raise SkipModelRequest(stop_response(stop))
        raise RepeatGuardStopped(stop, ctx.messages)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """Fires after each model attempt: records one model call (its seconds and cost), then decides the
        response's function-tool calls as one batch. Returns ``response`` unchanged."""
        state = self._run_state()
        if state.turn.stop is not None:
            return response
        cost = self.cost(response.usage) if self.cost is not None else 0.0
        self.policy.record_model_call(state, seconds=self._watch().seconds(), cost_usd=cost, turn_id=ctx.run_id)
        tools = {tool.name: tool for tool in request_context.model_request_parameters.function_tools}
        parts: list[ToolCallPart] = []
        calls: list[ToolCall] = []
        for part in response.parts:
            if not isinstance(part, ToolCallPart):
                continue
            tool = tools.get(part.tool_name)
            if tool is not None and tool.kind == "function":  # unapproved / external calls do not run now
                parts.append(part)
                calls.append(tool_call(part, tool))
        decisions = self.policy.decide_tool_calls(state, calls, turn_id=ctx.run_id)
        self._batch = {
            part.tool_call_id: (call, decision) for part, call, decision in zip(parts, calls, decisions, strict=True)
        }
        return response

    # -- tool calls ----------------------------------------------------------------------------------

    async def on_tool_validate_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        error: ValidationError | ModelRetry,
    ) -> ValidatedToolArgs:
        """Fires when a call's arguments fail validation: records a failed call and re-raises ``error``.

        A call its batch refused returns the arguments as they are instead, so that ``wrap_tool_execute``
        hands the model its refusal (the tool never runs).
        """
        request, refusal = self._decision(ctx, call, tool_def)
        if refusal is not None:
            return args if isinstance(args, dict) else {}
        self._record(ctx, request, ok=False, result=failure_view(error))
        raise error

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

        The tool's outcome is recorded with what the model reads of it (``model_view``: a ``ToolReturn``'s
        ``return_value`` and ``content``, never its ``metadata``; a failure if ``is_failure`` says so of the
        return value), or of the ``ModelRetry``, ``ToolFailed`` or exception it raised, which then goes on
        as pydantic-ai handles it. Deferrals (``CallDeferred``, ``ApprovalRequired``) record nothing.
        """
        request, refusal = self._decision(ctx, call, tool_def)
        if refusal is not None:
            return refusal_return(refusal)
        try:
            result = await handler(args)
        except _CONTROL_FLOW:
            raise
        except Exception as error:
            self._record(ctx, request, ok=False, result=failure_view(error))
            raise
        failed = self.is_failure is not None and bool(self.is_failure(result))
        self._record(ctx, request, ok=not failed, result=model_view(result))
        return result

    # -- helpers -------------------------------------------------------------------------------------

    def _run_state(self) -> GuardState:
        state = self._state
        if state is None:
            raise GuardSetupError(
                "RepeatGuard hook called on the agent's instance: pydantic-ai must call for_run() first "
                "(pass the RepeatGuard in Agent(capabilities=[...]) or run(capabilities=[...]))"
            )
        return state

    def _watch(self) -> Stopwatch:
        if self._stopwatch is None:
            self._stopwatch = Stopwatch(self.clock)
        return self._stopwatch

    def _decision(
        self, ctx: RunContext[Any], call: ToolCallPart, tool_def: ToolDefinition
    ) -> tuple[ToolCall, Refusal | None]:
        """The call's ``ToolCall`` and decision: its batch's, else decided now, alone."""
        decided = self._batch.get(call.tool_call_id)
        if decided is not None and decided[0].name == call.tool_name:
            return decided
        request = tool_call(call, tool_def)
        return request, self.policy.decide_tool_call(self._run_state(), request, turn_id=ctx.run_id)

    def _record(self, ctx: RunContext[Any], request: ToolCall, *, ok: bool, result: Any) -> None:
        self.policy.record_tool_result(self._run_state(), request, ok=ok, result=result, turn_id=ctx.run_id)
