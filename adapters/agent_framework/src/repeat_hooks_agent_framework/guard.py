"""``RepeatGuardMiddleware``, the guard as one Agent Framework agent middleware that brings its chat and function
middleware into each run it guards: each applies one verb of the ``Policy`` to the conversation's state through the
kit's ``GuardCore`` (the README's "How it maps to Agent Framework" says which seam does what, and why); and its
errors."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_framework import (
    AgentContext,
    AgentMiddleware,
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    MiddlewareException,
    ResponseStream,
)

from repeat_hooks import GuardSetupError, GuardState, Policy, Refusal, Stop, kit
from repeat_hooks.stores import StateStore

from . import calls
from .state import STATE_KEY, RunSlot, SessionSlot, stop_message

__all__ = ["GuardSetupError", "RepeatGuardMiddleware", "RepeatGuardStopped"]

_OWNER = "RepeatGuardMiddleware"
_Next = Callable[[], Awaitable[None]]


class RepeatGuardStopped(kit.GuardStopped):
    """The guard stopped the run with ``on_stop="raise"``: raised by its chat middleware before a model call, out of
    ``agent.run(...)`` and of a workflow running the agent (chat middleware errors reach the caller). ``stop`` says
    why."""


@dataclass(slots=True)
class _Run:
    """One guarded ``agent.run``, held by its own chat and function middleware (the SDK hands them ``session=None``
    for a run without a session; a streamed run's model calls come after the agent middleware returned)."""

    guard: RepeatGuardMiddleware
    where: str | SessionSlot | RunSlot
    conversation: str | None
    agent: str | None
    watch: kit.Stopwatch
    batch: kit.Batch = field(default_factory=kit.Batch)
    tools: dict[str, Any] = field(default_factory=dict)


class RepeatGuardMiddleware(AgentMiddleware):
    """The loop guard for Agent Framework agents: ``Agent(..., middleware=[RepeatGuardMiddleware()])`` (or
    ``agent.run(..., middleware=[guard])``). One object: the agent middleware starts the turn and puts the guard's
    chat middleware (each model call) and function middleware (each call) first in the run's chat client's.

    The common keywords (``repeat_hooks.kit.GuardCore``): ``policy`` (or its settings as keywords), ``store``
    (``None``: the run's ``AgentSession.state``), ``cost``, ``clock``, ``is_failure`` (of what the model reads of a
    result), ``check_tools``, ``on_stop`` (``"raise"``: ``agent.run(...)`` raises ``RepeatGuardStopped``), ``fail``;
    and ``state_key``, the ``session.state`` key (and the store keys' prefix): two guards on one agent keep apart."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        store: StateStore | None = None,
        cost: kit.CostOf | None = None,
        clock: kit.Clock | None = kit.monotonic,
        is_failure: kit.FailureCheck | None = None,
        check_tools: bool = True,
        on_stop: kit.OnStop = "reply",
        fail: kit.Fail = "open",
        state_key: str = STATE_KEY,
        **settings: Any,
    ) -> None:
        if not isinstance(state_key, str) or not state_key.strip():
            raise GuardSetupError(f"repeat-hooks: {_OWNER}(state_key={state_key!r}) must be a non-empty string")
        self.core = kit.GuardCore(
            policy, settings, owner=_OWNER, keywords=("state_key",), feeds=calls.FEEDS, **kit.common(locals())
        )
        self.policy: Policy = self.core.policy
        self.state_key = state_key
        self._states = kit.ParsedStates()

    # -- the agent seam ---------------------------------------------------------------------------------------

    async def process(self, context: AgentContext, call_next: _Next) -> None:
        """Fires once per ``agent.run``: starts the turn (a run answering a human's approval continues it, and
        records a rejected call as rejected; a caller's ``request(turn_id=...)`` names it), then runs the agent with
        the guard's chat and function middleware first in the run's. With ``store=``, raises ``GuardSetupError`` if
        nothing names the conversation; ``GuardSetupError`` too for a guard given twice to one run."""
        given: Any = context.client_kwargs.get("middleware") or []
        given = list(given) if isinstance(given, Sequence) else [given]
        for other in given:
            guard = getattr(other, "guard", None)
            if isinstance(guard, RepeatGuardMiddleware) and guard.state_key == self.state_key:
                raise GuardSetupError(
                    f"repeat-hooks: two {_OWNER} with state_key {self.state_key!r} guard one run of agent "
                    f"{context.agent.name!r} (Agent(middleware=...) and agent.run(middleware=...)?): every call "
                    "would be counted twice. Give it once (or give each its own state_key)."
                )
        session, name = context.session, context.agent.name
        conversation = self.core.conversation_id(session.session_id if session is not None else None)
        where: str | SessionSlot | RunSlot
        if self.core.store is not None:
            key = self.core.key(f"{self.state_key}:{conversation}" if conversation else None, name)
            if key is None:
                raise GuardSetupError(
                    f"repeat-hooks: {_OWNER}(store=...) keeps each conversation under its id, and this run of agent "
                    f"{name!r} has none: run it with a session (agent.run(..., session=agent.create_session())) or "
                    "in repeat_hooks.kit.request(conversation_id=...)"
                )
            where = key
        elif session is not None:
            where = SessionSlot(session, self.state_key, self._states)
        else:
            where = RunSlot()
        answers = [item for m in context.messages for item in m.contents if item.type == "function_approval_response"]
        rejected = [calls.call_of(a.function_call) for a in answers if a.function_call is not None and not a.approved]
        turn = self.core.turn_id()

        def start(state: GuardState) -> None:
            if not answers or not state.turn.number:
                self.policy.start_turn(state, turn_id=turn or uuid.uuid4().hex)
            elif turn is not None:
                self.policy.start_turn(state, turn_id=turn)
            for call in rejected:
                self.policy.record_rejection(state, call)

        run = _Run(self, where, conversation, name, kit.Stopwatch(self.core.clock))
        with self.core.scope(conversation, name):
            await self.core.update(where, start, outage=None)
        context.client_kwargs["middleware"] = [_ToolSide(run), _ModelSide(run), *given]
        await call_next()


class _ModelSide(ChatMiddleware):
    """The guard's chat middleware for one run: around each model call inside the function loop
    (``_tools.py:5719``)."""

    def __init__(self, run: _Run) -> None:
        self.run, self.guard = run, run.guard

    async def process(self, context: ChatContext, call_next: _Next) -> None:
        """Fires for each model call: records the outcomes of the last response's calls no function middleware saw;
        a stop sets ``context.result`` to a response holding only the stop message, so the model is not called and
        the loop returns it as the run's answer (``"raise"``: raises ``RepeatGuardStopped``). Else, once the
        response is whole (for a stream: a result hook), counts the call and decides its calls (``_after``)."""
        run, core = self.run, self.guard.core
        run.tools = calls.tools_of(context.options)
        core.check_tool_names(run.tools)
        with core.scope(run.conversation, run.agent):
            await self._settle(context.messages)
            stop = await self._stop()
            if stop is not None:
                context.result = _answer(context.stream, ChatResponse(messages=[stop_message(stop)]))
                return
            if core.records_model_calls:
                run.watch.start()
            await call_next()
        if isinstance(context.result, ChatResponse):
            context.result = await self._after(context, call_next, context.result, context.result)
        elif isinstance(context.result, ResponseStream):  # decided once the loop has the whole response
            context.stream_buffer_updates, context.stream_result_to_updates = True, calls.updates_of
            context.stream_result_hooks.append(lambda response: self._after(context, call_next, response, None))

    async def _stop(self) -> Stop | None:
        """Decide the next model call: a stop (raised with ``on_stop="raise"``), or ``None``."""
        core = self.guard.core
        stop = await core.update(self.run.where, self.guard.policy.decide_model_call, outage=core.ended)
        if stop is not None and (stopped := core.stopped(stop, RepeatGuardStopped)) is not None:
            raise stopped
        return stop

    async def _after(
        self, context: ChatContext, call_next: _Next, response: ChatResponse[Any], same: Any
    ) -> ChatResponse[Any] | None:
        """After a model call: count it, decide its calls; while every call is answered so (the loop would end the
        run with this response), ask the model again, or end with the stop. Returns the response the loop goes on
        with (the earlier ones' messages first), or ``same`` when it is ``response`` unchanged (for a stream: its
        updates are released as they came)."""
        before = len(response.messages)
        run, answered = self.run, list[Message]()
        with self.guard.core.scope(run.conversation, run.agent):
            while True:
                if self.guard.core.records_model_calls:
                    await self._count(response)
                if not await self._decide(response):
                    break
                answered.extend(response.messages)
                context.messages = [*context.messages, *response.messages]
                stop = await self._stop()
                if stop is not None:
                    response = ChatResponse(messages=[stop_message(stop)])
                    break
                run.watch.start()
                await call_next()
                result = context.result
                if isinstance(result, ResponseStream):
                    result = await result.get_final_response()
                if not isinstance(result, ChatResponse):
                    return response
                response = result
        response.messages[:0] = answered
        return same if not answered and len(response.messages) == before else response

    async def _count(self, response: ChatResponse[Any]) -> None:
        """Count one model call: its recorded seconds, its cost, its text answer."""
        core, run = self.guard.core, self.run
        seconds, cost, answer = run.watch.seconds(), core.cost_of(calls.usage(response)), calls.answer_of(response)
        record = functools.partial(self.guard.policy.record_model_call, seconds=seconds, cost_usd=cost, answer=answer)
        await core.update(run.where, record, outage=None)

    async def _decide(self, response: ChatResponse[Any]) -> bool:
        """Decide ``response``'s calls as one batch; answer the refused ones no middleware would see. ``True`` when
        every call is answered so (the loop would return the response as the run's answer)."""
        guard, run = self.guard, self.run
        contents = calls.function_calls(response)
        if not contents:
            run.batch.clear()
            return False
        batch = [calls.call_of(content, run.tools.get(str(content.name))) for content in contents]
        decide = functools.partial(guard.policy.decide_tool_calls, calls=batch)
        decisions: list[Refusal | None] = await guard.core.update(
            run.where, decide, outage=[guard.core.refused] * len(batch)
        )
        entries = run.batch.decided(batch, decisions, given=contents)
        unseen = [
            (e, c) for e, c in zip(entries, contents, strict=True) if not calls.reaches_middleware(c.name, run.tools)
        ]
        refused = [(content, entry.refusal.message) for entry, content in unseen if entry.refusal is not None]
        for entry, _ in unseen:
            entry.claimed = True
            entry.settled = entry.refusal is not None
        if refused:
            response.messages.append(calls.refusal_results(refused))
        return len(refused) == len(contents)

    async def _settle(self, messages: Sequence[Message]) -> None:
        """Record the outcomes, as the conversation holds them, of the last response's calls no function middleware
        saw run (the loop's own error for a tool the agent lacks); then the batch is over."""
        run = self.run
        open_calls = [entry for entry in run.batch.calls if entry.refusal is None and not entry.settled]
        if not open_calls:
            run.batch.clear()
            return
        results = {c.call_id: c for m in messages for c in m.contents if c.type == "function_result" and c.call_id}
        guard = self.guard
        for entry in open_calls:
            found = results.get(entry.model_id or "")
            if found is None:
                continue  # not answered (an approval pending): the approval round decides it again
            view = calls.result_view(found)
            ok = guard.core.ok(found.exception is None, view)
            record = functools.partial(guard.policy.record_tool_result, call=entry.call, ok=ok, result=view)
            entry.settled = True
            await guard.core.update(run.where, record, outage=None)
        run.batch.clear()


class _ToolSide(FunctionMiddleware):
    """The guard's function middleware for one run: around each call the function loop runs (``_tools.py:2175``)."""

    def __init__(self, run: _Run) -> None:
        self.run, self.guard = run, run.guard

    async def process(self, context: FunctionInvocationContext, call_next: _Next) -> None:
        """Fires for each call the loop runs: hands back its batch decision (one the batch lacks, as an approved call
        in the approval round, from the state's batch); a refusal is set as ``context.result`` without calling
        ``call_next``, so the function does not run and the model reads the refusal. Else runs it: an exception out of
        ``call_next`` is a failed call (re-raised); with ``warn=True`` the guard's note goes after the result."""
        with self.guard.core.scope(self.run.conversation, self.run.agent):
            await self._guard(context, call_next)

    async def _guard(self, context: FunctionInvocationContext, call_next: _Next) -> None:
        run, core, policy = self.run, self.guard.core, self.guard.policy
        name = context.function.name
        raw_id = context.metadata.get("call_id")
        call_id = raw_id if isinstance(raw_id, str) else None
        arguments = calls.arguments_of(context.arguments)
        entry = run.batch.claim(name, call_id, arguments)
        if entry is None:
            call = calls.tool_call(name, arguments, call_id, context.function)
            decide = functools.partial(policy.decide_tool_call, call=call)
            entry = run.batch.add(call, await core.update(run.where, decide, outage=core.refused))
        if entry.refusal is not None:
            entry.settled = True
            context.result = entry.refusal.message
            return
        decided = entry.call
        try:
            await call_next()
        except MiddlewareException:
            raise  # MiddlewareTermination / MiddlewareFailure: the loop's own control flow, no outcome
        except Exception as error:
            entry.settled = True
            failed = functools.partial(policy.record_tool_result, call=decided, ok=False, result=type(error).__name__)
            await core.update(run.where, failed, outage=None)
            raise
        if getattr(context.result, "type", None) == "function_approval_request":
            return  # a middleware after the guard put it to a human: it did not run, its approval round runs it
        entry.settled = True
        view = calls.model_view(context.result)
        ok = core.ok(True, view)

        def record(state: GuardState) -> str | None:
            policy.record_tool_result(state, decided, ok=ok, result=view)
            return policy.warning(state, decided)

        note = await core.update(run.where, record, outage=None)
        if note is not None:
            context.result = calls.noted(context.result, note)


def _answer(stream: bool, response: ChatResponse[Any]) -> ChatResponse[Any] | ResponseStream[Any, Any]:
    """``response`` as the chat middleware's result: itself, or for a streamed call a stream of its updates."""
    if not stream:
        return response

    async def updates() -> Any:
        for update in calls.updates_of(response):
            yield update

    return ResponseStream(updates(), finalizer=lambda _: response)
