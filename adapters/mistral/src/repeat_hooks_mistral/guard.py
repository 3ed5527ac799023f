"""``RepeatGuardHook``: the loop guard as an rc11 ``agents.Hook``; ``StopRepeatedCalls``, seed 004's guard.

A named subclass holds the settings as class variables and one ``GuardCore`` (``core``); a hook object holds
nothing (rc11 rebuilds hooks from their class). Each hook call is one ``core.update`` of its session's state.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from mistralai.agents import agents
from mistralai.vibe.harness.app_server.session import ContentBlock, SessionClient
from mistralai.vibe.harness.app_server.session import TextContentBlock as SessionText
from mistralai.vibe.harness.core.protocol import TextContentBlock
from mistralai.vibe.harness.runtime import capabilities as rc11
from mistralai.vibe_agents.sdk.authoring.contracts import HookContext
from mistralai.vibe_agents.sdk.transport.results import RunResult, run_one_turn

from repeat_hooks import GuardSetupError, GuardState, Policy, StateStore, Stop, kit

from . import settings
from .calls import agent_of, delivery_id, model_view, noted, succeeded, tool_call

logger = logging.getLogger("repeat_hooks_mistral")

T = TypeVar("T")


class RepeatGuardStopped(kit.GuardStopped):
    """The guard ended a turn of ``Guard.run`` with ``on_stop = "raise"``; ``stop`` says why. (rc11's own run
    error, ``TurnFailedError``, is built from a protocol error, so it is no base here.)"""


class RepeatGuardHook(agents.Hook, metaclass=settings.GuardClass):
    """Refuse a tool call repeated past ``policy``'s limit; end the turn when the model keeps going.

    ``hooks=[RepeatGuardHook()]`` guards with ``Policy()``; for other settings, subclass it and set them in the
    class body. A subclass may override any hook point and call ``super()``.
    """

    policy: ClassVar[Policy] = Policy()
    """The limits; fixed when the class is made (rc11 takes the hook points it needs then): subclass to change it."""
    store: ClassVar[StateStore]
    """Where each session's state lives; default: the class's own in-process store of 1024 sessions."""
    state_name: ClassVar[str]
    """The states' key prefix (``{state_name}:{session_id}``); default ``module.qualname``, unique per process."""
    cost: ClassVar[kit.CostOf | None] = None
    """The US dollars of one model call from the token usage rc11 records (``TokenPrices(3, 15)``)."""
    clock: ClassVar[kit.Clock | None] = None
    """Refused when set: rc11 records no model latency (``post_llm_call`` carries token usage only)."""
    is_failure: ClassVar[kit.FailureCheck | None] = None
    """Says a call failed from what the model reads of its result (beyond rc11's own ``ToolFailureResult``)."""
    check_tools: ClassVar[bool] = True
    """Check the tool names in the policy against the agent's tools, at its first hook call."""
    on_stop: ClassVar[kit.OnStop] = "reply"
    """``"raise"``: ``Guard.run`` raises ``RepeatGuardStopped``; a turn run otherwise ends as with ``"reply"``."""
    fail: ClassVar[kit.Fail] = "open"
    """The store fails: ``"open"``, go on (logged); ``"closed"``, refuse the call, end the turn."""
    core: ClassVar[kit.GuardCore]
    """The kit's ``GuardCore``, built from the settings above."""
    _requests: ClassVar[dict[str, kit.Request]] = {}
    """The ``kit.request`` a ``Guard.run`` was called in, by rc11 session id while it runs (rc11's tasks do not
    see the caller's context)."""

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
        settings.configure(cls)

    # -- hook points -----------------------------------------------------------------------------

    async def pre_tool_call(
        self, ctx: HookContext, call: rc11.PreToolCallHookInvocation
    ) -> rc11.PreToolCallHookContinue | rc11.PreToolCallHookSkip:
        """Fires before each tool call (also those made in ``run_typescript``): decides and counts it. Returns
        ``PreToolCallHookContinue`` (it runs), or ``PreToolCallHookSkip`` (the model reads the refusal instead)."""
        guard = type(self)
        guard._check_tools(ctx)
        tool, policy = tool_call(call.tool_call, call_id=delivery_id()), guard.core.policy
        refusal = await guard._update(
            ctx, lambda state, turn: policy.decide_tool_call(state, tool, turn_id=turn), outage=guard.core.refused
        )
        if refusal is None:
            return rc11.PreToolCallHookContinue(effective_arguments=call.tool_call.call.arguments)
        return rc11.PreToolCallHookSkip(reason=[TextContentBlock(text=refusal.message)])

    async def post_tool_call(
        self, ctx: HookContext, result: rc11.PostToolCallHookInvocation
    ) -> rc11.PostToolCallHookContinue:
        """Fires after a tool ran (not a refused one): records its outcome and its result as the model reads it.
        Returns ``PostToolCallHookContinue`` with the result unchanged, or, with ``Policy(warn=True)`` when the same
        call made next would be refused (``Policy.warning``), with the guard's note as a text block after its
        content: rc11 hands the model the result this hook returns. What is recorded is the tool's own result."""
        guard = type(self)
        core, delivery, tool = guard.core, delivery_id(), tool_call(result.tool_call)
        view = model_view(result.tool_result)
        ok = core.ok(succeeded(result.tool_result), view)

        def record(state: GuardState, turn: str | None) -> str | None:
            core.policy.record_tool_result(state, tool, ok=ok, result=view, turn_id=turn, delivery_id=delivery)
            return core.policy.warning(state, tool)

        note = await guard._update(ctx, record, outage=None)
        returned = result.tool_result if note is None else noted(result.tool_result, note)
        return rc11.PostToolCallHookContinue(tool_result=returned)

    async def pre_llm_call(
        self, ctx: HookContext, invocation: rc11.PreLlmCallHookInvocation
    ) -> rc11.PreLlmCallHookContinue | rc11.PreLlmCallHookSkip:
        """Fires before each model call: ends the turn once a limit tripped. Returns ``PreLlmCallHookContinue``, or
        ``PreLlmCallHookSkip`` with the stop message (which rc11 drops: read it with ``stop_of``)."""
        guard = type(self)
        guard._check_tools(ctx)
        policy = guard.core.policy
        stop = await guard._update(
            ctx, lambda state, turn: policy.decide_model_call(state, turn_id=turn), outage=guard.core.ended
        )
        if stop is None:
            return rc11.PreLlmCallHookContinue()
        return rc11.PreLlmCallHookSkip(reason=[TextContentBlock(text=stop.message)])

    async def post_llm_call(
        self, ctx: HookContext, invocation: rc11.PostLlmCallHookInvocation
    ) -> rc11.PostLlmCallHookAccept | rc11.PostLlmCallHookRetry | rc11.PostLlmCallHookReject:
        """Fires after each model call: counts it, with the ``cost`` of its token usage. Returns
        ``PostLlmCallHookAccept``: the guard never rewrites what the model said."""
        guard = type(self)
        core, delivery = guard.core, delivery_id()
        cost = core.cost_of(invocation.candidate.usage)

        def record(state: GuardState, turn: str | None) -> None:
            core.policy.record_model_call(state, cost_usd=cost, turn_id=turn, delivery_id=delivery)

        await guard._update(ctx, record, outage=None)
        return rc11.PostLlmCallHookAccept()

    # -- running a turn ------------------------------------------------------------------------------

    @classmethod
    def state_key(cls, session_id: str) -> str:
        """The store key of a session's (or a named conversation's) state: ``state_name`` and its id."""
        return f"{cls.state_name}:{session_id}"

    @classmethod
    async def run(
        cls, target: agents.Agent | SessionClient, content: str | Sequence[ContentBlock]
    ) -> tuple[RunResult[None], Stop | None]:
        """Run one turn of ``target`` (a session from ``agent.create_session()``, or an agent: a new session,
        closed afterwards) and return rc11's ``RunResult`` and how the guard ended the turn (``None``: it did not;
        else ``result.text`` is the stop message). A ``repeat_hooks.kit.request(conversation_id=..., turn_id=...)``
        around it names the turn; ``on_stop = "raise"`` raises ``RepeatGuardStopped`` instead of returning a stop."""
        if not isinstance(target, SessionClient):
            async with await target.create_session() as session:
                return await cls.run(session, content)
        asked, session_id, core = kit.current_request(), target.session_id, cls.core
        if asked.conversation_id or asked.turn_id:
            cls._requests[session_id] = asked
        try:
            result = await run_one_turn(target, [SessionText(text=content)] if isinstance(content, str) else content)
        finally:
            cls._requests.pop(session_id, None)
        turns = target.state.turns
        turn_id = asked.turn_id or (turns.items[-1].id if turns is not None and turns.items else None)
        try:
            stop = await core.stop_of(cls.state_key(asked.conversation_id or session_id), turn_id)
        except Exception:
            if core.fail == "closed":
                raise
            logger.warning("repeat_hooks_mistral: %s could not read the turn's stop", cls.__name__, exc_info=True)
            stop = None
        if stop is not None and not result.text:
            result = dataclasses.replace(result, text=stop.message)
        if stop is not None and (stopped := core.stopped(stop, RepeatGuardStopped)):
            raise stopped
        return result, stop

    @classmethod
    async def _update(cls, ctx: HookContext, verb: Callable[[GuardState, str | None], T], *, outage: T) -> T:
        """``verb`` (given the turn id) on the session's state, in one ``core.update``, named as the caller named
        it (``Guard.run`` in a ``request``) or by rc11's own ids, never by a context rc11's task happens to hold."""
        asked, core, session = cls._requests.get(ctx.session.id) or kit.Request(), cls.core, ctx.session
        with kit.request(conversation_id=asked.conversation_id or session.id, turn_id=asked.turn_id or session.turn_id):
            conversation, turn = core.conversation_id(session.id) or "", core.turn_id(session.turn_id)
            with core.scope(conversation, agent_of(ctx.harness)[0]):
                return await core.update(cls.state_key(conversation), lambda state: verb(state, turn), outage=outage)

    @classmethod
    def _check_tools(cls, ctx: HookContext) -> None:
        """Raise ``GuardSetupError`` if the policy names a tool the agent lacks (``group.tool``: listed at run time)."""
        names = agent_of(ctx.harness)[1]
        if names is not None and cls.core.check_tools:
            policy = cls.core.policy
            named_tools = policy.read_only | policy.destructive | policy.exempt | set(policy.limits)
            cls.core.check_tool_names((*names, *(name for name in named_tools if "." in name)))


settings.configure(RepeatGuardHook)


class StopRepeatedCalls(RepeatGuardHook):
    """Seed 004's guard, as its readers write it (``hooks=[StopRepeatedCalls()]``): per tool, 2 calls a turn run;
    from the 3rd each is refused with a message the model reads; after 3 refusals the turn ends; a new turn
    counts afresh. Subclass it for a store or a price."""

    policy = Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)


__all__ = ["GuardSetupError", "RepeatGuardHook", "RepeatGuardStopped", "StopRepeatedCalls"]
