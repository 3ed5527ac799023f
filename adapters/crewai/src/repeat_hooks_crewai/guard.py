"""``RepeatGuard``, the guard as CrewAI hooks: ``RepeatGuard(...).attach(crew)`` registers its five hooks in CrewAI's
process-global registries (``crewai/hooks/``), each acting only for what it is attached to, until ``detach()``.
Each hook applies one verb of the ``Policy`` through the kit's ``GuardCore`` (the README's "How it maps to CrewAI"
says which hook does what, and why); and its errors."""

from __future__ import annotations

import functools
import logging
import threading
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crewai.agents.agent_executor import AgentExecutor
from crewai.agents.parser import AgentFinish
from crewai.flow.flow import Flow
from crewai.flow.flow_context import current_flow_id
from crewai.hooks.dispatch import HookAborted, InterceptionPoint, get_hooks, register, unregister
from crewai.utilities.string_utils import sanitize_tool_name

from repeat_hooks import GuardState, Policy, ToolCall, kit, observe
from repeat_hooks.stores import StateStore

from . import calls
from .state import STATE_KEY, Book, BookSlot, GuardSetupError, RepeatGuardStopped, Seat, flow_states, put_book

__all__ = ["GuardSetupError", "RepeatGuard", "RepeatGuardStopped"]

_OWNER = "RepeatGuard"
logger = logging.getLogger("repeat_hooks")


class RepeatGuard:
    """The loop guard for CrewAI: ``RepeatGuard(max_calls=2).attach(crew)`` (a ``Crew``, a standalone ``Agent``, or a
    ``Flow``: every agent it runs), then ``crew.kickoff()``; ``detach()`` (or ``with ....attach(crew):``) takes the
    hooks out of CrewAI's global registries. The common keywords of every adapter (``kit.GuardCore``); ``store=None``
    keeps the states on the guarded object (and in a flow's state); ``fail`` also says what a crash of the guard's own
    hook does (CrewAI would run the call: ``hooks/dispatch.py:284``); ``cost`` cannot be fed (no usage reaches
    CrewAI's model-call hooks: ``hooks/llm_hooks.py:31``)."""

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
        **settings: Any,
    ) -> None:
        if cost is not None:
            raise GuardSetupError(
                f"repeat-hooks: {_OWNER}(cost=...) cannot be fed: CrewAI's model-call hooks carry no usage "
                "(crewai/hooks/llm_hooks.py:31); leave cost= and max_cost_usd unset"
            )
        why = {kit.Feed.COST: "CrewAI's model-call hooks carry no usage"}
        self.core = kit.GuardCore(
            policy, settings, owner=_OWNER, feeds=calls.FEEDS, why=why, error=GuardSetupError, **kit.common(locals())
        )
        self.policy: Policy = self.core.policy
        self._targets: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # by id: unhashable
        self._flows: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._adopted: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # given the LLM hooks
        self._lock = threading.RLock()  # parallel calls run in a ThreadPoolExecutor (agent_executor.py:1978)
        self._local = threading.local()  # per thread: the calls between their before and after hooks
        self._parsed = kit.ParsedStates()
        self._registered = False

    # -- attaching ------------------------------------------------------------------------------------------

    def attach(self, target: Any) -> RepeatGuard:
        """Guard ``target`` (a ``Crew``, an ``Agent`` run with ``agent.kickoff(...)``, or a ``Flow``), registering the
        hooks on first use; ``GuardSetupError`` for anything else, for a target guarded already (every call would count
        twice), and for a flow whose state cannot hold the guard's states."""
        from crewai import Agent, Crew

        if not isinstance(target, (Crew, Agent, Flow)):
            raise GuardSetupError(
                f"repeat-hooks: {_OWNER}.attach takes a Crew, an Agent or a Flow, not {type(target).__name__}"
            )
        for other in _guards():
            if other._guarded(target):
                raise GuardSetupError(
                    f"repeat-hooks: this {type(target).__name__} is guarded already (by "
                    f"{'this' if other is self else 'another'} {_OWNER}): every call would be counted twice. "
                    "Attach one guard, once."
                )
        if isinstance(target, Flow) and self.core.store is None and flow_states(target) is None:
            raise GuardSetupError(
                f"repeat-hooks: {_OWNER}.attach(flow): the flow's state has no {STATE_KEY!r} field to keep the "
                "guard's states in: add `repeat_hooks: dict[str, str] = {}` to the flow's state model, "
                "use a dict state, or give the guard a store="
            )
        if not self._registered:
            self._register(add=True)
        self._guard(target)
        return self

    def _guard(self, target: Any) -> None:
        """Add ``target``; a crew's copies (``crew.copy()``: ``kickoff_for_each`` kicks off one per input, with new
        ids and copied agents, ``crew.py:1123``) are guarded too, each with a book of its own."""
        self._targets[id(target)] = target
        put_book(target)
        self._adopt(target)
        if hasattr(target, "kickoff_for_each") and "copy" not in vars(target):
            copy = type(target).copy

            def copied() -> Any:
                made = copy(target)
                if self._guarded(target):
                    self._guard(made)
                return made

            object.__setattr__(target, "copy", copied)

    def detach(self) -> None:
        """Stop guarding: the hooks out of CrewAI's registries and of the executors given them."""
        targets = list(self._targets.values())
        self._targets.clear()
        self._flows.clear()
        if self._registered:
            self._register(add=False)
        executors = [*self._adopted.values()]
        executors += [getattr(agent, "agent_executor", None) for target in targets for agent in _agents(target)]
        for target in targets:
            vars(target).pop("copy", None)
        self._adopted.clear()
        for hooks in (
            getattr(e, name, []) for e in executors for name in ("before_llm_call_hooks", "after_llm_call_hooks")
        ):
            hooks[:] = [hook for hook in hooks if hook not in (self._before_llm, self._after_llm)]

    def _register(self, *, add: bool) -> None:
        """Put the five hooks into CrewAI's global registries (``add``: the legacy ``register_*_hook`` share them), or
        take them out."""
        names = ("EXECUTION_START", "PRE_MODEL_CALL", "POST_MODEL_CALL", "PRE_TOOL_CALL", "POST_TOOL_CALL")
        hooks = (self._on_start, self._before_llm, self._after_llm, self._before_tool, self._after_tool)
        points = [InterceptionPoint[name] for name in names]
        for point, hook in zip(points, hooks, strict=True):
            (register if add else unregister)(point, hook)
        self._registered = add

    def __enter__(self) -> RepeatGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def _adopt(self, target: Any) -> None:
        """Put the model-call hooks into the executors ``target``'s agents built before the guard was attached."""
        for agent in _agents(target):
            executor = getattr(agent, "agent_executor", None)
            if isinstance(executor, AgentExecutor):
                self._adopted[id(executor)] = executor
                for hooks, mine in (
                    (executor.before_llm_call_hooks, self._before_llm),
                    (executor.after_llm_call_hooks, self._after_llm),
                ):
                    hooks.extend([] if mine in hooks else [mine])

    def _guarded(self, thing: Any) -> bool:
        return thing is not None and self._targets.get(id(thing)) is thing

    # -- where a hook call belongs --------------------------------------------------------------------------

    def _owner(self, agent: Any, crew: Any) -> Any:
        """The guarded object a hook call belongs to (a flow running it, its crew, the agent), or ``None``."""
        flow = self._flows.get(current_flow_id.get() or "")
        if flow is not None:
            return flow
        if self._guarded(crew):
            return crew
        return agent if self._guarded(agent) else None

    def _on_start(self, ctx: Any) -> None:
        """Fires at ``EXECUTION_START``: a kickoff of a guarded crew (or of a crew running a guarded agent), standalone
        agent (``ctx.flow`` is its executor) or flow starts a turn, its id the caller's (``kit.request(turn_id=...)``)
        or fresh; two guards on one run fail. Not a new turn: a crew resumed from a checkpoint (``crews/utils.py:269``),
        a crew or agent inside a guarded flow, a human-feedback round (no ``EXECUTION_START``: :3490)."""
        flow, crew, flow_id = ctx.flow, ctx.crew, current_flow_id.get() or ""
        if crew is not None and self._flows.get(flow_id) is not None:
            self._adopt(crew)  # its agents' executors, built at an earlier kickoff, copied no hooks of this guard
        agents = [flow.agent] if isinstance(flow, AgentExecutor) else _agents(crew)
        if flow is None or isinstance(flow, AgentExecutor):
            acting = [g for g in _guards() if g._flows.get(flow_id) is not None
                      or g._guarded(crew) or any(g._guarded(agent) for agent in agents)]  # fmt: skip
            if len(acting) > 1:
                raise GuardSetupError(
                    f"repeat-hooks: two {_OWNER}s guard this run (a flow and its crew, a crew and its agent): every "
                    "call would be counted twice. Attach one guard, to the outermost (an agent used alone too: "
                    "a guard of its own is fine, as long as no guard is on a crew running it)."
                )
        owners = [crew] if self._guarded(crew) else [agent for agent in agents if self._guarded(agent)]
        if flow is not None and not isinstance(flow, AgentExecutor) and self._guarded(flow):
            owners = [flow]
            for key in [key for key, known in self._flows.items() if known is flow]:  # one id per flow: bounded
                del self._flows[key]
            self._flows[flow_id] = flow
        elif self._flows.get(flow_id) is not None:
            return
        for owner in owners:  # an agent a crew runs: its turn starts at the crew's kickoff
            self._start(owner, flow, crew)

    def _start(self, owner: Any, flow: Any, crew: Any) -> None:
        book = put_book(owner)
        self._adopt(owner)
        resumed = crew is not None and getattr(crew, "checkpoint_kickoff_event_id", None) is not None
        default = getattr(getattr(flow, "state", None), "id", None) if owner is flow else None
        book.conversation = self.core.conversation_id(default)
        if self.core.store is not None and book.conversation is None:
            raise GuardSetupError(
                f"repeat-hooks: {_OWNER}(store=...) keeps each conversation under its id, and this "
                f"{type(owner).__name__} has none: kick it off in repeat_hooks.kit.request(conversation_id=...)"
            )
        book.new_turn(None if resumed else self.core.turn_id(None) or uuid.uuid4().hex)

    # -- the model calls ------------------------------------------------------------------------------------

    def _before_llm(self, ctx: Any) -> None:
        """Fires before each model call of a guarded agent: remembers its executor, checks the policy's tool names
        (once for a set), and decides the call unless the batch before it did. A stop raises ``RepeatGuardStopped``
        (``False`` would be retried with the whole task: ``utilities/agent_utils.py:496``). Returns ``None``."""
        at = self._find(ctx)
        if at is None:
            return None
        seat = at.seat
        seat.executor = ctx.executor
        self.core.check_tool_names({sanitize_tool_name(t.name) for t in ctx.executor.original_tools or ()})
        if seat.ahead:
            seat.ahead = False
        else:
            with self._lock:
                self._record(at, seat.batch.in_order(everything=True))
                stop = self._apply(at, self.policy.decide_model_call, outage=self.core.ended)
            if stop is not None:
                at.book.stops[at.role] = stop  # one per role, cleared at each turn
                raise RepeatGuardStopped(stop)
        seat.watch.start()
        return None

    def _after_llm(self, ctx: Any) -> None:
        """Fires after a model call that answered with text (not after tool calls): counts it, with its seconds and
        answer. Returns ``None`` (the answer stands)."""
        at = self._find(ctx)
        if at is not None and self.core.records_model_calls:
            with self._lock:
                self._model_call(at, calls.answer_of(ctx.response))

    def _model_call(self, at: _At, answer: str | None) -> None:
        self._apply(at, self.policy.record_model_call, seconds=at.seat.watch.seconds(), answer=answer)

    # -- the tool calls -------------------------------------------------------------------------------------

    def _before_tool(self, ctx: Any) -> bool | None:
        """Fires before each tool call of a guarded agent, on its thread: the first call of a response decides all its
        calls as one batch (all in the history already: ``agents/agent_executor.py:1964``). Returns ``False`` for a
        refusal (the tool does not run), else ``None``; a crash of the guard's own code follows ``fail``."""
        at = self._find(ctx)
        if at is None:
            return None
        try:
            with self._lock:
                entry = self._claim(at, ctx)
        except Exception as error:  # CrewAI would swallow it and run the tool (hooks/dispatch.py:284)
            mistake = isinstance(error, GuardSetupError)  # a blocking hook's HookAborted reaches no one: raised after
            if not mistake:
                logger.error("repeat_hooks: %s's before-tool hook failed: %s: %s; failing %s",
                             _OWNER, type(error).__name__, error, self.core.fail)  # fmt: skip
            refusal = self.core.refused if not mistake else None
            entry = kit.Decided(calls.tool_call(ctx.tool_name, ctx.tool_input), refusal, tag=error, settled=True)
        self._stack().append((at.seat, entry))
        return False if entry.refusal is not None or isinstance(entry.tag, GuardSetupError) else None

    def _claim(self, at: _At, ctx: Any) -> kit.Decided:
        seat = at.seat
        executor = seat.executor = seat.executor or getattr(ctx.agent, "agent_executor", None)
        message, found = calls.response_calls(list(getattr(getattr(executor, "state", None), "messages", None) or ()))
        if message is not None and message is not seat.response:
            seat.response = message
            if self.core.records_model_calls:
                self._model_call(at, None)
            batch = [calls.tool_call(name, arguments, _tool(executor, name)) for name, arguments in found]
            decisions = self._apply(at, self.policy.decide_tool_calls, batch, outage=[self.core.refused] * len(batch))
            seat.batch.decided(batch, decisions)
        entry = seat.batch.claim(ctx.tool_name, None, ctx.tool_input)
        if entry is None:  # not in the response (a hook of the user's changed it): decided alone
            call = calls.tool_call(ctx.tool_name, ctx.tool_input, ctx.tool)
            entry = seat.batch.add(call, self._apply(at, self.policy.decide_tool_call, call, outage=self.core.refused))
        return entry

    def _after_tool(self, ctx: Any) -> str | None:
        """Fires after each tool call of a guarded agent, blocked ones too (``agents/agent_executor.py:2308``): returns
        the refusal (replacing CrewAI's "blocked" text) or the result with the guard's note, else ``None``; records the
        outcome. After a response's last call, decides the next model call: a stop finishes the task with its message
        (``executor.state.is_finished``, read before the model call: :1716) or raises (``on_stop="raise"``)."""
        stack = self._stack()
        at = self._find(ctx) if stack else None
        if at is None or stack[-1][1].call.name != ctx.tool_name:  # an earlier hook blocked it before ours ran
            return None
        seat, entry = stack.pop()
        if isinstance(entry.tag, GuardSetupError):
            raise entry.tag
        text = entry.refusal.message if entry.refusal is not None else None  # first: it stands if the rest fails
        try:
            with self._lock:
                return self._settle(at, seat, entry, ctx) or text
        except HookAborted:
            raise
        except Exception as error:  # CrewAI would swallow it, and hand the model its "blocked" text for a refusal
            logger.error("repeat_hooks: %s's after-tool hook failed: %s: %s", _OWNER, type(error).__name__, error)
            return text

    def _settle(self, at: _At, seat: Seat, entry: kit.Decided, ctx: Any) -> str | None:
        """Records the outcome in the batch's order (``Batch.in_order``); the result with the note, if any."""
        call, result, ran = entry.call, ctx.tool_result, False
        if entry.refusal is not None:
            calls.uncount(seat.executor, ctx.tool_name, ctx.tool_input, entry.refusal.message)
        elif calls.blocked(ctx.tool_name, result):
            entry.outcome = functools.partial(self.policy.record_rejection, call=call)
        elif self.core.records_outcomes and not entry.settled:
            ok = self.core.ok(calls.succeeded(ctx.tool, result), result)
            entry.outcome = functools.partial(self.policy.record_tool_result, call=call, ok=ok, result=result)
            ran = True
        entry.settled = True
        over = seat.batch.over
        note = self._record(at, seat.batch.in_order(everything=over), call if ran and self.policy.warn else None)
        if over:
            self._decide_ahead(at, seat)
        return kit.noted(str(result), note) if note is not None else None

    def _record(self, at: _At, outcomes: list[calls.Outcome], warn: ToolCall | None = None) -> str | None:
        """Record ``outcomes``; the note after ``warn``'s result (after its decision if not recorded yet)."""

        def record(state: GuardState, *, turn_id: str | None) -> str | None:
            for outcome in outcomes:
                outcome(state, turn_id=turn_id)
            return self.policy.warning(state, warn) if warn is not None else None

        return self._apply(at, record) if outcomes or warn is not None else None

    def _decide_ahead(self, at: _At, seat: Seat) -> None:
        stop = self._apply(at, self.policy.decide_model_call, outage=self.core.ended)
        seat.ahead = stop is None
        if stop is None:
            return
        at.book.stops[at.role] = stop
        stopped = self.core.stopped(stop, RepeatGuardStopped)
        if stopped is not None:
            raise stopped
        seat.executor.state.current_answer = AgentFinish(thought="", output=stop.message, text=stop.message)
        seat.executor.state.is_finished = True

    def _apply(self, at: _At, verb: Callable[..., Any], *args: Any, outage: Any = None, **kwargs: Any) -> Any:
        """One verb of the policy on the agent's state, in the turn of the guarded object's kickoff."""
        turn = at.book.turn_id

        def change(state: GuardState) -> Any:
            return verb(state, *args, turn_id=turn, **kwargs)

        if not observe.OBSERVERS:
            return self.core.update_now(at.where, change, outage=outage)
        with self.core.scope(at.book.conversation, at.role):  # the observers' conversation and agent
            return self.core.update_now(at.where, change, outage=outage)

    def _find(self, ctx: Any) -> _At | None:
        owner = self._owner(ctx.agent, ctx.crew)
        if owner is None:
            return None
        book, role = put_book(owner), str(getattr(ctx.agent, "role", None) or "agent")
        where: str | BookSlot = BookSlot(book, role, owner if isinstance(owner, Flow) else None, self._parsed)
        if self.core.store is not None:
            where = self.core.key(f"{STATE_KEY}:{book.conversation}", role) or STATE_KEY
        return _At(book, role, book.seat(role, self.core.clock), where)

    def _stack(self) -> list[tuple[Seat, kit.Decided]]:
        stack: list[tuple[Seat, kit.Decided]] = self._local.__dict__.setdefault("stack", [])
        return stack


@dataclass(slots=True)
class _At:
    """Where a hook call belongs: the guarded object's book, the agent's role and seat, and where its state is."""

    book: Book
    role: str
    seat: Seat
    where: str | BookSlot


def _guards() -> list[RepeatGuard]:
    """The guards attached in this process (their hooks are in CrewAI's registries)."""
    found = (getattr(hook, "__self__", None) for hook in get_hooks(InterceptionPoint.PRE_TOOL_CALL))
    return [guard for guard in found if isinstance(guard, RepeatGuard)]


def _agents(target: Any) -> list[Any]:
    """The agents of a crew (its manager too), or the agent itself; a flow's are built as it runs."""
    if hasattr(target, "agents") and isinstance(target.agents, list):
        return [*target.agents, *([target.manager_agent] if getattr(target, "manager_agent", None) else [])]
    return [target] if hasattr(target, "role") else []


def _tool(executor: Any, name: str) -> Any:
    """The tool ``name`` runs in ``executor`` (its MCP annotations give the call's hints)."""
    return next(
        (t for t in getattr(executor, "original_tools", None) or () if sanitize_tool_name(t.name) == name), None
    )
