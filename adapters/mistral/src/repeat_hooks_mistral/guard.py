"""``StopRepeatedCalls``: the repeat-hooks loop guard as a Mistral Agents SDK ``agents.Hook``.

A user writes a named subclass whose settings are class variables, in its body::

    class ParcelGuard(StopRepeatedCalls):
        policy = Policy(match="tool", max_calls=2, max_refusals=3)

The hook object itself holds nothing: rc11 rebuilds hooks per hook point (``local_runtime()``), per
activity (deployed workers), and refuses hooks with instance attributes in ``to_workflow()``. The
counters live in ``store``, one ``GuardState`` per session, and every hook call is one atomic
``store.update`` that runs one of the core's pure rules with the SDK's ``turn_id``. Settings written
anywhere else raise at once (``settings``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from mistralai.agents import agents
from mistralai.vibe.harness.app_server.session import ContentBlock
from mistralai.vibe.harness.app_server.session import TextContentBlock as SessionText
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
from mistralai.vibe_agents.sdk.transport.results import RunResult, run_one_turn

from repeat_hooks import GuardEvent, GuardState, MemoryStore, Policy, StateStore, Stop

from . import replies, settings
from .calls import cost_usd, succeeded, tool_call, tool_result
from .delivery import delivery_id
from .outage import OUTAGES, STORE_DOWN_REFUSAL, STORE_DOWN_STOP, StoreDownStop

logger = logging.getLogger("repeat_hooks_mistral")

T = TypeVar("T")

DEFAULT_MAX_SESSIONS = 1024
"""Sessions the default in-process store keeps per guard class (least recently used forgotten first)."""


class _ClassStore(MemoryStore):
    """The in-process store a guard class gets when it names none: shared by every instance of that class.

    Keeps ``DEFAULT_MAX_SESSIONS`` sessions; the first time it forgets one it logs a warning, since a
    session forgotten while it is still live starts its counts again from zero.
    """

    def __init__(self, owner: str) -> None:
        super().__init__(max_sessions=DEFAULT_MAX_SESSIONS)
        self.owner = owner

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        evictions = self.evictions
        result = self.update_now(key, change)
        if evictions == 0 and self.evictions:
            logger.warning(
                "repeat_hooks_mistral: %s's in-process store keeps %d sessions and has begun forgetting the "
                "least recently used; a live session it forgets counts from zero again. Set "
                "store = MemoryStore(max_sessions=...) on the class, or a shared store (RedisStore)",
                self.owner,
                self.max_sessions,
            )
        return result


class StopRepeatedCalls(agents.Hook, metaclass=settings.GuardClass):
    """Refuse a tool call repeated past ``policy``'s limit; end the turn when the model keeps going.

    Subclass it and set the class variables in the class body; nowhere else (a hook object, ``self``,
    a ``Policy`` field as a class variable, ``policy`` changed later): those raise ``TypeError`` at
    once. Do not override ``to_unified_state`` (the deployed build refuses it). Every instance of a
    class shares its ``store``, keyed by ``state_name`` and ``ctx.session.id``; ``ctx.session.turn_id``
    starts a fresh count each turn.

    Hook points: ``pre_tool_call`` (count, refuse), ``post_tool_call`` (record each result and failure),
    ``pre_llm_call`` (end the turn), ``post_llm_call`` (count model calls and their cost). A class
    offers rc11 only those its policy needs (``settings.hook_points``), since rc11 makes each one a
    step of its loop; a subclass may override any of them and call ``super()``, at any depth.
    Every method returns the SDK's own result, never ``None``. Read what happened with
    ``last_stop(session_id)`` and ``events(session_id)``, or run a turn with ``run(agent, text)``.
    """

    policy: ClassVar[Policy] = Policy()
    """The limits (the core's pydantic settings). Fixed when the class is made: to change it, subclass."""
    store: ClassVar[StateStore]
    """Where each session's counters live. Default: this class's own in-process
    ``MemoryStore(max_sessions=1024)``: it keeps the 1024 most recently used sessions, forgets the
    least recently used one first (with a warning the first time), and removes nothing else, ended
    sessions included. Bigger or smaller: ``store = MemoryStore(max_sessions=100_000)``. Several
    processes serving one session need a shared store (``RedisStore``). Subclasses share a store they
    inherit when it was set explicitly; a default store is never shared."""
    state_name: ClassVar[str]
    """The name the class's states are stored under (``{state_name}:{session_id}``). Default: the class's
    ``module.qualname`` (``parcel_app.ParcelGuard``), the name rc11 rebuilds the hook by in a worker.
    Set it when processes import the class under different module names (a script run as ``__main__``
    in one, imported in another). Two live guard classes with one ``state_name`` raise ``TypeError``."""
    fail_closed: ClassVar[bool] = False
    """When the store fails: ``False`` (default) logs the error and lets the call or turn go on;
    ``True`` refuses the tool call and ends the turn instead (``last_stop`` then returns a
    ``StoreDownStop`` in the process that ended it)."""
    usd_per_million_input_tokens: ClassVar[float] = 0.0
    """Price of input tokens, so ``policy.max_cost_usd`` can count the usage rc11 records per model call."""
    usd_per_million_output_tokens: ClassVar[float] = 0.0
    """Price of output tokens (see ``usd_per_million_input_tokens``)."""

    def __init__(self, *, tools: Sequence[Any] = (), **misplaced: Any) -> None:
        """A hook object for ``agents.Harness(hooks=[...])``; it takes no settings (they are class variables)."""
        for name, value in misplaced.items():
            raise TypeError(settings.instance_setting_message(type(self).__name__, name, value))
        super().__init__(tools=tools)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in settings.SETTINGS or name in settings.POLICY_FIELDS:
            raise TypeError(settings.instance_setting_message(type(self).__name__, name, value))
        super().__setattr__(name, value)

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
        """Fires after a tool ran (not after a refused one): records its result and whether it failed.

        Returns ``PostToolCallHookContinue`` with the tool's result unchanged.
        """
        guard = type(self)
        delivery = delivery_id()
        tool = tool_call(result.tool_call, None)
        ok = succeeded(result.tool_result)
        returned = tool_result(result.tool_result)
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def record(state: GuardState) -> None:
            # Deployed, the outcome is an activity of its own: deduplicated by that activity's identity.
            policy.record_tool_result(state, tool, ok, turn_id, delivery, result=returned)

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
                OUTAGES.note(guard.state_key(ctx.session.id), turn_id)
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
        """The session's counters as last stored (a copy, for reading), or ``None`` if it made no call.

        Raises ``StoreUnavailable`` (or the store's own error) when the store cannot be read.
        """
        return await cls.store.load(cls.state_key(session_id))

    @classmethod
    async def last_stop(cls, session_id: str, turn_id: str | None = None) -> Stop | StoreDownStop | None:
        """Why and with what message the guard ended a turn of the session, or ``None`` if it did not.

        rc11 drops the message a hook ends a turn with, so a turn the guard ended comes back
        ``completed`` with empty text: read the stop here. Without ``turn_id``, the latest turn's;
        with it, that turn's (while its stop event is among the last 64 kept).

        A turn this process ended because the store failed (``fail_closed = True``) reads as a
        ``StoreDownStop`` (``reason == "store_unavailable"``, ``message == STORE_DOWN_STOP``) without
        touching the store, until the session's next hook call that reaches the store. Any other read
        while the store is down raises the store's error (``StoreUnavailable``): the guard cannot know.
        """
        down = OUTAGES.stop(cls.state_key(session_id), turn_id)
        if down is not None:
            return down
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
    async def run(
        cls, agent: agents.Agent, content: str | Sequence[ContentBlock]
    ) -> tuple[RunResult[None], Stop | StoreDownStop | None]:
        """``agent.run(content)`` that also returns the guard's stop: ``result, stop = await G.run(agent, text)``.

        ``Agent.run()`` closes its session and returns no session id, so the stop of a turn the guard
        ended (which rc11 drops) could not be read afterwards. This runs the one turn in a new session
        of ``agent`` (as ``Agent.run`` does), reads ``last_stop``, then closes the session. Returns the
        SDK's ``RunResult`` and the stop, ``None`` if the guard did not end the turn.
        """
        blocks = [SessionText(text=content)] if isinstance(content, str) else list(content)
        async with await agent.create_session() as session:
            result = await run_one_turn(session, blocks)
            stop = await cls.last_stop(session.session_id)
        return result, stop

    @classmethod
    async def _update(cls, ctx: HookContext, change: Callable[[GuardState], T]) -> T:
        key = cls.state_key(ctx.session.id)
        result = await cls.store.update(key, change)
        OUTAGES.clear(key)
        return result


def _turn_id(ctx: HookContext) -> str | None:
    return ctx.session.turn_id or None


def _configure(guard: type[StopRepeatedCalls]) -> None:
    """Check a guard class's body, name its states, and give it its own store unless it names or
    inherits one. Which hook points rc11 sees is decided on access, by ``settings.GuardClass``."""
    settings.check_class_body(guard)
    if "state_name" not in guard.__dict__:
        type.__setattr__(guard, "state_name", settings.default_state_name(guard))
    settings.claim_state_name(guard)
    inherited = getattr(guard, "store", None)
    if "store" not in guard.__dict__ and (inherited is None or type(inherited) is _ClassStore):
        type.__setattr__(guard, "store", _ClassStore(guard.__name__))
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


settings.implement(StopRepeatedCalls)
_configure(StopRepeatedCalls)
hook_points = settings.hook_points

__all__ = ["STORE_DOWN_REFUSAL", "STORE_DOWN_STOP", "StopRepeatedCalls", "StoreDownStop", "hook_points"]
