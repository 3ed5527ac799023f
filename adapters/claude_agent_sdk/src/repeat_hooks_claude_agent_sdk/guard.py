"""``RepeatGuardHooks``: the guard as Claude Agent SDK hooks, run with the transport (``stream``) that shows them each
model response; and the adapter's errors. How each hook maps onto Claude Code, with the SDK's facts: the adapter
README, "How it maps to the Claude Agent SDK"."""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import claude_agent_sdk as sdk
from claude_agent_sdk import ClaudeAgentOptions, HookJSONOutput, HookMatcher
from claude_agent_sdk.types import HookEvent

import repeat_hooks
from repeat_hooks import GuardState, MemoryStore, Policy, Refusal, RefusalKind, StateStore, Stop, ToolCall
from repeat_hooks.kit import Clock, CostOf, Decided, Fail, FailureCheck, GuardCore, GuardStopped, OnStop, common
from repeat_hooks.stop_rules import Feed

from .calls import allow, deny, result_view
from .state import session_key, stop_of
from .stream import Flight, GuardedTransport

logger = logging.getLogger("repeat_hooks_claude_agent_sdk")

STREAM_WAIT = 5.0
"""Seconds a sub-agent's ``PreToolUse`` waits for its block to stream (then it is decided alone, as a deferred call)."""
NO_TRANSPORT = (
    "repeat-hooks: RepeatGuardHooks cannot see which model response this call belongs to: run the agent with "
    "guard.query(prompt=..., options=...) or guard.client(options), or pass options=guard.options(options) "
    "and transport=guard.transport(options) to the SDK. The call was not run and the turn ends."
)
NO_CLOCK = (
    "Claude Code reports no model-call time to its hooks; bound a turn by its model calls (max_model_calls), "
    "Claude Code's own ClaudeAgentOptions(max_turns=...), or a timeout of your own around the query"
)

GuardSetupError = repeat_hooks.GuardSetupError
"""A setup mistake: raised at construction, or out of the query when the CLI lists its tools."""


class RepeatGuardStopped(GuardStopped, sdk.ClaudeSDKError):
    """The guard ended a turn, with ``on_stop="raise"``: raised out of the query (or the client's
    ``receive_response``) at the turn's result, in place of its ``ResultMessage``. ``stop`` says why."""


class RepeatGuardHooks:
    """The loop guard for the Claude Agent SDK: ``guard.query(prompt=..., options=...)`` or ``guard.client(options)``;
    one guard serves any number of sessions and queries at once. The common keywords (``repeat_hooks.kit.core``):
    ``policy`` (or its settings; tool names are Claude Code's: ``mcp__<server>__<tool>``, ``Bash``...), ``store``
    (default: a ``MemoryStore``; one state per session id), ``cost`` (of a response's usage as Claude Code streams it),
    ``is_failure``, ``check_tools``, ``on_stop`` (``"raise"``: ``RepeatGuardStopped`` out of the query at the stopped
    turn's result), ``fail`` (``None``: ``"open"``); ``clock`` is refused (no model-call time reaches a hook). 0.2's
    ``fail_closed=True`` / ``False`` is ``fail="closed"`` / ``"open"``."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        store: StateStore | None = None,
        cost: CostOf | None = None,
        clock: Clock | None = None,
        is_failure: FailureCheck | None = None,
        check_tools: bool = True,
        on_stop: OnStop = "reply",
        fail: Fail | None = None,
        **settings: Any,
    ) -> None:
        if "fail_closed" in settings:  # 0.2's
            closed = settings.pop("fail_closed")
            implied: Fail = "closed" if closed else "open"
            if not isinstance(closed, bool) or fail not in (None, implied):
                given = f"fail_closed={closed!r}" + ("" if fail is None else f" and fail={fail!r}")
                raise GuardSetupError(f"RepeatGuardHooks got {given}: give only fail='open' or fail='closed'")
            message = f'RepeatGuardHooks(fail_closed=...) is deprecated: use fail="{implied}"'
            warnings.warn(message, DeprecationWarning, 2)
            fail = implied
        fail = fail or "open"
        store = self.store = store if store is not None else MemoryStore()
        """Where each session's state lives (``state.session_key``)."""
        spend = "ClaudeAgentOptions(max_budget_usd=...)"
        how = {Feed.COST: f"RepeatGuardHooks(..., cost=TokenPrices(...)), or use Claude Code's own {spend}"}
        why = {Feed.SECONDS: NO_CLOCK}
        self.core = GuardCore(policy, settings, owner="RepeatGuardHooks", how=how, why=why, **common(locals()))
        self.policy: Policy = self.core.policy
        self.flights: OrderedDict[str, Flight] = OrderedDict()  # see stream.Guarded
        self.results: OrderedDict[str, tuple[str, str | None]] = OrderedDict()

    def hooks(self, extra: Mapping[HookEvent, list[HookMatcher]] | None = None) -> dict[HookEvent, list[HookMatcher]]:
        """The ``hooks=`` of ``ClaudeAgentOptions``: the guard's, then ``extra`` (your own: Claude Code runs one
        event's matchers concurrently, so a hook of yours that denies a call the guard let through leaves it counted
        as run). ``extra`` that holds this guard's hooks already is kept as it is; another guard's raises."""
        extra = dict(extra or {})
        owners = {getattr(hook, "repeat_guard", None) for ms in extra.values() for m in ms for hook in m.hooks}
        if owners - {None, self}:
            raise GuardSetupError(
                "these ClaudeAgentOptions hold another RepeatGuardHooks' hooks already: one guard per options "
                "object (give each guard the options without the other's hooks)"
            )
        if self in owners:
            return extra
        ours: dict[HookEvent, list[HookMatcher]] = {
            "UserPromptSubmit": [HookMatcher(hooks=[self._hook(self.on_user_prompt_submit)])],
            "PreToolUse": [HookMatcher(hooks=[self._hook(self.on_pre_tool_use)])],
            "PostToolUse": [HookMatcher(hooks=[self._hook(self.on_post_tool_use)])],
            "PostToolUseFailure": [HookMatcher(hooks=[self._hook(self.on_post_tool_use_failure)])],
        }
        for event, matchers in extra.items():
            ours[event] = [*ours.get(event, []), *matchers]
        return ours

    def options(self, options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """``options`` (default: ``ClaudeAgentOptions()``) with the guard's hooks added to its own."""
        options = options if options is not None else ClaudeAgentOptions()
        return replace(options, hooks=self.hooks(options.hooks))

    def transport(
        self, options: ClaudeAgentOptions | None = None, *, inner: sdk.Transport | None = None
    ) -> sdk.Transport:
        """The transport to pass the SDK with ``options``: the SDK's own subprocess transport to the CLI (or
        ``inner``, used as it is), watched by the guard. One per query or client. With ``cost``, it turns on the
        CLI's partial messages (for each response's output tokens), hidden unless ``include_partial_messages``."""
        options = options if options is not None else ClaudeAgentOptions()
        if inner is None:
            from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

            partial = options.include_partial_messages or self.core.cost is not None
            asks = options.permission_prompt_tool_name or ("stdio" if options.can_use_tool else None)  # as query()
            configured = replace(options, include_partial_messages=partial, permission_prompt_tool_name=asks)
            inner = SubprocessCLITransport(prompt="", options=configured)
        return GuardedTransport(inner, self, RepeatGuardStopped, options.include_partial_messages)

    def query(self, *, prompt: str, options: ClaudeAgentOptions | None = None) -> AsyncIterator[sdk.Message]:
        """The SDK's ``query()`` with the guard: its hooks in ``options``, its transport."""
        return sdk.query(prompt=prompt, options=self.options(options), transport=self.transport(options))

    def client(self, options: ClaudeAgentOptions | None = None) -> sdk.ClaudeSDKClient:
        """The SDK's ``ClaudeSDKClient`` with the guard (``async with guard.client(options) as client: ...``)."""
        return sdk.ClaudeSDKClient(options=self.options(options), transport=self.transport(options))

    async def stop_of(
        self, returned: sdk.ResultMessage | str, /, turn_id: str | None = None, *, agent_id: str | None = None
    ) -> Stop | None:
        """``stop_of(returned, guard=self, turn_id=..., agent_id=...)``: how the guard ended that turn, or ``None``."""
        return await stop_of(returned, guard=self, turn_id=turn_id, agent_id=agent_id)

    async def on_user_prompt_submit(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires when a user prompt starts a turn: fresh per-turn counts, unless its turn is already the current one
        (the same ``prompt_id`` again, or a retried request's ``request(turn_id=...)``). Returns ``{}``."""
        session = str(event["session_id"])
        key, turn_id = self.core.conversation_id(session) or session, self.core.turn_id(event.get("prompt_id"))
        flight = self.flights.get(session)
        if flight is not None:
            async with flight.lock:
                if turn_id is not None and turn_id == flight.turn_id:
                    return allow()
                flight.start(turn_id, key)
        await self.core.update(key, lambda state: self.core.policy.start_turn(state, turn_id=turn_id), outage=None)
        return allow()

    async def on_pre_tool_use(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires before each tool call: ``{}`` lets it go on (Claude Code's permissions still apply); a deny hands the
        model the refusal's text in place of the tool's result, and ends the turn (``continue_: False``) at a stop."""
        main = self.flights.get(str(event["session_id"]))
        if main is None or main.broken is not None:
            text = NO_TRANSPORT if main is None else f"repeat-hooks: {main.broken}"
            logger.error("repeat_hooks_claude_agent_sdk: %s", text)
            return deny(text, text)
        key, turn_id, flight = self._agent_of(event, main)
        name, tool_use_id, arguments = _called(event)
        async with flight.lock:
            if flight.stop is not None:  # the turn ended at an earlier call of its response
                return deny(flight.stop.message, flight.stop.message)
            entry = await flight.claim(name, tool_use_id, arguments, wait=0.0 if flight is main else STREAM_WAIT)
            # Not streamed here: a deferred call delivered again on resume, its decision in the store.
            refusal, stop = await self._decide(key, turn_id, flight, entry or flight.call(name, tool_use_id, arguments))
        if stop is not None:
            return deny(stop.message if refusal is None else refusal.message, stop.message)
        if refusal is None:
            return allow()
        return deny(refusal.message, refusal.message if refusal.reason is RefusalKind.TURN_ENDED else None)

    async def on_post_tool_use(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires after a tool ran and succeeded (unless ``is_failure`` of what the model reads says otherwise): its
        outcome and result, recorded when the next model response comes. Returns ``{}``."""
        await self._outcome(event, ok=True, result=result_view(event.get("tool_response")))
        return allow()

    async def on_post_tool_use_failure(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires after a tool failed (it raised, or an MCP tool answered ``isError``): the failure and its error text,
        recorded when the next model response comes. Returns ``{}`` (Claude Code ignores ``continue: false`` here)."""
        await self._outcome(event, ok=False, result=event.get("error"))
        return allow()

    async def _decide(
        self, key: str, turn_id: str | None, flight: Flight, entry: Decided | ToolCall
    ) -> tuple[Refusal | None, Stop | None]:
        """Decide a streamed call (``entry``); at a new response, first record the previous one (its calls' outcomes;
        a model call, with its cost) and check the stop rules (Claude Code has no hook before a model call). A refusal
        that reaches ``max_refusals`` ends the turn there, its response counted as a model call first."""
        policy, previous, outcomes = self.core.policy, flight.current, flight.pending
        call, new = (entry.call, entry.tag != previous) if isinstance(entry, Decided) else (entry, False)
        unran = [e.call for e in flight.batch.calls if e.tag == previous and e.claimed and not (e.settled or e.refusal)]
        if isinstance(entry, Decided) and new:
            flight.pending = []
            flight.next_response(entry.tag)

        def cost(response: str | None) -> float:
            usage = flight.usage.get(response or "")
            return self.core.cost_of(usage) if usage is not None else 0.0

        def decide(state: GuardState) -> tuple[Refusal | None, Stop | None]:
            if new:
                for done, ok, result in outcomes:
                    policy.record_tool_result(state, done, ok=ok, result=result, turn_id=turn_id)
                for skipped in unran:  # let through, but Claude Code's permissions (or your hook) did not run it
                    policy.record_rejection(state, skipped, turn_id=turn_id)
                if previous is not None:
                    policy.record_model_call(state, cost_usd=cost(previous), turn_id=turn_id)
                stop = policy.decide_model_call(state, turn_id=turn_id)
                if stop is not None:
                    return None, stop
            refusal = policy.decide_tool_call(state, call, turn_id=turn_id)
            limit = policy.max_refusals
            if refusal is None or refusal.reason is RefusalKind.TURN_ENDED or limit is None:
                return refusal, None
            if state.turn.refused_responses < max(1, limit):
                return refusal, None
            policy.record_model_call(state, cost_usd=cost(flight.current), turn_id=turn_id)
            return refusal, policy.decide_model_call(state, turn_id=turn_id)

        outage: tuple[Refusal | None, Stop | None] = (self.core.refused, None)
        refusal, stop = await self.core.update(key, decide, outage=outage)
        if isinstance(entry, Decided):
            entry.refusal = refusal
        flight.stop = stop
        return refusal, stop

    async def _outcome(self, event: Mapping[str, Any], *, ok: bool, result: Any) -> None:
        main = self.flights.get(str(event["session_id"]))
        if main is None:
            return
        key, turn_id, flight = self._agent_of(event, main)
        name, tool_use_id, arguments = _called(event)
        ok = self.core.ok(ok, result)
        entry = flight.batch.settle(name, tool_use_id, arguments)
        if entry is not None:
            flight.pending.append((entry.call, ok, result))
            return
        call = flight.call(name, tool_use_id, arguments)
        await self.core.update(
            key,
            lambda state: self.core.policy.record_tool_result(state, call, ok=ok, result=result, turn_id=turn_id),
            outage=None,
        )

    def _agent_of(self, event: Mapping[str, Any], main: Flight) -> tuple[str, str | None, Flight]:
        """Whose call a tool hook is about: the store key, turn id and flight of the session's main agent, or of the
        sub-agent its ``agent_id`` names (a state of its own; its turn is its run)."""
        session = str(event["session_id"])
        key, agent_id = self.core.conversation_id(session) or session, event.get("agent_id")
        if isinstance(agent_id, str) and agent_id:
            return session_key(key, agent_id), agent_id, main.agent(agent_id)
        return key, self.core.turn_id(event.get("prompt_id")), main

    def _hook(self, method: Callable[[Mapping[str, Any]], Awaitable[HookJSONOutput]]) -> sdk.HookCallback:
        async def callback(event: sdk.HookInput, tool_use_id: str | None, context: sdk.HookContext) -> HookJSONOutput:
            # For the observers: the conversation, and the agent type (of a sub-agent, or of a session run with --agent)
            with self.core.scope(self.core.conversation_id(event.get("session_id")), event.get("agent_type")):
                return await method(event)

        callback.__name__ = method.__name__
        callback.repeat_guard = self  # type: ignore[attr-defined]  # whose hook it is: one guard per options
        return callback


def _called(event: Mapping[str, Any]) -> tuple[str, str, Any]:
    """A tool hook's call: the tool's name, the call's id (``""``: none) and its arguments."""
    return str(event["tool_name"]), str(event.get("tool_use_id") or ""), event.get("tool_input")
