"""``StopRepeatedCalls``: the repeat-hooks loop guard as a Mistral Agents SDK ``agents.Hook``.

A user writes a named subclass whose settings are class variables::

    class ParcelGuard(StopRepeatedCalls):
        policy = Policy(match="tool", max_calls=2, max_refusals=3)

The hook object itself holds nothing: rc11 rebuilds hooks per hook point (``local_runtime()``), per
activity (deployed workers), and refuses hooks with instance attributes in ``to_workflow()``. The
counters live in ``store``, one ``GuardState`` per session, and every hook call is one atomic
``store.update`` that runs one of the core's pure rules with the SDK's ``turn_id``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from mistralai.agents import agents
from mistralai.vibe.harness.runtime.capabilities import (
    PostLlmCallHookAccept,
    PostLlmCallHookInvocation,
    PostLlmCallHookReject,
    PostLlmCallHookRetry,
    PostToolCallHookContinue,
    PostToolCallHookInvocation,
    PreLlmCallHookContinue,
    PreLlmCallHookInvocation,
    PreLlmCallHookSkip,
    PreToolCallHookContinue,
    PreToolCallHookInvocation,
    PreToolCallHookSkip,
)
from mistralai.vibe_agents.sdk.authoring.contracts import HookContext

from repeat_hooks import GuardEvent, GuardState, MemoryStore, Policy, StateStore, Stop

from . import replies
from .calls import cost_usd, succeeded, tool_call
from .delivery import delivery_id

logger = logging.getLogger("repeat_hooks_mistral")

T = TypeVar("T")

STORE_DOWN_REFUSAL = (
    "Refused: the loop guard could not read this turn's calls, so no tool may run now. "
    "Do not call tools again: answer with what you know."
)
"""What the model reads for a tool call refused because the store failed (``fail_closed = True``)."""
STORE_DOWN_STOP = "I stopped: the loop guard could not read this turn's calls. Try again later."
"""The stop a failed store ends the turn with (``fail_closed = True``); logged, since rc11 drops it."""


class _ClassStore(MemoryStore):
    """The in-process store a guard class gets when it names none: shared by every instance of that class."""


class StopRepeatedCalls(agents.Hook):
    """Refuse a tool call repeated past ``policy``'s limit; end the turn when the model keeps going.

    Subclass it and set the class variables; do not give it instance attributes or override
    ``to_unified_state`` (the deployed build refuses both). Every instance of a class shares its
    ``store``, keyed by ``ctx.session.id``; ``ctx.session.turn_id`` starts a fresh count each turn.

    Hook points: ``pre_tool_call`` (count, refuse), ``post_tool_call`` (record failures),
    ``pre_llm_call`` (end the turn), ``post_llm_call`` (count model calls and their cost). A subclass
    takes only those its policy needs (``hook_points``): rc11 makes each one a step of its loop.
    Every method returns the SDK's own result, never ``None``. Read what happened with
    ``last_stop(session_id)`` and ``events(session_id)``.
    """

    policy: ClassVar[Policy] = Policy()
    """The limits (the core's pydantic settings). Default: same tool + same arguments, the 3rd refused."""
    store: ClassVar[StateStore]
    """Where each session's counters live. Default: an in-process ``MemoryStore`` for this class; use a
    shared store (e.g. ``RedisStore``) when several processes serve one session."""
    state_name: ClassVar[str]
    """The name the class's states are stored under (``{state_name}:{session_id}``). Default: the class's
    ``__qualname__``. It must be the same in every process that serves or reads a session, whatever
    module name the process imported the class under."""
    fail_closed: ClassVar[bool] = False
    """When the store fails: ``False`` (default) logs the error and lets the call or turn go on;
    ``True`` refuses the tool call and ends the turn instead."""
    usd_per_million_input_tokens: ClassVar[float] = 0.0
    """Price of input tokens, so ``policy.max_cost_usd`` can count the usage rc11 records per model call."""
    usd_per_million_output_tokens: ClassVar[float] = 0.0
    """Price of output tokens (see ``usd_per_million_input_tokens``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _configure(cls)

    # -- hook points -----------------------------------------------------------------------------

    async def pre_tool_call(
        self, ctx: HookContext, call: PreToolCallHookInvocation
    ) -> PreToolCallHookContinue | PreToolCallHookSkip:
        """Fires before each tool call, also those made inside ``run_typescript``: counts the call.

        Returns ``PreToolCallHookContinue`` (the tool runs with the model's arguments), or
        ``PreToolCallHookSkip`` whose reason is the refusal text the model gets as the tool message.
        """
        guard = type(self)
        tool = tool_call(call.tool_call, delivery_id())
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def check(state: GuardState) -> str | None:
            refusal = policy.check_tool_call(state, tool, turn_id)
            return None if refusal is None else refusal.message

        try:
            refusal = await guard._update(ctx, check)
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.pre_tool_call could not update its store", guard.__name__)
            return replies.refuse_tool(STORE_DOWN_REFUSAL) if guard.fail_closed else replies.run_tool(call)
        return replies.run_tool(call) if refusal is None else replies.refuse_tool(refusal)

    async def post_tool_call(self, ctx: HookContext, result: PostToolCallHookInvocation) -> PostToolCallHookContinue:
        """Fires after a tool ran (not after a refused one): records whether it failed.

        Returns ``PostToolCallHookContinue`` with the tool's result unchanged.
        """
        guard = type(self)
        delivery = delivery_id()
        tool = tool_call(result.tool_call, None)
        ok = succeeded(result.tool_result)
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def record(state: GuardState) -> None:
            # Deployed, the outcome is an activity of its own: deduplicated by that activity's identity.
            policy.record_tool_result(state, tool, ok, turn_id, delivery)

        try:
            await guard._update(ctx, record)
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.post_tool_call could not update its store", guard.__name__)
        return replies.keep_result(result)

    async def pre_llm_call(
        self, ctx: HookContext, invocation: PreLlmCallHookInvocation
    ) -> PreLlmCallHookContinue | PreLlmCallHookSkip:
        """Fires before each model call: ends the turn once a limit tripped.

        Returns ``PreLlmCallHookContinue``, or ``PreLlmCallHookSkip`` carrying the stop message. rc11
        drops that message (the turn ends ``completed`` with empty text): read it with ``last_stop``.
        """
        del invocation
        guard = type(self)
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def check(state: GuardState) -> Stop | None:
            return policy.check_model_call(state, turn_id)

        try:
            stop = await guard._update(ctx, check)
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.pre_llm_call could not update its store", guard.__name__)
            if guard.fail_closed:
                logger.warning("repeat_hooks_mistral: %s ended the turn: %s", guard.__name__, STORE_DOWN_STOP)
                return replies.end_turn(STORE_DOWN_STOP)
            return replies.call_model()
        return replies.call_model() if stop is None else replies.end_turn(stop.message)

    async def post_llm_call(
        self, ctx: HookContext, invocation: PostLlmCallHookInvocation
    ) -> PostLlmCallHookAccept | PostLlmCallHookRetry | PostLlmCallHookReject:
        """Fires after each model call: counts it, with its cost from the recorded token usage.

        Returns ``PostLlmCallHookAccept`` with the model's reply unchanged. rc11 records no latency
        here, so the time spent is counted as 0 (``policy.max_model_seconds`` cannot trip).
        """
        guard = type(self)
        delivery = delivery_id()
        turn_id = _turn_id(ctx)
        policy = guard.policy
        cost = cost_usd(
            invocation.candidate.usage,
            guard.usd_per_million_input_tokens,
            guard.usd_per_million_output_tokens,
        )

        def record(state: GuardState) -> None:
            policy.record_model_call(state, 0.0, cost, delivery, turn_id)

        try:
            await guard._update(ctx, record)
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.post_llm_call could not update its store", guard.__name__)
        return replies.keep_answer()

    # -- reading what happened --------------------------------------------------------------------

    @classmethod
    def state_key(cls, session_id: str) -> str:
        """The store key of a session's state: ``state_name`` and the session id."""
        return f"{cls.state_name}:{session_id}"

    @classmethod
    async def load_state(cls, session_id: str) -> GuardState | None:
        """The session's counters as last stored (a copy, for reading), or ``None`` if it made no call."""
        return await cls.store.load(cls.state_key(session_id))

    @classmethod
    async def last_stop(cls, session_id: str, turn_id: str | None = None) -> Stop | None:
        """Why and with what message the guard ended a turn of the session, or ``None`` if it did not.

        rc11 drops the message a hook ends a turn with, so a turn the guard ended comes back
        ``completed`` with empty text: read the stop here. Without ``turn_id``, the latest turn's;
        with it, that turn's (while its stop event is among the last 64 kept).
        """
        state = await cls.load_state(session_id)
        if state is None:
            return None
        return state.stop if turn_id is None else state.stop_of(turn_id)

    @classmethod
    async def events(cls, session_id: str) -> list[GuardEvent]:
        """The session's refusals and stops, oldest first (the last 64, across turns)."""
        state = await cls.load_state(session_id)
        return [] if state is None else list(state.events)

    @classmethod
    async def _update(cls, ctx: HookContext, change: Callable[[GuardState], T]) -> T:
        return await cls.store.update(cls.state_key(ctx.session.id), change)


def _turn_id(ctx: HookContext) -> str | None:
    return ctx.session.turn_id or None


def hook_points(policy: Policy) -> dict[str, bool]:
    """Which hook points ``policy`` needs. rc11 runs a hook point only if the class overrides it, and
    each one adds a step to every model or tool call of the loop, so the guard takes only these."""
    budgets = policy.max_model_calls is not None or policy.max_model_seconds is not None
    budgets = budgets or policy.max_cost_usd is not None
    failures = not policy.count_failures or policy.max_errors_in_a_row is not None
    stops = budgets or policy.max_refusals is not None or policy.max_errors_in_a_row is not None
    return {"pre_tool_call": True, "post_tool_call": failures, "pre_llm_call": stops, "post_llm_call": budgets}


def _configure(guard: type[StopRepeatedCalls]) -> None:
    """Check a guard class's settings, give it its own store unless it names or inherits one, and
    bind only the hook points its policy needs."""
    if not isinstance(guard.policy, Policy):
        raise TypeError(f"{guard.__name__}.policy must be a repeat_hooks.Policy, got {type(guard.policy).__name__}")
    if "state_name" not in guard.__dict__:
        guard.state_name = guard.__qualname__
    inherited = guard.__dict__.get("store", getattr(guard, "store", None))
    if "store" not in guard.__dict__ and (inherited is None or type(inherited) is _ClassStore):
        guard.store = _ClassStore()
    elif not isinstance(guard.store, StateStore):
        raise TypeError(f"{guard.__name__}.store must be a repeat_hooks.StateStore, got {type(guard.store).__name__}")
    if guard is not StopRepeatedCalls:
        for point, needed in hook_points(guard.policy).items():
            ours, unbound = StopRepeatedCalls.__dict__[point], getattr(agents.Hook, point)
            if point in guard.__dict__ or getattr(guard, point) not in (ours, unbound):
                continue  # the user's own method: keep it
            setattr(guard, point, ours if needed else unbound)
    if guard.policy.max_model_seconds is not None:
        warnings.warn(
            f"{guard.__name__}.policy.max_model_seconds never trips under mistralai-agents 1.1: the SDK records "
            "no model latency at post_llm_call, and the guard does not time calls itself",
            stacklevel=3,
        )
    no_prices = guard.usd_per_million_input_tokens == 0 and guard.usd_per_million_output_tokens == 0
    if guard.policy.max_cost_usd is not None and no_prices:
        warnings.warn(
            f"{guard.__name__}.policy.max_cost_usd needs usd_per_million_input_tokens / "
            "usd_per_million_output_tokens: the SDK records tokens, not dollars",
            stacklevel=3,
        )


_configure(StopRepeatedCalls)

__all__ = ["STORE_DOWN_REFUSAL", "STORE_DOWN_STOP", "StopRepeatedCalls", "hook_points"]
