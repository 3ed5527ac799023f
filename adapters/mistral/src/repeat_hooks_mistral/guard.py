"""``RepeatGuardHook``: the repeat-hooks loop guard as a Mistral Agents SDK ``agents.Hook``.

A user writes a named subclass whose settings are class variables, in its body::

    class ParcelGuard(RepeatGuardHook):
        policy = Policy(match="tool", max_calls=2, max_refusals=3)

The hook object itself holds nothing: rc11 rebuilds hooks per hook point (``local_runtime()``), per
activity (deployed workers), and refuses hooks with instance attributes in ``to_workflow()``. The
counters live in ``store``, one ``GuardState`` per session (``state``), and every hook call is one atomic
``store.update`` that runs one of the core's verbs with the SDK's ``turn_id``. Settings written anywhere
else raise at once (``settings``).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from mistralai.agents import agents
from mistralai.vibe.harness.app_server.session import ContentBlock, SessionClient
from mistralai.vibe.harness.app_server.session import TextContentBlock as SessionText
from mistralai.vibe.harness.core.protocol import TextContentBlock
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

from repeat_hooks import GuardSetupError, GuardState, Policy, StateStore, Stop
from repeat_hooks.kit import check_feeds, check_tool_names
from repeat_hooks.observe import scope
from repeat_hooks.stop_rules import Feed

from . import settings
from .calls import agent_tool_names, delivery_id, model_view, succeeded, tool_call
from .state import OUTAGES, STORE_DOWN_REFUSAL, STORE_DOWN_STOP, ClassStore, StoreDownStop, stop_of

logger = logging.getLogger("repeat_hooks_mistral")

T = TypeVar("T")


class Cost(Protocol):
    """The core's ``CostOf`` as a class setting: the US dollars of one model call's usage (``TokenPrices(3, 15)``).

    A protocol rather than ``Callable``, so that a type checker does not take the class variable for a method.
    """

    def __call__(self, usage: Any, /) -> float: ...


class RepeatGuardHook(agents.Hook, metaclass=settings.GuardClass):
    """Refuse a tool call repeated past ``policy``'s limit; end the turn when the model keeps going.

    ``agents.Harness(hooks=[RepeatGuardHook()])`` guards with the default ``Policy()``. For other
    settings, subclass it and set the class variables in the class body; nowhere else (a hook object,
    ``self``, a ``Policy`` field as a class variable, ``policy`` changed later): those raise ``TypeError``
    at once. Do not override ``to_unified_state`` (the deployed build refuses it). Every instance of a
    class shares its ``store``, keyed by ``state_name`` and ``ctx.session.id``; ``ctx.session.turn_id``
    starts a fresh count each turn.

    Hook points: ``pre_tool_call`` (decide and count the call; refuse it), ``post_tool_call`` (record
    each outcome and what the model reads of its result), ``pre_llm_call`` (end the turn),
    ``post_llm_call`` (count model calls and their ``cost``). A class offers rc11 only those its policy
    needs (``Policy.hook_points``), since rc11 makes each one a step of its loop; a subclass may override
    any of them and call ``super()``, at any depth. Every method returns the SDK's own result, never
    ``None``. Read what happened with ``stop_of(Guard, session_id)`` / ``read_state(Guard, session_id)``,
    or run a turn with ``Guard.run(agent_or_session, text)``.

    A setup that could not work raises ``GuardSetupError`` when the class is made (a budget nothing
    feeds: ``max_model_seconds``, or ``max_cost_usd`` without ``cost``), or at the agent's first hook
    call (a tool named in ``limits`` / ``exempt`` / ``read_only`` / ``destructive`` that is none of the
    agent's tools).
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
    ``True`` refuses the tool call and ends the turn instead (``stop_of`` then returns a
    ``StoreDownStop`` in the process that ended it)."""
    cost: ClassVar[Cost | None] = None
    """The US dollars of one model call from the token usage rc11 records for it (``TokenPrices(3, 15)``),
    so that ``policy.max_cost_usd`` can trip; ``None``: model calls cost nothing."""

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
        """Fires before each tool call, also those made inside ``run_typescript``: decides and counts it.

        rc11 starts the ``pre_tool_call`` of every call of one model response before it runs any of them
        (they may run concurrently), so no result of a response can restart another call's count.

        Returns ``PreToolCallHookContinue`` (the tool runs with the model's arguments), or
        ``PreToolCallHookSkip`` whose reason is the refusal text the model gets as the tool message.
        """
        guard = type(self)
        guard._check_tool_names(ctx)
        tool = tool_call(call.tool_call, call_id=delivery_id())
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def decide(state: GuardState) -> str | None:
            refusal = policy.decide_tool_call(state, tool, turn_id=turn_id)
            return None if refusal is None else refusal.message

        try:
            refusal = await guard._update(ctx, decide)
        except GuardSetupError:  # a setup mistake (a digest_key other than the session's) is no outage
            raise
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.pre_tool_call could not update its store", guard.__name__)
            return _refuse_tool(STORE_DOWN_REFUSAL) if guard.fail_closed else _run_tool(call)
        return _run_tool(call) if refusal is None else _refuse_tool(refusal)

    async def post_tool_call(self, ctx: HookContext, result: PostToolCallHookInvocation) -> PostToolCallHookContinue:
        """Fires after a tool ran (not after a refused one): records whether it failed, and its result as
        the model reads it (``calls.model_view``: never the SDK's wrapper, ids or ``_meta``).

        Returns ``PostToolCallHookContinue`` with the tool's result unchanged.
        """
        guard = type(self)
        delivery = delivery_id()
        tool = tool_call(result.tool_call)
        ok = succeeded(result.tool_result)
        view = model_view(result.tool_result)
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def record(state: GuardState) -> None:
            # Deployed, the outcome is an activity of its own: de-duplicated by that activity's identity.
            policy.record_tool_result(state, tool, ok=ok, result=view, turn_id=turn_id, delivery_id=delivery)

        try:
            await guard._update(ctx, record)
        except GuardSetupError:  # a setup mistake (a digest_key other than the session's) is no outage
            raise
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.post_tool_call could not update its store", guard.__name__)
        return PostToolCallHookContinue(tool_result=result.tool_result)

    async def pre_llm_call(
        self, ctx: HookContext, invocation: PreLlmCallHookInvocation
    ) -> PreLlmCallHookContinue | PreLlmCallHookSkip:
        """Fires before each model call: ends the turn once a limit tripped.

        Returns ``PreLlmCallHookContinue``, or ``PreLlmCallHookSkip`` carrying the stop message. rc11
        drops that message (the turn ends ``completed`` with empty text): read it with ``stop_of``.
        """
        del invocation
        guard = type(self)
        guard._check_tool_names(ctx)
        turn_id = _turn_id(ctx)
        policy = guard.policy

        def decide(state: GuardState) -> Stop | None:
            return policy.decide_model_call(state, turn_id=turn_id)

        try:
            stop = await guard._update(ctx, decide)
        except GuardSetupError:  # a setup mistake (a digest_key other than the session's) is no outage
            raise
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.pre_llm_call could not update its store", guard.__name__)
            if guard.fail_closed:
                OUTAGES.note(guard.state_key(ctx.session.id), turn_id)
                logger.warning("repeat_hooks_mistral: %s ended the turn: %s", guard.__name__, STORE_DOWN_STOP)
                return _end_turn(STORE_DOWN_STOP)
            return PreLlmCallHookContinue()
        return PreLlmCallHookContinue() if stop is None else _end_turn(stop.message)

    async def post_llm_call(
        self, ctx: HookContext, invocation: PostLlmCallHookInvocation
    ) -> PostLlmCallHookAccept | PostLlmCallHookRetry | PostLlmCallHookReject:
        """Fires after each model call: counts it, with its ``cost`` from the token usage rc11 recorded.

        Returns ``PostLlmCallHookAccept`` with the model's reply unchanged: the guard never rewrites what
        the model said. rc11 records no latency here, so the time is counted as 0 (a ``max_model_seconds``
        is refused when the class is made).
        """
        guard = type(self)
        delivery = delivery_id()
        turn_id = _turn_id(ctx)
        policy = guard.policy
        cost = 0.0 if guard.cost is None else guard.cost(invocation.candidate.usage)

        def record(state: GuardState) -> None:
            policy.record_model_call(state, cost_usd=cost, turn_id=turn_id, delivery_id=delivery)

        try:
            await guard._update(ctx, record)
        except GuardSetupError:  # a setup mistake (a digest_key other than the session's) is no outage
            raise
        except Exception:
            logger.exception("repeat_hooks_mistral: %s.post_llm_call could not update its store", guard.__name__)
        return PostLlmCallHookAccept()

    # -- running a turn, reading what happened ---------------------------------------------------------

    @classmethod
    def state_key(cls, session_id: str) -> str:
        """The store key of a session's state: ``state_name`` and the session id."""
        return f"{cls.state_name}:{session_id}"

    @classmethod
    async def run(
        cls, target: agents.Agent | SessionClient, content: str | Sequence[ContentBlock]
    ) -> tuple[RunResult[None], Stop | StoreDownStop | None]:
        """Run one turn and return ``(result, stop)``: the SDK's ``RunResult`` and the guard's stop of the turn.

        ``target`` is an agent (the turn runs in a new session, closed afterwards, as ``Agent.run`` does:
        ``Agent.run()`` itself returns no session id, so the stop could not be read afterwards) or a
        session from ``agent.create_session()`` (the turn is that session's next). rc11 drops the message
        a hook ends a turn with; when the guard ended the turn, ``result.text`` is its stop message (the
        model wrote nothing), and ``stop`` says why. ``stop`` is ``None`` when the guard did not end it.
        """
        blocks = [SessionText(text=content)] if isinstance(content, str) else list(content)
        if isinstance(target, SessionClient):
            return await cls._run_in(target, blocks)
        async with await target.create_session() as session:
            return await cls._run_in(session, blocks)

    @classmethod
    async def _run_in(
        cls, session: SessionClient, blocks: list[ContentBlock]
    ) -> tuple[RunResult[None], Stop | StoreDownStop | None]:
        result = await run_one_turn(session, blocks)
        turns = session.state.turns
        turn_id = turns.items[-1].id if turns is not None and turns.items else None
        stop = await stop_of(cls, session.session_id, turn_id)
        if stop is not None and not result.text:
            result = dataclasses.replace(result, text=stop.message)
        return result, stop

    @classmethod
    async def _update(cls, ctx: HookContext, change: Callable[[GuardState], T]) -> T:
        key = cls.state_key(ctx.session.id)
        # What the verb decides is observed (repeat_hooks.observe, OpenTelemetry) as the session's, and the agent's.
        with scope(conversation_id=ctx.session.id, agent_name=_agent_name(ctx)):
            result = await cls.store.update(key, change)
        OUTAGES.clear(key)
        return result

    @classmethod
    def _check_tool_names(cls, ctx: HookContext) -> None:
        """Raise ``GuardSetupError`` if the policy names a tool the agent does not have (once per tool list)."""
        names = agent_tool_names(ctx.harness)
        if names is None:
            return
        checked = _CHECKED.setdefault(cls, set())
        if names in checked:
            return
        policy = cls.policy
        named = policy.read_only | policy.destructive | policy.exempt | set(policy.limits)
        discovered = {name for name in named if "." in name}  # another group's tools: known only at run time
        check_tool_names(policy, (*names, *discovered), owner=cls.__name__)
        if len(checked) < _MAX_CHECKED:
            checked.add(names)


_CHECKED: weakref.WeakKeyDictionary[type, set[tuple[str, ...]]] = weakref.WeakKeyDictionary()
"""The agents' tool lists each guard class has checked its policy against."""
_MAX_CHECKED = 64


def _turn_id(ctx: HookContext) -> str | None:
    return ctx.session.turn_id or None


def _agent_name(ctx: HookContext) -> str | None:
    """The agent's ``name`` (``agents.Agent(name=...)``), from the harness definition; ``None`` if it holds none."""
    name = getattr(getattr(ctx.harness, "agent_config", None), "name", None)
    return name if isinstance(name, str) and name else None


def _run_tool(call: PreToolCallHookInvocation) -> PreToolCallHookContinue:
    return PreToolCallHookContinue(effective_arguments=call.tool_call.call.arguments)


def _refuse_tool(message: str) -> PreToolCallHookSkip:
    """The tool does not run: the model gets ``message`` as its tool message (rc11 rejects an empty one)."""
    return PreToolCallHookSkip(reason=[TextContentBlock(text=message)])


def _end_turn(message: str) -> PreLlmCallHookSkip:
    """The model call is skipped and the turn ends (rc11 drops ``message``; the store keeps the stop)."""
    return PreLlmCallHookSkip(reason=[TextContentBlock(text=message)])


def _configure(guard: type[RepeatGuardHook]) -> None:
    """Check a guard class's body and what its policy needs, name its states, and give it its own store
    unless it names or inherits one. Which hook points rc11 sees is decided on access, by ``settings.GuardClass``."""
    settings.check_class_body(guard)
    check_feeds(
        guard.policy,
        can={Feed.OUTCOMES, Feed.MODEL_CALLS} | ({Feed.COST} if guard.cost is not None else set()),
        owner=guard.__name__,
        how={Feed.COST: f"class {guard.__name__}(RepeatGuardHook): cost = TokenPrices(...)"},
        why={Feed.SECONDS: "rc11 records no model latency"},
    )
    if "state_name" not in guard.__dict__:
        type.__setattr__(guard, "state_name", settings.default_state_name(guard))
    settings.claim_state_name(guard)
    inherited = getattr(guard, "store", None)
    if "store" not in guard.__dict__ and (inherited is None or type(inherited) is ClassStore):
        type.__setattr__(guard, "store", ClassStore(guard.__name__))


settings.implement(RepeatGuardHook)
_configure(RepeatGuardHook)

__all__ = ["RepeatGuardHook"]
