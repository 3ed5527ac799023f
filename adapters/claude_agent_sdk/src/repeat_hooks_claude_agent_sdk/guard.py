"""``RepeatGuardHooks``: the guard as Claude Agent SDK hooks, run with the transport (``stream``) that shows them each
model response; and the adapter's errors. How each hook maps onto Claude Code, with the SDK's facts: the adapter
README, "How it maps to the Claude Agent SDK"."""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, cast

import claude_agent_sdk as sdk
from claude_agent_sdk import ClaudeAgentOptions, HookJSONOutput, HookMatcher
from claude_agent_sdk.types import HookEvent

import repeat_hooks
from repeat_hooks import GuardState, MemoryStore, Policy, Refusal, RefusalKind, StateStore, Stop, ToolCall
from repeat_hooks.kit import FEEDS, Clock, CostOf, Decided, Fail, FailureCheck, GuardCore, GuardStopped, OnStop, common
from repeat_hooks.stop_rules import Feed

from .calls import allow, deny, note, result_view, warned
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
NO_ANSWERS = "a text answer ends the query, and each query is a turn (claude_agent_sdk/client.py receive_response)"
"""Why ``max_same_answers`` cannot be fed: no two answers of the model ever come in one turn."""

POST_TOOL_BATCH = cast(HookEvent, "PostToolBatch")
"""Claude Code's hook after a response's calls have all resolved, before the next model call (CLI 2.1.332; the SDK
0.2.189 types its output, ``PostToolBatchHookSpecificOutput``, but not the event in ``HookEvent``)."""

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
        why = {Feed.SECONDS: NO_CLOCK, Feed.ANSWERS: NO_ANSWERS}
        feeds = (*FEEDS, Feed.WARNINGS)  # a warning: PostToolUse's additionalContext, read after the call's result
        self.core = GuardCore(
            policy, settings, owner="RepeatGuardHooks", feeds=feeds, how=how, why=why, **common(locals())
        )
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
            POST_TOOL_BATCH: [HookMatcher(hooks=[self._hook(self.on_post_tool_batch)])],
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
        """Fires after a tool ran and succeeded, before the model reads its result: its outcome (a failure if
        ``is_failure`` of what the model reads says so) and result, recorded when its response's calls have all
        resolved (``on_post_tool_batch``). Returns ``{}``; with ``Policy(warn=True)``, when the same call made next
        would be refused, the warning as ``additionalContext``, which the model reads right after this result."""
        note = await self._outcome(event, ok=True, result=result_view(event.get("tool_response")))
        return warned("PostToolUse", note)

    async def on_post_tool_use_failure(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires after a tool failed (it raised, or an MCP tool answered ``isError``), before the model reads its
        error: the failure and its error text, recorded as ``on_post_tool_use`` records a success. Returns ``{}``, or
        the warning as ``additionalContext`` (read right after the error); Claude Code ignores ``continue: false``
        here."""
        note = await self._outcome(event, ok=False, result=event.get("error"))
        return warned("PostToolUseFailure", note)

    async def on_post_tool_batch(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires once every call of a model response has resolved, before the next model call. Claude Code answers a
        call of a tool it does not have itself (``No such tool available: <name>``), with no ``PreToolUse`` and no
        ``PostToolUseFailure``: such a call (one of the batch no ``PreToolUse`` claimed) is decided here as any call
        is, and, if not refused, recorded as failed with the error text the model read. Then the response is over:
        its calls' outcomes are recorded, and the response as a model call (with its cost), and the stop rules the
        core checks before a model call decide the next one (``max_errors_in_a_row``, ``max_model_calls``,
        ``max_cost_usd``). Returns ``{}``; for a refusal of such a call, its text as ``additionalContext`` (the model
        reads it after Claude Code's error, in the batch's last tool result), and so for the warning of one that
        failed (``Policy(warn=True)``: it has no ``PostToolUse`` to carry it); at a stop, ``continue_: False`` with the
        stop message as ``stopReason``: the turn ends here, with no further model call
        (``terminal_reason="hook_stopped"``; Claude Code puts the reason in the conversation itself)."""
        main = self.flights.get(str(event["session_id"]))
        if main is None or main.broken is not None:
            text = NO_TRANSPORT if main is None else f"repeat-hooks: {main.broken}"
            logger.error("repeat_hooks_claude_agent_sdk: %s", text)
            return note(text, text)
        key, turn_id, flight = self._agent_of(event, main)
        notes: list[str] = []
        failed: list[ToolCall] = []
        ends: str | None = None
        async with flight.lock:
            if flight.stop is not None:  # ended at a call of this response already
                return note(None, flight.stop.message)
            for called in event.get("tool_calls") or []:
                name, tool_use_id, arguments = _called(called)
                entry = await flight.unhooked(name, tool_use_id, arguments, wait=0.0 if flight is main else STREAM_WAIT)
                if entry is None:
                    continue
                refusal, stop = await self._decide(key, turn_id, flight, entry)
                if refusal is not None:
                    notes.append(refusal.message)
                    ends = refusal.message if refusal.reason is RefusalKind.TURN_ENDED else None
                elif stop is None:  # it ran as far as Claude Code runs it: it failed, with the error text
                    entry.settled = True
                    flight.pending.append((entry.call, False, called.get("tool_response")))
                    failed.append(entry.call)
                if stop is not None:
                    ends = stop.message
                if ends is not None:
                    break
            if ends is None and flight.current is not None and flight.recorded != flight.current:
                stop, warnings = await self._end_response(key, turn_id, flight, failed)
                notes += warnings
                ends = None if stop is None else stop.message
        return note("\n\n".join(notes) or None, ends)

    async def _end_response(
        self, key: str, turn_id: str | None, flight: Flight, warn: list[ToolCall]
    ) -> tuple[Stop | None, list[str]]:
        """The current response's calls have all resolved (its ``PostToolBatch``): record it (its calls' outcomes, the
        calls let through that did not run, the model call with its cost), then decide the next model call. Returns
        the stop, if any, and, if none, the warnings of the calls of ``warn`` (``Policy.warning``, once recorded)."""
        response, outcomes, unran = flight.current, flight.pending, self._unran(flight, flight.current)
        flight.pending, flight.recorded = [], response
        for entry in unran:
            entry.settled = True  # an outcome coming after all is recorded on its own
        calls = [entry.call for entry in unran]

        def end(state: GuardState) -> tuple[Stop | None, list[str]]:
            stop = self._record_response(state, flight, response, outcomes, calls, turn_id)
            if stop is not None:
                return stop, []
            return None, [text for text in (self.core.policy.warning(state, call) for call in warn) if text]

        # A store outage here decides nothing: each next call's PreToolUse meets it, and ``fail`` decides there.
        nothing: tuple[Stop | None, list[str]] = (None, [])
        stop, warnings = await self.core.update(key, end, outage=nothing)
        flight.stop = stop
        return stop, warnings

    async def _decide(
        self, key: str, turn_id: str | None, flight: Flight, entry: Decided | ToolCall
    ) -> tuple[Refusal | None, Stop | None]:
        """Decide a streamed call (``entry``). At a new response whose previous one was not recorded at its end (the
        turn's first response; one after a batch Claude Code fired no ``PostToolBatch`` for), first record that one
        and check the stop rules the core checks before a model call. A refusal that reaches ``max_refusals`` ends
        the turn there, its response counted as a model call first."""
        policy, previous, outcomes = self.core.policy, flight.current, flight.pending
        call, new = (entry.call, entry.tag != previous) if isinstance(entry, Decided) else (entry, False)
        # The previous response not recorded at its PostToolBatch (the turn's first response has none before it; a
        # deferred call's batch fires none): recorded now, and the stop rules checked, before this call is decided.
        closes = new and (previous is None or previous != flight.recorded)
        unran = [e.call for e in self._unran(flight, previous)] if closes else []
        if isinstance(entry, Decided) and new:
            flight.pending = []
            flight.next_response(entry.tag)

        def decide(state: GuardState) -> tuple[Refusal | None, Stop | None]:
            if closes:
                stop = self._record_response(state, flight, previous, outcomes, unran, turn_id)
                if stop is not None:
                    return None, stop
            elif new:  # outcomes that came after their response was recorded
                for done, ok, result in outcomes:
                    policy.record_tool_result(state, done, ok=ok, result=result, turn_id=turn_id)
            refusal = policy.decide_tool_call(state, call, turn_id=turn_id)
            limit = policy.max_refusals
            if refusal is None or refusal.reason is RefusalKind.TURN_ENDED or limit is None:
                return refusal, None
            if state.turn.refused_responses < max(1, limit):
                return refusal, None
            policy.record_model_call(state, cost_usd=self._cost(flight, flight.current), turn_id=turn_id)
            return refusal, policy.decide_model_call(state, turn_id=turn_id)

        outage: tuple[Refusal | None, Stop | None] = (self.core.refused, None)
        refusal, stop = await self.core.update(key, decide, outage=outage)
        if isinstance(entry, Decided):
            entry.refusal = refusal
        flight.stop = stop
        return refusal, stop

    def _record_response(
        self,
        state: GuardState,
        flight: Flight,
        response: str | None,
        outcomes: list[tuple[ToolCall, bool, Any]],
        unran: list[ToolCall],
        turn_id: str | None,
    ) -> Stop | None:
        """In ``state``: the end of ``response`` (``None``: the turn's first model call is next), its calls'
        ``outcomes`` and the calls let through that did not run (Claude Code's permissions, or your hook, stopped
        them), the model call with its cost; then the next model call decided (``None`` lets it happen)."""
        policy = self.core.policy
        for done, ok, result in outcomes:
            policy.record_tool_result(state, done, ok=ok, result=result, turn_id=turn_id)
        for skipped in unran:
            policy.record_rejection(state, skipped, turn_id=turn_id)
        if response is not None:
            policy.record_model_call(state, cost_usd=self._cost(flight, response), turn_id=turn_id)
        return policy.decide_model_call(state, turn_id=turn_id)

    def _cost(self, flight: Flight, response: str | None) -> float:
        """The cost of ``response``'s usage as the transport noted it (0 without a ``cost``, or no usage)."""
        usage = flight.usage.get(response or "")
        return self.core.cost_of(usage) if usage is not None else 0.0

    @staticmethod
    def _unran(flight: Flight, response: str | None) -> list[Decided]:
        """The calls of ``response`` let through that have no outcome: Claude Code did not run them."""
        return [e for e in flight.batch.calls if e.tag == response and e.claimed and not (e.settled or e.refusal)]

    async def _outcome(self, event: Mapping[str, Any], *, ok: bool, result: Any) -> str | None:
        """A call's outcome, kept for the end of its response (recorded at once for a call the stream did not show);
        the warning for its result (``Policy.warning``), if any."""
        main = self.flights.get(str(event["session_id"]))
        if main is None:
            return None
        key, turn_id, flight = self._agent_of(event, main)
        name, tool_use_id, arguments = _called(event)
        policy = self.core.policy
        ok = self.core.ok(ok, result)
        entry = flight.batch.settle(name, tool_use_id, arguments)
        if entry is not None:
            flight.pending.append((entry.call, ok, result))
            return await self._warning(key, turn_id, entry.call, list(flight.pending)) if policy.warn else None
        call = flight.call(name, tool_use_id, arguments)

        def record(state: GuardState) -> str | None:
            policy.record_tool_result(state, call, ok=ok, result=result, turn_id=turn_id)
            return policy.warning(state, call)  # None without warn=True

        return await self.core.update(key, record, outage=None)

    async def _warning(
        self, key: str, turn_id: str | None, call: ToolCall, outcomes: list[tuple[ToolCall, bool, Any]]
    ) -> str | None:
        """``Policy.warning`` for ``call``'s result, asked of the state as it will be once its response is recorded: a
        copy of the stored state (``load``), with the response's outcomes so far recorded in it. Nothing is written:
        the outcomes are recorded at the end of the response, so that none restarts a sibling's count. ``None``
        when the state cannot be read (logged; a warning decides nothing)."""
        try:
            state = await self.store.load(key)
        except GuardSetupError:
            raise
        except Exception as error:
            logger.warning("repeat_hooks_claude_agent_sdk: no warning for %s: %s: %s", key, type(error).__name__, error)
            return None
        if state is None:
            return None
        if not isinstance(self.store, MemoryStore):  # a store of your own may hand over what it keeps
            state = state.model_copy(deep=True)
        policy = self.core.policy
        for done, ok, result in outcomes:
            policy.record_tool_result(state, done, ok=ok, result=result, turn_id=turn_id)
        return policy.warning(state, call)

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
