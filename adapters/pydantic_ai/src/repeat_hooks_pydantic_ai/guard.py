"""``RepeatGuard``, the pydantic-ai capability that runs the ``Policy`` on an agent's runs, and its errors. README
"How it maps to pydantic-ai" walks through the SDK's code behind each hook."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_ai import capabilities as caps
from pydantic_ai import exceptions as errors
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec import conversation_id_from_run_id
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.output import OutputContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolApproved, ToolDefinition

import repeat_hooks
from repeat_hooks import GuardState, Policy, Refusal, StateStore, Stop, TokenPrices, ToolCall
from repeat_hooks.kit import (
    Clock,
    CostOf,
    Decided,
    Fail,
    FailureCheck,
    Feed,
    GuardCore,
    GuardStopped,
    OnStop,
    Stopwatch,
    common,
    monotonic,
)

from .calls import (
    FEEDS,
    Tools,
    asked,
    decided_calls,
    denied,
    failure_view,
    model_view,
    registered,
    rejected_unseen,
    tool_call,
    tools_of,
)
from .state import (
    Run,
    answered,
    as_return,
    last_turn,
    mark_edited,
    noted_part,
    rebuild,
    refused_part,
    stamp,
    stop_of,
    stop_response,
)

OWNER = "RepeatGuard"
NO_ANSWERS = (
    "a run ends at its first final result (End, pydantic_ai/_agent_graph.py:4302), and each run is a turn, so no "
    "answer repeats within one"
)
"""Why ``max_same_answers`` can never trip here."""
NO_CONVERSATION = (
    "RepeatGuard(store=...) keeps each conversation's counts under its conversation id, and this run names none: "
    "pass agent.run(..., conversation_id=...) (a run given its message_history= inherits it), or run it inside "
    "repeat_hooks.kit.request(conversation_id=...)"
)
_CONTROL_FLOW = (errors.CallDeferred, errors.ApprovalRequired, errors.SkipToolExecution)  # not outcomes


class GuardSetupError(repeat_hooks.GuardSetupError, errors.UserError):
    """The guard cannot work as set up (the message says the fix); also pydantic-ai's ``UserError``."""


class RepeatGuardStopped(GuardStopped, errors.AgentRunError):
    """The guard ended a run whose output cannot be its message (an output function, structured output only), or
    any with ``on_stop="raise"``. ``stop``: why, and what to tell the user; ``messages``: the run's messages so
    far (for ``message_history=``). An ``AgentRunError``: under Temporal it fails the workflow, not its task."""

    def __init__(self, stop: Stop, messages: Sequence[ModelMessage] = ()) -> None:
        super().__init__(stop)
        self.messages = list(messages)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.stop, self.messages)


def answer_with(
    ctx: RunContext[Any], request_context: ModelRequestContext, part: ToolReturnPart, new: ToolReturnPart
) -> None:
    """Put ``new`` in place of ``part`` in the request being sent, in the run's history (what later requests and
    ``all_messages()`` hold) and in this request's own copy of the messages."""
    for messages in (ctx.messages, request_context.messages):
        request = messages[-1] if messages else None
        if isinstance(request, ModelRequest) and any(p is part for p in request.parts):
            request.parts = [new if p is part else p for p in request.parts]


def accepts_text(parameters: ModelRequestParameters) -> bool:
    """``True`` when the run's output takes plain text (``str``, or a union with ``str``): the stop message fits."""
    mode = parameters.output_mode
    return mode == "text" or (mode == "tool" and parameters.allow_text_output)


@dataclass(init=False)
class RepeatGuard(AbstractCapability[Any]):
    """Stops a pydantic-ai agent calling the same tool over and over: ``Agent(model, capabilities=[RepeatGuard()])``.

    The common keywords (``repeat_hooks.kit.GuardCore``; ``clock``'s default gives way to a durability capability's
    run clock; ``store``: the states live in it under the run's ``conversation_id``, not under durable execution),
    the policy's settings as keywords, and pydantic-ai's own ``id``: the capability's id (one guard per agent).
    """

    id: str | None = "repeat_guard"  # a default in the class body: pydantic-ai hands two guards to ``combine``

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        store: StateStore | None = None,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        is_failure: FailureCheck | None = None,
        check_tools: bool = True,
        on_stop: OnStop | Literal["output"] = "reply",
        fail: Fail = "open",
        id: str | None = "repeat_guard",
        **settings: Any,
    ) -> None:
        if on_stop == "output":
            warnings.warn('RepeatGuard(on_stop="output") is deprecated: use on_stop="reply"', DeprecationWarning, 2)
        given = {**common(locals()), "on_stop": "reply" if on_stop == "output" else on_stop}
        self.core = GuardCore(
            policy,
            settings,
            owner=OWNER,
            feeds=FEEDS,
            why={Feed.ANSWERS: NO_ANSWERS},
            keywords=("id",),
            error=GuardSetupError,
            **given,
        )
        self.id = id
        self._run: Run | None = None

    @classmethod
    def from_spec(
        cls,
        policy: dict[str, Any] | Policy | None = None,
        *,
        cost: dict[str, float] | CostOf | None = None,
        **keywords: Any,
    ) -> RepeatGuard:
        """A ``RepeatGuard`` from an agent spec: the settings as keywords (or a ``policy`` mapping), ``cost`` as
        ``TokenPrices``' fields."""
        if isinstance(policy, dict):
            policy = Policy.model_validate(policy)
        if isinstance(cost, dict):
            cost = TokenPrices(**cost)
        return cls(policy, cost=cost, **keywords)

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[Any]]) -> AbstractCapability[Any]:
        """Two ``RepeatGuard`` on one agent would count every call twice: refused with ``GuardSetupError``."""
        raise GuardSetupError(
            f"RepeatGuard was given {len(capabilities)} times to one agent; give one RepeatGuard(Policy(...)) with "
            "all the settings (a run's capabilities=[RepeatGuard(...)] replaces the agent's)."
        )

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """With a store, the conversation id of a run that names none: one ``before_run`` tells from a named one."""
        return conversation_id_from_run_id(run_id) if self.core.store is not None else None

    @property
    def policy(self) -> Policy:
        return self.core.policy

    async def for_run(self, ctx: RunContext[Any]) -> RepeatGuard:
        """Fires once per run, before any hook: returns the run's own copy of the guard."""
        run = copy.copy(self)
        run._run = Run(Stopwatch(self.core.clock))
        return run

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Fires when the run starts: a run given a prompt starts a turn (``ctx.run_id``), one given none continues
        the history's. Returns nothing; raises ``GuardSetupError`` for a setup that cannot work."""
        run = self._active()
        steps, limits = self.policy.max_model_calls, ctx.usage_limits
        request_limit = limits.request_limit if limits is not None else None
        if request_limit is not None and steps is not None and request_limit <= steps:
            raise GuardSetupError(
                f"Policy(max_model_calls={steps}) can never trip: UsageLimits(request_limit={request_limit}) "
                "fails the run first; set max_model_calls below request_limit (the guard ends the run then)"
            )
        root = ctx.root_capability
        run_clock = root.get_run_clock() if root is not None else None
        if root is not None:
            guards: list[AbstractCapability[Any]] = []
            root.apply(lambda capability: guards.append(capability) if isinstance(capability, RepeatGuard) else None)
            if len(guards) > 1:  # different ids slip past ``combine``
                raise GuardSetupError(
                    f"this run has {len(guards)} RepeatGuard capabilities (ids {sorted(str(g.id) for g in guards)}); "
                    "give one RepeatGuard(Policy(...)) with all the settings"
                )
        if run_clock is not None and self.core.store is not None:
            raise GuardSetupError(
                "RepeatGuard(store=...) cannot run under durable execution: its hooks run in workflow code, which "
                "must do no I/O; leave store=None (the workflow's history replays the counts)"
            )
        if run_clock is not None and self.core.clock is monotonic:
            run.watch = Stopwatch(lambda: run_clock().timestamp())
        found, start = last_turn(ctx.messages) if ctx.prompt is None else (None, len(ctx.messages))
        resumed = found is not None or start < len(ctx.messages)
        run.turn_id, run.fresh = self.core.turn_id(found or ctx.run_id), not resumed
        if self.core.store is not None:  # a conversation id pydantic-ai made up for this run names none
            unnamed = ctx.conversation_id == conversation_id_from_run_id(str(ctx.run_id))
            run.key = self.core.conversation_id(None if unnamed else ctx.conversation_id)
            if run.key is None:
                raise GuardSetupError(NO_CONVERSATION)
        elif resumed:  # rebuilt at the first hook that knows the tools
            run.history = (list(ctx.messages), start)
            return
        turn_id = run.turn_id
        await self.core.update(
            self._where(ctx), lambda state: self.policy.start_turn(state, turn_id=turn_id), outage=None
        )

    async def wrap_run(self, ctx: RunContext[Any], *, handler: caps.WrapRunHandler) -> AgentRunResult[Any]:
        """Fires around the run: its observations name its conversation and agent. Returns the run's result."""
        with self.core.scope(self.core.conversation_id(ctx.conversation_id), ctx.agent and ctx.agent.name):
            return await handler()

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Fires before each model request: checks the tool names (a turn's first), records denied calls as
        rejected, and the calls pydantic-ai answered before any tool hook (a tool the agent lacks) as failed, its
        retry text the result; one the guard refused reaches the model as its refusal instead. With
        ``Policy(warn=True)``, a return whose call made next would be refused (``Policy.warning``, asked once every
        outcome of the response is recorded) reaches the model with the guard's note after it, in the history too
        (``noted_part``). Returns ``request_context``, or ends the run (``SkipModelRequest``,
        ``RepeatGuardStopped``)."""
        run = self._active()
        parameters = request_context.model_request_parameters
        tools = tools_of(parameters)
        where = self._where(ctx, tools.get)
        if run.fresh:
            run.fresh = False
            self.core.check_tool_names(
                {tool.name for tool in parameters.function_tools}
                | (registered(ctx.tool_manager.toolset) if ctx.tool_manager else set())
            )
        rejected, turn_id = denied(ctx.messages, tools.get), run.turn_id
        unseen = self._unseen(ctx, tools.get)
        returns = answered(ctx.messages, tools.get) if self.policy.warn else []

        def change(state: GuardState) -> tuple[Stop | None, list[Refusal | None], list[str | None]]:
            for call in rejected:
                self.policy.record_rejection(state, call, turn_id=turn_id)
            refusals: list[Refusal | None] = []
            for part, call, entry in unseen:  # decided with its batch, else alone (a store's resumed turn)
                refusal = self.policy.decide_tool_call(state, call, turn_id=turn_id) if entry is None else entry.refusal
                if refusal is None:
                    self.policy.record_tool_result(state, call, ok=False, result=part.content, turn_id=turn_id)
                refusals.append(refusal)
            stop = self.policy.decide_model_call(state, turn_id=turn_id)
            refused = {id(part) for (part, _, _), refusal in zip(unseen, refusals, strict=True) if refusal is not None}
            notes = [None if id(part) in refused else self.policy.warning(state, call) for part, call in returns]
            return stop, refusals, notes

        outage = [self.core.refused if entry is None else entry.refusal for _, _, entry in unseen]
        unnoted: list[str | None] = []  # the state could not be reached: no note
        stop, refusals, notes = await self.core.update(where, change, outage=(self.core.ended, outage, unnoted))
        for (part, _, _), refusal in zip(unseen, refusals, strict=True):
            if refusal is not None:
                answer_with(ctx, request_context, part, refused_part(part, refusal))
        for (part, _), note in zip(returns, notes, strict=False):
            if note is not None:
                answer_with(ctx, request_context, part, noted_part(part, note))
        if stop is None:
            run.watch.start()
            return request_context
        run.stop = stop
        if self.core.on_stop == "reply" and accepts_text(parameters):
            raise errors.SkipModelRequest(stop_response(stop, turn_id))
        raise RepeatGuardStopped(stop, ctx.messages)

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """Fires after each model attempt: records it, decides the response's calls (a name the agent has no tool by
        included) as one batch, written before any runs. Returns ``response`` stamped with its turn's id."""
        run = self._active()
        if run.stop is not None:
            return response
        tools = tools_of(request_context.model_request_parameters)
        calls = decided_calls(response, tools.get)
        seconds, cost, turn_id = run.watch.seconds(), self.core.cost_of(response.usage), run.turn_id

        def change(state: GuardState) -> list[Refusal | None]:
            self.policy.record_model_call(state, seconds=seconds, cost_usd=cost, turn_id=turn_id)
            return self.policy.decide_tool_calls(state, calls, turn_id=turn_id)

        decisions = await self.core.update(self._where(ctx, tools.get), change, outage=[self.core.refused] * len(calls))
        run.batch.decided(calls, decisions)
        return stamp(response, turn_id)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Fires when calls wait for approval: returns approvals of the refused ones (nobody is asked), or ``None``."""
        run = self._active()
        self._where(ctx)  # a continued turn's batch is rebuilt first
        refused = {
            call.tool_call_id: ToolApproved()
            for call in requests.approvals
            for entry in run.batch.calls
            if entry.model_id == call.tool_call_id and entry.call.name == call.tool_name and entry.refusal is not None
        }
        return DeferredToolResults(approvals=dict(refused)) if refused else None

    async def on_tool_validate_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: caps.RawToolArgs,
        error: ValidationError | errors.ModelRetry,
    ) -> caps.ValidatedToolArgs:
        """Fires when a call's arguments fail validation: records a failed call, re-raises ``error``; a refused
        call returns its arguments, for ``wrap_tool_execute`` to hand the model its refusal."""
        request, refusal, _ = await self._decision(ctx, call, tool_def)
        if refusal is not None:
            return args if isinstance(args, dict) else {}
        await self._record(ctx, request, False, failure_view(error))
        raise error

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: caps.ValidatedToolArgs,
        handler: caps.WrapToolExecuteHandler,
    ) -> Any:
        """Fires around each tool call: returns its refusal without running it, or runs it, records the outcome as
        the model reads it and returns the result (an exception goes on; deferrals record nothing)."""
        request, refusal, edited = await self._decision(ctx, call, tool_def)
        if refusal is not None:
            returned: Any = as_return(refusal)
            return mark_edited(returned, request.arguments) if edited else returned
        try:
            result = await handler(args)
        except _CONTROL_FLOW:
            raise
        except Exception as error:
            await self._record(ctx, request, False, failure_view(error))
            raise
        view = model_view(result)
        await self._record(ctx, request, self.core.ok(True, view), view)
        return mark_edited(result, request.arguments) if edited else result

    async def wrap_output_process(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: Any,
        handler: caps.WrapOutputProcessHandler,
    ) -> Any:
        """Fires around output processing: returns the stop message as it is, past output functions and
        validators (an output function's run raises ``RepeatGuardStopped``), or the handler's output."""
        stop = self._active().stop or stop_of(ctx.messages)
        if stop is None or not (isinstance(output, str) and stop.message.startswith(output)):
            return await handler(output)
        if output != stop.message and not ctx.partial_output:
            return await handler(output)
        if output_context.has_function:
            raise RepeatGuardStopped(stop, ctx.messages)
        return output

    def _unseen(self, ctx: RunContext[Any], tools: Tools) -> list[tuple[ToolReturnPart, ToolCall, Decided | None]]:
        """The calls pydantic-ai answered in the request being sent before any tool hook saw them (``rejected_unseen``),
        each with its batch decision (``None``: its batch is not in this run), taken once."""
        run = self._active()
        unseen: list[tuple[ToolReturnPart, ToolCall, Decided | None]] = []
        for part, asked_for in rejected_unseen(ctx.messages):
            entry = run.batch.find(part.tool_name, part.tool_call_id)
            if entry is not None and (entry.claimed or entry.settled):
                continue  # a hook or a rebuilt turn recorded it already
            if entry is not None:
                run.batch.settle(part.tool_name, part.tool_call_id, claimed=False)
                unseen.append((part, entry.call, entry))
            elif asked_for is not None:
                unseen.append((part, tool_call(asked_for, tools(asked_for.tool_name)), None))
        return unseen

    def _active(self) -> Run:
        if self._run is None:
            raise GuardSetupError(
                "RepeatGuard hook called on the agent's instance: pydantic-ai must call for_run() first "
                "(pass the RepeatGuard in Agent(capabilities=[...]) or run(capabilities=[...]))"
            )
        return self._run

    def _where(self, ctx: RunContext[Any], tools: Callable[[str], ToolDefinition | None] | None = None) -> str | Run:
        """Where the run's state is: its store key, or the run itself (a continued turn rebuilt first)."""
        run, manager = self._active(), ctx.tool_manager
        if run.key is None and run.history is not None:
            (messages, start), run.history = run.history, None
            known = manager.get_tool_def if manager is not None and manager.tools is not None else None
            run.state, run.batch = rebuild(self.policy, messages, run.turn_id, start, tools or known, self.core)
        return run.key or run

    async def _decision(
        self, ctx: RunContext[Any], call: ToolCallPart, tool_def: ToolDefinition
    ) -> tuple[ToolCall, Refusal | None, bool]:
        """The call, its decision (its batch's, else decided alone), and whether a person edited it (approved with
        ``override_args``: the batch's call counts as rejected, the edited one is decided afresh)."""
        run, where = self._active(), self._where(ctx)
        entry = run.batch.claim(call.tool_name, call.tool_call_id)
        sent = call.args if call.args is not None else {}  # as ``tool_call`` reads them
        if entry is not None and not (ctx.tool_call_approved and sent != entry.call.arguments):
            return entry.call, entry.refusal, False
        first = entry.call if entry else asked(ctx.messages, call, tool_def) if ctx.tool_call_approved else None
        request, turn_id, edited = tool_call(call, tool_def), run.turn_id, first is not None and sent != first.arguments

        def change(state: GuardState) -> Refusal | None:
            if edited and first is not None:  # the call the model asked for did not run: it counts as rejected
                self.policy.record_rejection(state, first, turn_id=turn_id)
            return self.policy.decide_tool_call(state, request, turn_id=turn_id)

        return request, await self.core.update(where, change, outage=self.core.refused), edited

    async def _record(self, ctx: RunContext[Any], request: ToolCall, ok: bool, result: Any) -> None:
        turn_id = self._active().turn_id
        await self.core.update(
            self._where(ctx),
            lambda state: self.policy.record_tool_result(state, request, ok=ok, result=result, turn_id=turn_id),
            outage=None,
        )
