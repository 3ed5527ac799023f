"""``RepeatGuard``: the capability that runs the repeat-hooks ``Policy`` on a pydantic-ai agent.

A turn is a user message: a run given a user prompt (``run`` / ``run_sync`` / ``run_stream`` / ``iter``,
with or without ``message_history``) starts one; a run given none (``deferred_tool_results=``, a
``message_history=`` resume, a workflow's ``continue_as_new``) continues the history's last turn, its
counts rebuilt from the messages (``state.rebuild``). ``for_run`` gives every run its own copy holding its
own ``GuardState``, so one ``RepeatGuard`` (and one agent) serves any number of concurrent runs. The
hooks, in the order they fire:

- ``before_run``: starts the turn (its id is ``ctx.run_id``), or rebuilds the continued one, and picks
  the run's clock (the durability capability's run clock, when one offers it and ``clock`` is the default).
- ``before_model_request``: at the run's first request, checks the tool names the policy mentions
  against the agent's tools; marks the calls a person denied as rejected (``record_rejection``: they never
  ran, and count toward their repeats); then asks the
  policy whether the turn is over: if so, the model is not called and the run ends with the stop (see
  ``state``); else the stopwatch starts.
- ``after_model_request``: records each model attempt, with its seconds (since ``before_model_request``
  or the previous attempt) and the cost of its usage (``cost=``); then decides **all the function-tool
  calls of the response as one batch** (approval-required ones included), before any of them runs, so no
  result of the batch restarts another's count whatever order and timing pydantic-ai runs them in. The
  response is stamped with its turn's id (``metadata``), for a later resume to find the turn.
- ``handle_deferred_tool_calls``: an approval-required call its batch refused is answered here (approved
  into its refusal), so no person is asked about a call the guard will not run.
- ``on_tool_validate_error``: arguments the tool could not accept (malformed JSON, a schema mismatch)
  are recorded as a failed call, and pydantic-ai then asks the model to fix them, as usual; a call the
  batch refused gets its refusal instead (the validation error is dropped, the tool never runs).
- ``wrap_tool_execute``: a refused call never runs: its refusal text is the tool's return value the
  model reads (the ``Refusal`` itself rides in the ``ToolReturnPart``'s metadata, which the model does
  not see: ``refusals_of(result)``). After a call ran, its outcome (what the model reads of its return
  value, or of its ``ModelRetry`` / ``ToolFailed`` / exception) is recorded. A call no batch decided is
  decided here, alone; one a person approved with other arguments (``override_args``), afresh on them.
- ``wrap_output_process``: the stop message never reaches an output function or an output validator: a
  plain text output gets it as it is; an output function's run raises ``RepeatGuardStopped``.

Every decision depends only on the messages (the history a continued turn is rebuilt from, and the run's
own events) and the run clock, which durable execution replays (``workflow.now()`` under Temporal), so a
replayed run decides the same.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_ai.capabilities import (
    AbstractCapability,
    RawToolArgs,
    ValidatedToolArgs,
    WrapOutputProcessHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipModelRequest,
    SkipToolExecution,
    UserError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.output import OutputContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolApproved, ToolDefinition

import repeat_hooks
from repeat_hooks import GuardState, Policy, Refusal, TokenPrices, ToolCall, observe
from repeat_hooks.kit import Clock, CostOf, Stopwatch, check_budgets, check_tool_names, policy_from
from repeat_hooks.kit.clock import monotonic
from repeat_hooks.observe import scope

from .calls import FailureCheck, failure_view, model_view, tool_call
from .state import (
    DECIDED_KINDS,
    Batch,
    RepeatGuardStopped,
    last_turn,
    mark_edited,
    rebuild,
    refusal_return,
    stamp,
    stop_response,
)
from .tools import registered

OWNER = "RepeatGuard"
_CONTROL_FLOW = (CallDeferred, ApprovalRequired, SkipToolExecution)
"""What a tool raises to defer or skip itself: not an outcome, nothing is recorded."""
OnStop = Literal["output", "raise"]
"""How a run the guard stops ends: ``"output"`` (plain text output gets the stop message, other outputs
raise ``RepeatGuardStopped``) or ``"raise"`` (every run raises ``RepeatGuardStopped``, as ``UsageLimits``
raises ``UsageLimitExceeded``)."""


ToolLookup = Callable[[str], "ToolDefinition | None"]
"""A tool's definition by name (``None``: not one of the run's tools)."""


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


def _prepared_tools(ctx: RunContext[Any]) -> ToolLookup:
    """The run step's tools, by name, as pydantic-ai prepared them (none before it did)."""
    manager = ctx.tool_manager
    if manager is None or manager.tools is None:
        return lambda name: None
    return manager.get_tool_def


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

    A turn is a user message: every limit of the policy counts within it, across the runs that continue
    it without a new prompt (approvals, resumes). Construction fails with a ``TypeError`` naming the
    mistake for a policy that is not a ``Policy`` (a ``StopRepeatedCalls``), an unknown setting or an
    unknown ``on_stop``, and with ``GuardSetupError`` for a budget nothing would feed (``max_cost_usd``
    without ``cost=``, ``max_model_seconds`` with ``clock=None``).

    In an agent spec (``Agent.from_spec``, ``custom_capability_types=[RepeatGuard]``)::

        capabilities:
          - RepeatGuard: {max_refusals: 3, limits: {refund: 1}, on_stop: raise}
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
    on_stop: OnStop = "output"
    """``"output"``: a plain text output (``str``, or ``str`` in a union) is the stop message; an output
    function or a structured-only output raises ``RepeatGuardStopped``. ``"raise"``: always raise it."""
    check_tools: bool = True
    """At the run's first request, check the tool names of ``limits``, ``exempt``, ``read_only`` and
    ``destructive`` against the request's tools and the ones the agent registered (a ``prepare`` may hide
    those at first); ``False`` for tools that join the run later (a dynamic toolset that connects an MCP
    server mid-run)."""

    _state: GuardState | None = field(default=None, repr=False, compare=False)
    _stopwatch: Stopwatch | None = field(default=None, repr=False, compare=False)
    _batch: Batch = field(default_factory=dict, repr=False, compare=False)
    _turn: str | None = field(default=None, repr=False, compare=False)
    _history: tuple[list[ModelMessage], int] | None = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        cost: CostOf | None = None,
        is_failure: FailureCheck | None = None,
        clock: Clock | None = monotonic,
        id: str | None = "repeat_guard",
        on_stop: OnStop = "output",
        check_tools: bool = True,
        **settings: Any,
    ) -> None:
        self.policy = policy_from(policy, settings, owner=OWNER)
        if on_stop not in ("output", "raise"):
            raise TypeError(f'RepeatGuard(on_stop=...) is "output" or "raise", not {on_stop!r}')
        self.cost = cost
        self.is_failure = is_failure
        self.clock = clock
        self.id = id
        self.on_stop = on_stop
        self.check_tools = check_tools
        self._state = None
        self._stopwatch = None
        self._batch = {}
        self._turn = None
        self._history = None
        with _as_setup_error():
            check_budgets(self.policy, owner=OWNER, cost=cost, clock=clock)

    @classmethod
    def from_spec(
        cls,
        policy: dict[str, Any] | Policy | None = None,
        *,
        cost: dict[str, float] | CostOf | None = None,
        id: str | None = "repeat_guard",
        on_stop: OnStop = "output",
        check_tools: bool = True,
        **settings: Any,
    ) -> RepeatGuard:
        """A ``RepeatGuard`` from an agent spec (``Agent.from_spec``): the policy's settings as keywords (or
        a ``policy`` mapping), ``cost`` as ``{input_usd_per_million: 3, output_usd_per_million: 15}``.
        ``is_failure`` and ``clock`` are code: give them in Python."""
        if isinstance(policy, dict):
            policy = Policy.model_validate(policy)
        if isinstance(cost, dict):
            cost = TokenPrices(**cost)
        return cls(policy, cost=cost, id=id, on_stop=on_stop, check_tools=check_tools, **settings)

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
        run._turn = None
        run._history = None
        return run

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Fires when the run starts: starts the turn, or continues the history's, and takes the run's clock.
        Returns nothing.

        A run given a user prompt (``ctx.prompt``) starts a turn whose id is ``ctx.run_id``. A run given
        none continues the history's last turn: pydantic-ai resumes the history then (pending or approved
        calls, a trailing request it sends again, a suspended response: ``UserPromptNode.run``,
        ``pydantic_ai/_agent_graph.py:1126-1208`` in 2.68), and a new prompt is what starts "a new turn" in
        its own words ("Resume it by running the agent with this message history and no new prompt ...
        before starting a new turn"). The continued turn's counts are rebuilt from the history
        (``state.rebuild``), so approval rounds and resumes share one turn's limits.

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
        self._turn = ctx.run_id
        if ctx.prompt is None and ctx.messages:
            turn_id, start = last_turn(ctx.messages)
            if turn_id is not None or start < len(ctx.messages):
                # Rebuilt at the first hook that knows the tools (pydantic-ai prepares them after before_run).
                self._turn = turn_id or ctx.run_id
                self._history = (list(ctx.messages), start)
                return
        observe.apply(self.policy.start_turn, state, turn_id=self._turn)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Fires around the whole run: its hooks' observations (``repeat_hooks.observe``, OpenTelemetry) belong
        to the run's ``conversation_id`` and the agent's ``name``. Returns the run's result unchanged."""
        agent = ctx.agent.name if ctx.agent is not None else None
        with scope(conversation_id=ctx.conversation_id, agent_name=agent):
            return await handler()

    # -- model calls ---------------------------------------------------------------------------------

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Fires before each model request: lets it happen (returns ``request_context``), or ends the run.

        At the run's first request, a tool named in the policy's ``limits``, ``exempt``, ``read_only`` or
        ``destructive`` that is none of the request's function tools nor of the agent's registered ones (a
        ``prepare`` may hide those until a later step: ``tools.registered``) raises ``GuardSetupError``
        (tools that join the run later, after its first request: ``RepeatGuard(check_tools=False)``). When
        the policy ends the turn: with text output, raises ``SkipModelRequest`` with the stop message as the response,
        so the run ends normally with ``result.output`` = the message; with structured output only,
        raises ``RepeatGuardStopped``.
        """
        self._run_state()  # on the agent's own instance (no for_run): fails loudly
        parameters = request_context.model_request_parameters
        known = {tool.name: tool for tool in parameters.function_tools}
        state = self._run_state(ctx, known.get)
        if self.check_tools and state.turn.responses == 0 and state.turn.stop is None:
            names = set(known) | (registered(ctx.tool_manager.toolset) if ctx.tool_manager is not None else set())
            with _as_setup_error():
                check_tool_names(self.policy, names, owner=OWNER)
        self._withdraw_denied(ctx)
        stop = observe.apply(self.policy.decide_model_call, state, turn_id=self._turn)
        if stop is None:
            self._watch().start()
            return request_context
        if self.on_stop == "output" and accepts_text(parameters):
            raise SkipModelRequest(stop_response(stop, self._turn))
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
        observe.apply(
            self.policy.record_model_call, state, seconds=self._watch().seconds(), cost_usd=cost, turn_id=self._turn
        )
        tools = {tool.name: tool for tool in request_context.model_request_parameters.function_tools}
        parts: list[ToolCallPart] = []
        calls: list[ToolCall] = []
        for part in response.parts:
            if not isinstance(part, ToolCallPart):
                continue
            tool = tools.get(part.tool_name)
            if tool is not None and tool.kind in DECIDED_KINDS:  # external calls are not the agent's to run
                parts.append(part)
                calls.append(tool_call(part, tool))
        decisions = observe.apply(self.policy.decide_tool_calls, state, calls, turn_id=self._turn)
        self._batch = {
            part.tool_call_id: (call, decision) for part, call, decision in zip(parts, calls, decisions, strict=True)
        }
        return stamp(response, self._turn)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Fires when calls wait for approval: an approval-required call its batch refused is approved here,
        so that ``wrap_tool_execute`` hands the model its refusal and no person is asked about a call that
        would not run. Returns those approvals, or ``None`` (every other call still goes to a person)."""
        self._run_state(ctx)
        refused = {
            call.tool_call_id: ToolApproved()
            for call in requests.approvals
            if (decided := self._batch.get(call.tool_call_id)) is not None
            and decided[0].name == call.tool_name
            and decided[1] is not None
        }
        return DeferredToolResults(approvals=dict(refused)) if refused else None

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
        request, refusal, _ = self._decision(ctx, call, tool_def)
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
        request, refusal, edited = self._decision(ctx, call, tool_def)
        if refusal is not None:
            returned: Any = refusal_return(refusal)
            return mark_edited(returned, request.arguments) if edited else returned
        try:
            result = await handler(args)
        except _CONTROL_FLOW:
            raise
        except Exception as error:
            self._record(ctx, request, ok=False, result=failure_view(error))
            raise
        failed = self.is_failure is not None and bool(self.is_failure(result))
        self._record(ctx, request, ok=not failed, result=model_view(result))
        return mark_edited(result, request.arguments) if edited else result

    # -- output ----------------------------------------------------------------------------------------

    async def wrap_output_process(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: Any,
        handler: WrapOutputProcessHandler,
    ) -> Any:
        """Fires around output processing (output functions and ``@agent.output_validator`` run in it): the
        guard's stop message never goes through them. A plain text output returns it as it is; an output
        function (``TextOutput(fn)``, a function in ``output_type``) raises ``RepeatGuardStopped`` instead."""
        stop = self._run_state(ctx).turn.stop
        if stop is None or not isinstance(output, str) or not stop.message.startswith(output):
            return await handler(output)
        if output != stop.message and not ctx.partial_output:
            return await handler(output)
        if output_context.has_function:
            raise RepeatGuardStopped(stop, ctx.messages)
        return output

    # -- helpers -------------------------------------------------------------------------------------

    def _run_state(self, ctx: RunContext[Any] | None = None, tools: ToolLookup | None = None) -> GuardState:
        """The run's state; a continued turn's is rebuilt from the history first, once the tools are known."""
        if self._history is not None and ctx is not None:
            messages, start = self._history
            self._history = None
            # the history's decisions were observed when first made: its state never listens, so none is told again
            rebuilt = rebuild(
                self.policy,
                messages,
                turn_id=self._turn,
                start=start,
                tools=tools or _prepared_tools(ctx),
                cost=self.cost,
                is_failure=self.is_failure,
            )
            self._state, self._batch = rebuilt.state, rebuilt.batch
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
    ) -> tuple[ToolCall, Refusal | None, bool]:
        """The call's ``ToolCall``, its decision (its batch's, else decided now, alone), and whether a person
        edited it.

        A call a person approved with other arguments (``ToolApproved(override_args=...)``: pydantic-ai runs
        it with them) is not the call its batch decided: that one is withdrawn (it counts as rejected), and the
        edited call is decided afresh, on its new arguments (its return is marked with them, ``mark_edited``,
        for a later resume to rebuild the same).
        """
        state = self._run_state(ctx)
        decided = self._batch.get(call.tool_call_id)
        if decided is not None and decided[0].name == call.tool_name:
            sent = call.args if call.args is not None else {}  # as ``tool_call`` reads them
            if not (ctx.tool_call_approved and sent != decided[0].arguments):
                return decided[0], decided[1], False
            observe.apply(self.policy.record_rejection, state, decided[0], turn_id=self._turn)
            del self._batch[call.tool_call_id]
            request = tool_call(call, tool_def)
            return request, observe.apply(self.policy.decide_tool_call, state, request, turn_id=self._turn), True
        request = tool_call(call, tool_def)
        return request, observe.apply(self.policy.decide_tool_call, state, request, turn_id=self._turn), False

    def _record(self, ctx: RunContext[Any], request: ToolCall, *, ok: bool, result: Any) -> None:
        observe.apply(
            self.policy.record_tool_result, self._run_state(), request, ok=ok, result=result, turn_id=self._turn
        )

    def _withdraw_denied(self, ctx: RunContext[Any]) -> None:
        """Calls of the last batch a person denied never ran: withdrawn, they count as rejected calls (the same
        call denied ``max_calls`` times is then refused, ``RefusalKind.REJECTED``, without asking again)."""
        if not self._batch or not ctx.messages:
            return
        for part in getattr(ctx.messages[-1], "parts", ()):
            if isinstance(part, ToolReturnPart) and part.outcome == "denied":
                decided = self._batch.get(part.tool_call_id)
                if decided is not None and decided[1] is None:
                    observe.apply(self.policy.record_rejection, self._run_state(), decided[0], turn_id=self._turn)
