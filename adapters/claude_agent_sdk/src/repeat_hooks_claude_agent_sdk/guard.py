"""``RepeatGuardHooks``: the guard as Claude Agent SDK hooks, plus the transport that lets them see responses.

Claude Code runs the agent loop in its CLI and calls the hooks back in the Python process that started it.
A turn is one user prompt: its ``prompt_id`` is the turn id (stable across the turn's hooks). The counts
live in a ``StateStore`` (``MemoryStore`` by default; ``repeat_hooks.stores.redis.RedisStore`` shared by several
processes), one ``GuardState`` per session id, so a session resumed later (``resume=session_id``), in this
process or another, goes on with its state. Which hook does what:

- ``UserPromptSubmit``: starts the turn (fresh per-turn counts).
- ``PreToolUse``: decides the call. The first call of a model response first records the previous
  response (its calls' outcomes, and, as a model call, its cost), then checks the stop rules that the
  core checks before a model call (``decide_model_call``; Claude Code has no hook before a model call),
  then decides the response's calls streamed so far as one batch (``decide_tool_calls``); the later calls
  of the response are decided with those still undecided, in the order the model wrote them. A refused
  call is denied with the refusal as the reason: the tool does not run and the model reads the text as
  the call's error result. A stop denies the call and ends the turn (``continue_: False``): no more
  model calls, and the caller's ``ResultMessage.result`` is the stop message. ``max_refusals`` moves only
  at a refusal, so it is checked there: the refusal that reaches it is denied with its text (the model
  reads it when the conversation goes on) and ends the turn with the stop, with no model call after it.
- ``PostToolUse`` / ``PostToolUseFailure``: the call's outcome and what the model reads of its result
  (``calls.result_view``, or the error text), recorded when the next response comes: no result of a
  response restarts the count of a call in the same response.

Which response a call belongs to is not in the hooks: ``GuardedTransport`` (``stream``) reads it from the
CLI's stream, so run the guard with ``guard.query(...)`` or ``guard.client(...)``, or pass both
``options=guard.options(...)`` and ``transport=guard.transport(...)`` to the SDK yourself.

**Sub-agents** (Claude Code's ``Agent`` tool): each is an agent of its own, as its model sees it: its own
conversation, so its own counts, model calls, cost and stop, in a ``GuardState`` of its own in the same
store (``state.session_key(session_id, agent_id)``), its turn being its run. Its hooks carry its
``agent_id``; its responses are told apart in the stream by their ``parent_tool_use_id``. The parent's turn
keeps its own counts: a sub-agent's calls neither count in it nor restart them (the ``Agent`` call itself
is the parent's call). A sub-agent the guard stops is ended the way a stopped turn is (its call denied with
the stop message, ``continue_: False``): Claude Code ends that sub-agent only, and hands the parent its
result as it does for any sub-agent that finished; the parent's turn goes on, and its ``ResultMessage`` is
the parent's (``stop_of(..., agent_id=...)`` reads the sub-agent's stop).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import anyio
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookCallback,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    Message,
    ResultMessage,
    Transport,
    query,
)
from claude_agent_sdk.types import HookEvent

from repeat_hooks import (
    GuardState,
    MemoryStore,
    Policy,
    Refusal,
    RefusalKind,
    StateStore,
    Stop,
    StopReason,
    StoreUnavailable,
    observe,
)
from repeat_hooks.kit import CostOf, check_feeds, policy_from
from repeat_hooks.stop_rules import Feed

from .calls import Hints, allow, deny, result_view, tool_call
from .state import session_key, stop_of
from .stream import Block, Flight, GuardedTransport, Outcome

logger = logging.getLogger("repeat_hooks_claude_agent_sdk")
T = TypeVar("T")

_OWNER = "RepeatGuardHooks"
MAX_SESSIONS = 1024
STREAM_WAIT = 5.0
"""Seconds a sub-agent's ``PreToolUse`` waits for its ``tool_use`` block to stream (it comes within
milliseconds; past this, the call is decided on its own, as a deferred call is, and a warning logged)."""
"""Sessions whose current turn the process follows at once (``Flight``s); the least recently used goes first."""

NO_TRANSPORT = (
    "repeat-hooks: RepeatGuardHooks cannot see which model response this call belongs to: run the agent with "
    "guard.query(prompt=..., options=...) or guard.client(options), or pass options=guard.options(options) "
    "and transport=guard.transport(options) to the SDK. The call was not run and the turn ends."
)
"""What a call is denied with (and the turn ended) when the hooks run without the guard's transport."""
STORE_DOWN = "Refused: the loop guard could not reach its state store, so this call was not run."
"""The refusal text of a call refused because the store failed, with ``fail_closed=True``."""


class RepeatGuardHooks:
    """The loop guard for the Claude Agent SDK: ``guard.query(prompt=..., options=ClaudeAgentOptions(...))``.

    ``policy`` is the settings: a ``Policy``, or the settings as keywords (``RepeatGuardHooks(max_calls=2)``),
    or nothing for the default ``Policy()``. Tool names in the policy are Claude Code's:
    ``mcp__<server>__<tool>`` for an MCP tool, ``Bash``, ``Read``, ... for its own.

    ``store`` keeps one ``GuardState`` per session id (default: a ``MemoryStore`` of this process; a
    ``RedisStore`` for sessions resumed in other processes). ``cost`` turns a response's usage into dollars
    for ``max_cost_usd`` (``cost=TokenPrices(3, 15)``): it is handed the usage as Claude Code streams it, in
    Anthropic's spelling, which ``repeat_hooks.kit.usage_tokens`` reads (cache reads and writes are input tokens).
    ``fail_closed``: when the store fails, refuse the call (``True``) rather than let it run (``False``, the
    default; the error is logged either way).

    One guard serves any number of sessions and queries at once. Setup mistakes fail at construction
    (``TypeError``, or ``GuardSetupError``: a budget Claude Code cannot feed, ``max_cost_usd`` without
    ``cost``); a tool name in ``limits``, ``exempt``, ``read_only`` or ``destructive`` that Claude Code does
    not offer fails when the CLI lists its tools, out of the query; ``check_tools=False`` skips that check, for
    tools an MCP server adds after the session started.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        store: StateStore | None = None,
        cost: CostOf | None = None,
        fail_closed: bool = False,
        check_tools: bool = True,
        **settings: Any,
    ) -> None:
        self.policy: Policy = policy_from(policy, settings, owner=_OWNER)
        """The settings; the counts live in ``store``."""
        self.check_tools = check_tools
        """``False``: the tool names in the policy are not checked against Claude Code's tools (for tools an MCP
        server adds after the session started)."""
        check_feeds(
            self.policy,
            can={Feed.OUTCOMES, Feed.MODEL_CALLS} | ({Feed.COST} if cost is not None else set()),
            owner=_OWNER,
            how={
                Feed.COST: f"{_OWNER}(..., cost=TokenPrices(input_usd_per_million, output_usd_per_million)), or "
                "use Claude Code's own ClaudeAgentOptions(max_budget_usd=...)"
            },
            why={
                Feed.SECONDS: "Claude Code reports no model-call time to its hooks; bound a turn by its model calls "
                "(max_model_calls), Claude Code's own ClaudeAgentOptions(max_turns=...), or a timeout of your own "
                "around the query"
            },
        )
        self.store: StateStore = store if store is not None else MemoryStore()
        """Where each session's ``GuardState`` lives, keyed by ``state.session_key(session_id)``, and each of its
        sub-agents' (``session_key(session_id, agent_id)``)."""
        self.cost = cost
        self.fail_closed = fail_closed
        self._flights: OrderedDict[str, Flight] = OrderedDict()
        self.result_turns: OrderedDict[str, str] = OrderedDict()
        """The turn (``prompt_id``) each ``ResultMessage`` this process saw ended, by its ``uuid`` (the last 1024)."""

    # -- wiring it into the SDK ----------------------------------------------------------------------------

    def hooks(self, extra: Mapping[HookEvent, list[HookMatcher]] | None = None) -> dict[HookEvent, list[HookMatcher]]:
        """The ``hooks=`` of ``ClaudeAgentOptions``: the guard's, followed by ``extra`` (your own hooks).

        Claude Code runs the matchers of one event concurrently: a hook of yours that denies a call the guard
        let through leaves it counted as run (it was decided; only its outcome is missing).
        """
        ours: dict[HookEvent, list[HookMatcher]] = {
            "UserPromptSubmit": [HookMatcher(hooks=[self._hook(self.on_user_prompt_submit)])],
            "PreToolUse": [HookMatcher(hooks=[self._hook(self.on_pre_tool_use)])],
            "PostToolUse": [HookMatcher(hooks=[self._hook(self.on_post_tool_use)])],
            "PostToolUseFailure": [HookMatcher(hooks=[self._hook(self.on_post_tool_use_failure)])],
        }
        for event, matchers in (extra or {}).items():
            ours[event] = [*ours.get(event, []), *matchers]
        return ours

    def options(self, options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """``options`` (default: ``ClaudeAgentOptions()``) with the guard's hooks added to its own."""
        options = options if options is not None else ClaudeAgentOptions()
        return replace(options, hooks=self.hooks(options.hooks))

    def transport(self, options: ClaudeAgentOptions | None = None, *, inner: Transport | None = None) -> Transport:
        """The transport to pass the SDK with ``options``: the SDK's own subprocess transport to the CLI (or
        ``inner``), watched by the guard (``stream.GuardedTransport``). One per query or client.

        With ``cost``, it turns on the CLI's partial messages (for each response's output tokens) and keeps
        them from you unless ``options.include_partial_messages`` asked for them; an ``inner`` transport of
        your own is used as it is (then the output tokens are the ones a response's first line reports).
        """
        options = options if options is not None else ClaudeAgentOptions()
        if inner is None:
            from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

            configured = options
            if self.cost is not None and not options.include_partial_messages:
                configured = replace(configured, include_partial_messages=True)
            if configured.can_use_tool is not None and not configured.permission_prompt_tool_name:
                # As query() and ClaudeSDKClient do for their own transport (claude_agent_sdk/types.py:2383).
                configured = replace(configured, permission_prompt_tool_name="stdio")
            inner = SubprocessCLITransport(prompt="", options=configured)
        return GuardedTransport(self, inner, show_partial=options.include_partial_messages)

    def query(self, *, prompt: str, options: ClaudeAgentOptions | None = None) -> AsyncIterator[Message]:
        """The SDK's ``query()`` with the guard: its hooks in ``options``, its transport."""
        return query(prompt=prompt, options=self.options(options), transport=self.transport(options))

    def client(self, options: ClaudeAgentOptions | None = None) -> ClaudeSDKClient:
        """The SDK's ``ClaudeSDKClient`` with the guard (``async with guard.client(options) as client: ...``)."""
        return ClaudeSDKClient(options=self.options(options), transport=self.transport(options))

    async def stop_of(
        self, session: ResultMessage | str, turn_id: str | None = None, *, agent_id: str | None = None
    ) -> Stop | None:
        """``state.stop_of(self, session, turn_id, agent_id=...)``: how the guard ended a turn of the session (or
        its sub-agent ``agent_id``), or ``None``."""
        return await stop_of(self, session, turn_id, agent_id=agent_id)

    # -- the hooks ----------------------------------------------------------------------------------------

    async def on_user_prompt_submit(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires when a user prompt starts a turn (``prompt_id``): fresh per-turn counts. Returns ``{}``.

        Claude Code may fire it twice for one prompt; the same ``prompt_id`` again changes nothing.
        """
        session, turn_id = str(event["session_id"]), _turn(event)
        flight = self._flights.get(session)
        if flight is not None:
            async with flight.lock:
                if turn_id is not None and turn_id == flight.turn_id:
                    return allow()
                flight.start(turn_id)
        await self._update(session_key(session), lambda state: self.policy.start_turn(state, turn_id=turn_id), None)
        return allow()

    async def on_pre_tool_use(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires before each tool call: returns ``{}`` to let it go on (Claude Code's permissions still apply),
        or a deny with the refusal's text (the tool does not run; the model reads it), with ``continue_: False``
        when the turn stops (see the module's docstring for when each rule is checked)."""
        tool_use_id, name, arguments = (
            str(event.get("tool_use_id") or ""),
            str(event["tool_name"]),
            event.get("tool_input"),
        )
        main = self._flights.get(str(event["session_id"]))
        if main is None:
            logger.error("repeat_hooks_claude_agent_sdk: %s", NO_TRANSPORT)
            return deny(Stop(message=NO_TRANSPORT, reason=StopReason.REPEATED_CALL))
        if main.broken is not None:
            return deny(Stop(message=f"repeat-hooks: {main.broken}", reason=StopReason.REPEATED_CALL))
        key, turn_id, flight = _agent_of(event, main)
        async with flight.lock:
            block = flight.find(tool_use_id, arguments, answered=False)
            if block is None and flight is not main:
                block = await _streamed(flight, tool_use_id, arguments)
            if block is None:
                # Not streamed in this process: a call deferred by a PreToolUse hook (permissionDecision
                # "defer") and delivered again when the session resumes. Its decision is in the store.
                call = tool_call(name, arguments, tool_use_id or None, flight.hints.get(name))
                decided = await self._update(
                    key, lambda state: self.policy.decide_tool_call(state, call, turn_id=turn_id), self._down()
                )
                return deny(decided) if decided is not None else allow()
            if not block.decided:
                await self._decide(key, turn_id, flight, block)
            block.answered = True
            return deny(block.decision, block.ends) if block.decision is not None else allow()

    async def on_post_tool_use(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires after a tool ran and succeeded: keeps its outcome and what the model reads of its result
        (``tool_response``), recorded when the next model response comes. Returns ``{}``."""
        await self._outcome(event, ok=True, result=result_view(event.get("tool_response")))
        return allow()

    async def on_post_tool_use_failure(self, event: Mapping[str, Any]) -> HookJSONOutput:
        """Fires after a tool failed (it raised, or an MCP tool answered ``isError``): keeps the failure and its
        error text (what the model reads), recorded when the next model response comes. Returns ``{}``: Claude
        Code (CLI 2.1.332) ignores ``continue: false`` from this hook, so ``max_errors_in_a_row`` is checked at
        the next response's first call, as the budgets are."""
        await self._outcome(event, ok=False, result=event.get("error"))
        return allow()

    # -- helpers ------------------------------------------------------------------------------------------

    def flight(self, session_id: str, hints: dict[str, Hints]) -> Flight:
        """The current turn of ``session_id`` as seen by the transport that holds ``hints`` (made if new)."""
        flight = self._flights.get(session_id)
        if flight is None:
            flight = self._flights[session_id] = Flight(hints=hints)
            if len(self._flights) > MAX_SESSIONS:
                self._flights.popitem(last=False)
        else:
            self._flights.move_to_end(session_id)
            flight.hints = hints
        return flight

    def note_result(self, uuid: Any, turn_id: str | None) -> None:
        """The transport saw the ``ResultMessage`` ``uuid`` end turn ``turn_id``: ``stop_of`` reads that turn."""
        if isinstance(uuid, str) and turn_id is not None:
            self.result_turns[uuid] = turn_id
            if len(self.result_turns) > MAX_SESSIONS:
                self.result_turns.popitem(last=False)

    async def _decide(self, key: str, turn_id: str | None, flight: Flight, block: Block) -> None:
        """Decide ``block`` with the calls of its response streamed before it and not yet decided; at a new
        response, first record the previous one and check the stop rules. A refusal that reaches
        ``max_refusals`` ends the turn at once (``Block.ends``)."""
        batch = flight.batch(block)
        calls = [known.call for known in batch]
        policy = self.policy
        new_response = block.response != flight.current
        previous, outcomes = flight.current, list(flight.pending)
        if new_response:
            flight.pending.clear()
            flight.next_response(block.response)
        cost = self._cost_of(flight.usage.get(previous)) if previous is not None else 0.0
        cost_now = self._cost_of(flight.usage.get(block.response))

        def decide(state: GuardState) -> tuple[list[Refusal | Stop | None], Stop | None]:
            if new_response:
                for outcome in outcomes:
                    policy.record_tool_result(
                        state, outcome.call, ok=outcome.ok, result=outcome.result, turn_id=turn_id
                    )
                if previous is not None:
                    policy.record_model_call(state, cost_usd=cost, turn_id=turn_id)
                stop = policy.decide_model_call(state, turn_id=turn_id)
                if stop is not None:
                    return [stop] * len(calls), None
            decisions: list[Refusal | Stop | None] = list(policy.decide_tool_calls(state, calls, turn_id=turn_id))
            return decisions, _stop_at_refusal(policy, state, decisions, cost_now, turn_id)

        fallback: tuple[list[Refusal | Stop | None], Stop | None] = ([self._down()] * len(calls), None)
        decisions, stop = await self._update(key, decide, fallback)
        for known, decision in zip(batch, decisions, strict=True):
            known.decided, known.decision = True, decision
            if isinstance(decision, Stop):
                flight.stop = decision
            elif isinstance(decision, Refusal) and stop is not None:
                known.ends = stop
        if stop is not None:
            flight.stop, flight.current = stop, None  # its model call is recorded: not again at a later sibling

    async def _outcome(self, event: Mapping[str, Any], *, ok: bool, result: Any) -> None:
        main = self._flights.get(str(event["session_id"]))
        if main is None:
            return
        key, turn_id, flight = _agent_of(event, main)
        tool_use_id, name, arguments = (
            str(event.get("tool_use_id") or ""),
            str(event["tool_name"]),
            event.get("tool_input"),
        )
        block = flight.find(tool_use_id, arguments, answered=True)
        if block is not None:
            block.settled = True
            flight.pending.append(Outcome(block.call, ok, result))
            return
        call = tool_call(name, arguments, tool_use_id or None, flight.hints.get(name))
        await self._update(
            key,
            lambda state: self.policy.record_tool_result(state, call, ok=ok, result=result, turn_id=turn_id),
            None,
        )

    def _down(self) -> Refusal | None:
        """The decision of a call when the store failed: refused with ``fail_closed``, else let through."""
        return Refusal(message=STORE_DOWN) if self.fail_closed else None

    def _cost_of(self, usage: Mapping[str, Any] | None) -> float:
        if self.cost is None or usage is None:
            return 0.0
        return float(self.cost(usage))  # Anthropic's spelling, which repeat_hooks.kit.usage_tokens reads

    async def _update(self, key: str, change: Callable[[GuardState], T], fallback: T) -> T:
        """One atomic change of the state under ``key`` (``session_key``); ``fallback`` when the store fails
        (logged)."""
        try:
            return await self.store.update(key, change)
        except StoreUnavailable:
            logger.exception("repeat_hooks_claude_agent_sdk: the store failed for %s", key)
            return fallback

    @staticmethod
    def _hook(method: Callable[[Mapping[str, Any]], Awaitable[HookJSONOutput]]) -> HookCallback:
        async def callback(event: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
            if not observe.OBSERVERS:
                return await method(event)
            # For the observers (repeat_hooks.observe.otel: gen_ai.conversation.id, gen_ai.agent.name): the session, and
            # the agent type Claude Code names inside a sub-agent or for a session started with --agent.
            session, agent = event.get("session_id"), event.get("agent_type")
            with observe.scope(
                conversation_id=session if isinstance(session, str) else None,
                agent_name=agent if isinstance(agent, str) else None,
            ):
                return await method(event)

        callback.__name__ = method.__name__
        return callback


def _stop_at_refusal(
    policy: Policy, state: GuardState, decisions: Sequence[Refusal | Stop | None], cost: float, turn_id: str | None
) -> Stop | None:
    """``max_refusals`` checked at the refusal that reaches it rather than before the next model call: the
    responses with a refusal only grow within a turn, and theirs is the first rule ``decide_model_call`` checks,
    so it would stop the turn there anyway. Then the response is counted as a model call (with its ``cost``
    so far) and the stop taken from the core; else ``None`` and nothing changes."""
    limit = policy.max_refusals
    if limit is None or state.turn.refused_responses < max(1, limit):
        return None
    if not any(
        isinstance(decision, Refusal) and decision.reason is not RefusalKind.TURN_ENDED for decision in decisions
    ):
        return None
    policy.record_model_call(state, cost_usd=cost, turn_id=turn_id)
    return policy.decide_model_call(state, turn_id=turn_id)


def _agent_of(event: Mapping[str, Any], main: Flight) -> tuple[str, str | None, Flight]:
    """Whose call a tool hook is about: the store key, turn id and flight of the session's main agent, or of
    the sub-agent named by the hook's ``agent_id`` (its own state; its turn is its run)."""
    session, agent_id = str(event["session_id"]), event.get("agent_id")
    if isinstance(agent_id, str) and agent_id:
        return session_key(session, agent_id), agent_id, main.agent(agent_id)
    return session_key(session), _turn(event), main


async def _streamed(flight: Flight, tool_use_id: str, arguments: Any) -> Block | None:
    """A sub-agent's block, once it has streamed (at most ``STREAM_WAIT`` seconds); ``None`` if it did not."""
    with anyio.move_on_after(STREAM_WAIT):
        while True:
            await flight.streamed.wait()
            block = flight.find(tool_use_id, arguments, answered=False)
            if block is not None:
                return block
    logger.warning("repeat_hooks_claude_agent_sdk: a sub-agent's call %s never streamed", tool_use_id)
    return None


def _turn(event: Mapping[str, Any]) -> str | None:
    """The turn id of a hook call: its ``prompt_id`` (absent for a deferred call delivered again on resume)."""
    turn_id = event.get("prompt_id")
    return turn_id if isinstance(turn_id, str) and turn_id else None
