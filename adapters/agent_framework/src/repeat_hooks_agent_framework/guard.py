"""``RepeatGuardMiddleware``, the guard as one Agent Framework agent middleware that brings its chat and function
middleware into each run it guards, each applying a verb of the ``Policy`` to the state through the kit's
``GuardCore`` (the README's "How it maps to Agent Framework" says which seam does what, and why); and its errors."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import agent_framework as af
from agent_framework import ChatContext, ChatResponse, Message, ResponseStream

from repeat_hooks import GuardSetupError, GuardState, Policy, Refusal, Stop, kit
from repeat_hooks.stores import StateStore

from . import calls
from .state import IN_STORE, STATE_KEY, RunSlot, SessionSlot, slot_key, stop_message

__all__ = ["GuardSetupError", "RepeatGuardMiddleware", "RepeatGuardStopped"]

_OWNER = "RepeatGuardMiddleware"
_Next = Callable[[], Awaitable[None]]
_T = TypeVar("_T")
_CALLING: ContextVar[str | None] = ContextVar("repeat_hooks_calling", default=None)  # in a guarded call: its run's key


class _NestedSetupError(af.MiddlewareFailure, GuardSetupError):
    """A ``GuardSetupError`` in a guarded tool call (a sub-agent's run), which the function loop may not absorb."""


class RepeatGuardStopped(kit.GuardStopped):
    """The guard stopped the run with ``on_stop="raise"``: raised out of ``agent.run(...)`` and of a workflow."""


@dataclass(slots=True)
class _Run:
    """One guarded ``agent.run``, held by its chat and function middleware (the SDK may hand them no session)."""

    guard: RepeatGuardMiddleware
    where: str | SessionSlot | RunSlot
    conversation: str | None
    agent: str | None
    watch: kit.Stopwatch
    place: str | None
    batch: kit.Batch = field(default_factory=kit.Batch)
    tools: dict[str, Any] = field(default_factory=dict)

    async def update(self, change: Callable[[GuardState], _T], outage: _T) -> _T:
        """``core.update`` of the run's state; once the session's value was found corrupt, ``outage`` (logged once)."""
        if isinstance(self.where, SessionSlot) and self.where.down:
            return outage
        return await self.guard.core.update(self.where, change, outage=outage)


class RepeatGuardMiddleware(af.AgentMiddleware):
    """The loop guard for Agent Framework agents: ``Agent(..., middleware=[RepeatGuardMiddleware()])`` (or
    ``agent.run(..., middleware=[guard])``): it starts the turn, and puts the guard's chat middleware (each model
    call) and function middleware (each call) first in the run's. The common keywords (``repeat_hooks.kit.GuardCore``;
    ``store=None``: the run's ``AgentSession.state``), and ``state_key``, the ``session.state`` key (and the store
    keys' prefix): two guards on one agent keep apart."""

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

    async def process(self, context: af.AgentContext, call_next: _Next) -> None:
        """Fires once per ``agent.run``: starts the turn (a run answering a human's approval continues it, and
        records a rejected call as rejected; ``request(turn_id=...)`` names it), then runs the agent with the guard's
        chat and function middleware first. ``GuardSetupError`` for a setup that cannot work (README, "Misuse")."""
        given: Any = context.client_kwargs.get("middleware") or []
        given = list(given) if isinstance(given, Sequence) else [given]
        session, name = context.session, context.agent.name
        agent = f"agent {name!r}" if name else "an agent with no name"
        for other in given:
            guard = getattr(other, "guard", None)
            if isinstance(guard, RepeatGuardMiddleware) and guard.state_key == self.state_key:
                n = min(2, sum(m is self or m is guard for m in getattr(context.agent, "middleware", None) or ()))
                found = ("both in agent.run", "one in Agent(middleware=...), one in agent.run", "both in Agent")[n]
                raise GuardSetupError(
                    f"repeat-hooks: two {_OWNER} with state_key {self.state_key!r} guard one run of {agent} ({found}"
                    "(middleware=...)): every call would be counted twice. Give it once (or each its own state_key)."
                )
        conversation = self.core.conversation_id(session.session_id if session is not None else None)
        where: str | SessionSlot | RunSlot
        if self.core.store is not None:
            key = self.core.key(f"{self.state_key}:{conversation}" if conversation else None, name)
            if key is None:
                raise GuardSetupError(
                    f"repeat-hooks: {_OWNER}(store=...) keeps each conversation under its id, and this run of {agent} "
                    "has none: run it with a session (agent.run(..., session=agent.create_session())) or in "
                    "repeat_hooks.kit.request(conversation_id=...)"
                )
            where = place = key
            if session is not None:  # read_state(session) says where the state is
                session.state[slot_key(self.state_key, name)] = {IN_STORE: key}
        elif session is not None:
            where = SessionSlot(session, slot_key(self.state_key, name), self._states)
            place = f"{session.session_id}/{where.key}"
        else:
            where, place = RunSlot(), None
        if place is not None and _CALLING.get() == place:
            raise _NestedSetupError(
                f"repeat-hooks: {agent} runs in a tool call of an agent whose guard state is in {where!r} too "
                "(as_tool(propagate_session=True)?): each would restart the other's turn. Name them (Agent(name=...))."
            )
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

        run = _Run(self, where, conversation, name, kit.Stopwatch(self.core.clock), place)
        with self.core.scope(conversation, name):
            await run.update(start, None)
        context.client_kwargs["middleware"] = [_ToolSide(run), _ModelSide(run), *given]
        await call_next()


class _ModelSide(af.ChatMiddleware):
    """The guard's chat middleware for one run: around each model call inside the function loop (``_tools.py:5719``)."""

    def __init__(self, run: _Run) -> None:
        self.run, self.guard = run, run.guard

    async def process(self, context: ChatContext, call_next: _Next) -> None:
        """Fires for each model call: records the outcomes of the last response's calls no function middleware saw;
        a stop sets ``context.result`` to a response holding only the stop message, which the loop returns as the
        run's answer (or raises it). Else, once the response is whole (a stream's result hook), ``_after``."""
        run, core = self.run, self.guard.core
        run.tools = calls.tools_of(context.options)
        core.check_tool_names(run.tools)
        with core.scope(run.conversation, run.agent):
            await self._settle(context.messages)
            stop = await self._stop()
            if stop is not None:
                done = ChatResponse(messages=[stop_message(stop)])
                context.result = ResponseStream(_released(done), finalizer=lambda _: done) if context.stream else done
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
        stop = await self.run.update(self.guard.policy.decide_model_call, core.ended)
        if stop is not None and (stopped := core.stopped(stop, RepeatGuardStopped)) is not None:
            raise stopped
        return stop

    async def _after(
        self, context: ChatContext, call_next: _Next, response: ChatResponse[Any], same: Any
    ) -> ChatResponse[Any] | None:
        """After a model call: count it, decide its calls; while every call is answered so (the loop would end the
        run with this response), ask the model again, or end with the stop. Returns the response the loop goes on
        with (the earlier ones' messages first), or ``same`` for ``response`` unchanged (a stream's, as it came)."""
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
        await run.update(record, None)

    async def _decide(self, response: ChatResponse[Any]) -> bool:
        """Decide ``response``'s calls as one batch; answer the refused ones no middleware would see. ``True`` when
        every call is answered so."""
        guard, run = self.guard, self.run
        contents = calls.function_calls(response)
        if not contents:
            run.batch.clear()
            return False
        batch = [calls.call_of(content, run.tools.get(str(content.name))) for content in contents]
        decide = functools.partial(guard.policy.decide_tool_calls, calls=batch)
        decisions: list[Refusal | None] = await run.update(decide, [guard.core.refused] * len(batch))
        entries = run.batch.decided(batch, decisions, given=contents)
        unseen = [
            (e, c) for e, c in zip(entries, contents, strict=True) if not calls.reaches_middleware(c.name, run.tools)
        ]
        refused = [(content, entry.refusal.message) for entry, content in unseen if entry.refusal is not None]
        for entry, _ in unseen:
            entry.claimed, entry.settled = True, entry.refusal is not None
        if refused:
            response.messages.append(calls.refusal_results(refused))
        return len(refused) == len(contents)

    async def _settle(self, messages: Sequence[Message]) -> None:
        """Record the outcomes, from the conversation, of the last response's calls no function middleware saw run
        (the loop's own error for a tool the agent lacks); then the batch is over."""
        run, guard = self.run, self.guard
        open_calls = [entry for entry in run.batch.calls if entry.refusal is None and not entry.settled]
        if not open_calls:
            run.batch.clear()
            return
        results = {c.call_id: c for m in messages for c in m.contents if c.type == "function_result" and c.call_id}
        for entry in open_calls:
            found = results.get(entry.model_id or "")
            if found is None:
                continue  # not answered (an approval pending): the approval round decides it again
            view = calls.result_view(found)
            ok = guard.core.ok(found.exception is None, view)
            record = functools.partial(guard.policy.record_tool_result, call=entry.call, ok=ok, result=view)
            entry.settled = True
            await run.update(record, None)
        run.batch.clear()


class _ToolSide(af.FunctionMiddleware):
    """The guard's function middleware for one run: around each call the function loop runs (``_tools.py:2175``)."""

    def __init__(self, run: _Run) -> None:
        self.run, self.guard = run, run.guard

    async def process(self, context: af.FunctionInvocationContext, call_next: _Next) -> None:
        """Fires for each call the loop runs: hands back its batch decision (or decides it); a refusal is set as
        ``context.result`` without calling ``call_next``, so the function does not run. Else runs it (an exception is
        a failed call, re-raised), and records its result; with ``warn=True`` the guard's note goes after it."""
        run, core, policy = self.run, self.guard.core, self.guard.policy
        with core.scope(run.conversation, run.agent):
            raw_id, arguments = context.metadata.get("call_id"), calls.arguments_of(context.arguments)
            call_id = raw_id if isinstance(raw_id, str) else None
            entry = run.batch.claim(context.function.name, call_id, arguments)
            if entry is None:
                call = calls.tool_call(context.function.name, arguments, call_id, context.function)
                decide = functools.partial(policy.decide_tool_call, call=call)
                entry = run.batch.add(call, await run.update(decide, core.refused))
            if entry.refusal is not None:
                entry.settled = True
                context.result = entry.refusal.message
                return
            decided, calling = entry.call, _CALLING.set(run.place)
            try:
                await call_next()
            except af.MiddlewareException:
                raise  # MiddlewareTermination / MiddlewareFailure: the loop's own control flow, no outcome
            except Exception as error:
                entry.settled, kind = True, type(error).__name__
                failed = functools.partial(policy.record_tool_result, call=decided, ok=False, result=kind)
                await run.update(failed, None)
                raise
            finally:
                _CALLING.reset(calling)
            if getattr(context.result, "type", None) == "function_approval_request":
                return  # a middleware after the guard put it to a human: it did not run, its approval round runs it
            entry.settled = True
            view = calls.model_view(context.result)
            ok = core.ok(True, view)

            def record(state: GuardState) -> str | None:
                policy.record_tool_result(state, decided, ok=ok, result=view)
                return policy.warning(state, decided)

            note = await run.update(record, None)
            if note is not None:
                context.result = calls.noted(context.result, note)


async def _released(response: ChatResponse[Any]) -> Any:
    """``response`` as a streamed model call's updates."""
    for update in calls.updates_of(response):
        yield update
