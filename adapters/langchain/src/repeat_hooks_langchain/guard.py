"""``RepeatGuardMiddleware``, a LangChain v1 agent middleware for ``create_agent``, and its errors. Each hook is
written once, as a generator yielding its one state update, which the sync hooks run with ``GuardCore.update_now``
and the async ones with ``await GuardCore.update``. Where each hook sits, and why: the README's "How it maps"."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, TypeVar

from langchain.agents.middleware import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.runtime import Runtime
from langgraph.types import Command

from repeat_hooks import GuardSetupError, GuardState, Policy, StateStore, kit

from . import calls
from .state import HINTS_KEY, STOP_KEY, UNDECIDED_KEY, GraphSlot, RepeatGuardState, conversation_key

__all__ = ["GuardSetupError", "RepeatGuardMiddleware", "RepeatGuardStopped"]

R = TypeVar("R")
Steps = Generator[tuple[Any, Callable[[GuardState], Any] | None, Any], Any, R]
"""A hook: yields its update (where, change, outage; change ``None``: none), is sent what it decided, returns."""

OWNER = "RepeatGuardMiddleware"
RAN_KEY = "repeat_guard_ran"
"""The ``response_metadata`` key of the ``ToolMessage`` of a call a reviewer edited: the call as it was decided
afresh (``{"name", "args", "refused"}``), so the next step's counts follow what ran (never sent to the model)."""
PER_CALL_ORDER = (
    "HumanInTheLoopMiddleware(interrupt_mode='per_call') reviews a call inside the tool-call chain, and it is "
    "listed after RepeatGuardMiddleware, so a reviewer's edit would run without being decided; list "
    "RepeatGuardMiddleware after it: create_agent(..., middleware=[HumanInTheLoopMiddleware(interrupt_on={...}, "
    "interrupt_mode='per_call'), RepeatGuardMiddleware(...)])"
)
TOOLS_OFFERED = (
    " (checked against the tools the model call is offered, request.tools: a middleware listed before "
    "RepeatGuardMiddleware that narrows them hides the others from it; list that middleware after the guard, "
    "or pass RepeatGuardMiddleware(check_tools=False))"
)
NO_USAGE = (
    "Policy(max_cost_usd=...) is set but the model's response has no usage_metadata, so the budget could never "
    "trip; make the chat model report usage (e.g. ChatOpenAI(stream_usage=True) when streaming), or drop max_cost_usd"
)


class RepeatGuardStopped(kit.GuardStopped):
    """The guard ended the turn with ``on_stop="raise"``: raised from its ``before_model`` node, out of ``invoke`` /
    ``ainvoke`` / ``stream`` / ``astream`` (LangChain has no run-error base of its own). ``stop``: why."""


class RepeatGuardMiddleware(AgentMiddleware[RepeatGuardState, Any, Any]):
    """Stops a ``create_agent`` agent calling the same tool over and over; ends a stuck turn.

    A ``Policy`` (default ``Policy()``) or its settings as keywords, and the common keywords of every adapter
    (``repeat_hooks.kit.core``): ``store`` (the counts under the thread id; ``None``: in the graph state), ``cost``
    (of a response's ``usage_metadata``), ``clock``, ``is_failure``, ``check_tools``, ``on_stop``, ``fail``. A
    mistake fails here or at the first model call, naming the right spelling; so does a wrong middleware order.
    """

    state_schema = RepeatGuardState

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
        super().__init__()
        self.core = kit.GuardCore(policy, settings, owner=OWNER, feeds=calls.FEEDS, **kit.common(locals()))
        self.policy = self.core.policy
        """The rules, shared by every thread (settings only; the counts are in each thread's state)."""
        self._parsed = kit.ParsedStates()

    # -- the hooks -----------------------------------------------------------------------------------

    def before_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires once per ``invoke`` / ``stream`` (not when an interrupted run resumes): starts a turn, or goes on
        with the caller's (``config["run_id"]``, ``repeat_hooks.kit.request(turn_id=...)``). Returns the update.
        Raises ``GuardSetupError`` when a middleware listed after the guard has an ``after_agent`` hook."""
        return self._run(self._start(state, runtime))

    async def abefore_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_agent`` for ``ainvoke`` / ``astream``."""
        return await self._arun(self._start(state, runtime))

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires before each model call: records the last tool results, then ends the turn if a rule trips, with
        the agent's own end jump (``{"jump_to": "end", "messages": [AIMessage(stop.message)]}``: the model node
        does not run), or raises ``RepeatGuardStopped`` (``on_stop="raise"``)."""
        return self._run(self._before_model(state))

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_model`` for ``ainvoke`` / ``astream``."""
        return await self._arun(self._before_model(state))

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Fires around each model call (inside the model node): times it, counts it, and decides its response's
        tool calls as one batch before any runs. Returns the response with each refused call answered by its
        refusal (``calls.refuse``), and the state update. A model call that raises is not counted."""
        watch = self._watch(request)
        return self._run(self._after_model(request, watch, handler(request)))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """``wrap_model_call`` for ``ainvoke`` / ``astream``."""
        watch = self._watch(request)
        return await self._arun(self._after_model(request, watch, await handler(request)))

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        """Fires around each tool call the guard allowed: returns ``handler``'s result. A call a reviewer edited is
        decided afresh on its new arguments: refused, it returns the refusal as its ``ToolMessage``."""
        edit = _edit(request)  # None (the common case): it runs as the model node decided it, nothing to decide
        refusal, ran = (None, None) if edit is None else self._run(self._verdict(request, *edit))
        if refusal is not None:
            return refusal
        try:
            return _stamp(handler(request), ran)
        except GraphInterrupt as interrupt:
            _check_review(interrupt)
            raise

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        """``wrap_tool_call`` for ``ainvoke`` / ``astream``."""
        edit = _edit(request)
        refusal, ran = (None, None) if edit is None else await self._arun(self._verdict(request, *edit))
        if refusal is not None:
            return refusal
        try:
            return _stamp(await handler(request), ran)
        except GraphInterrupt as interrupt:
            _check_review(interrupt)
            raise

    @hook_config(can_jump_to=["model"])
    def after_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Fires when the agent loop ends. When it ended only because the guard refused every call of the last
        response, returns ``{"jump_to": "model"}``: the model reads the refusals in the same turn. Else ``None``."""
        if not calls.ended_on_refusals(state.get("messages", ())):
            return None
        _check_after_agent_order(self.name)  # a run resumed on a graph built in another order
        return {"jump_to": "model"}

    @hook_config(can_jump_to=["model"])
    async def aafter_agent(self, state: RepeatGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``after_agent`` for ``ainvoke`` / ``astream``."""
        return self.after_agent(state, runtime)

    # -- each hook, written once ---------------------------------------------------------------------

    def _start(self, state: Mapping[str, Any], runtime: Runtime[Any]) -> Steps[dict[str, Any]]:
        _check_after_agent_order(self.name)
        info = getattr(runtime, "execution_info", None)
        turn_id = getattr(info, "run_id", None) or self.core.turn_id(_asked(state) or getattr(info, "task_id", None))
        update: dict[str, Any] = {STOP_KEY: None}
        yield self._where(state, update), lambda guard: self.policy.start_turn(guard, turn_id=turn_id), None
        return update

    def _before_model(self, state: Mapping[str, Any]) -> Steps[dict[str, Any] | None]:
        known = calls.saved_hints(state.get(HINTS_KEY))
        notes: list[ToolMessage] = []

        def change(guard: GuardState) -> Any:
            notes[:] = self._record_outcomes(guard, state.get("messages", ()), state.get(UNDECIDED_KEY) or (), known)
            return self.policy.decide_model_call(guard)

        update: dict[str, Any] = {}
        stop = yield self._where(state, update), change, self.core.ended
        if stop is None:
            if notes:  # the results the model is about to read, with the guard's note (replaced by their ids)
                update["messages"] = list(notes)
            return update or None
        error = self.core.stopped(stop, RepeatGuardStopped)
        if error is not None:
            raise error
        update.update(jump_to="end", messages=[AIMessage(content=stop.message)])
        update[STOP_KEY] = stop.model_dump(mode="json")
        if state.get(UNDECIDED_KEY):
            update[UNDECIDED_KEY] = []
        if state.get(HINTS_KEY):
            update[HINTS_KEY] = {}
        return update

    def _after_model(
        self, request: ModelRequest[Any], watch: kit.Stopwatch, response: ModelResponse[Any]
    ) -> Steps[ExtendedModelResponse[Any]]:
        seconds, state, known = watch.seconds(), request.state, calls.tool_hints(request.tools)
        messages = [message for message in response.result if isinstance(message, AIMessage)]
        if None not in (self.core.cost, self.policy.max_cost_usd) and any(m.usage_metadata is None for m in messages):
            raise GuardSetupError(NO_USAGE)
        cost = (
            0.0
            if self.core.cost is None
            else sum(self.core.cost_of(m.usage_metadata) for m in messages if m.usage_metadata is not None)
        )
        # Calls the model node answered itself (structured output with ToolStrategy) never reach a tool.
        answered = {message.tool_call_id for message in response.result if isinstance(message, ToolMessage)}
        last = next((message for message in reversed(messages) if message.tool_calls), None)  # the tool node's
        asked = [] if last is None else last.tool_calls
        skipped = {n for n, call in enumerate(asked) if call.get("id") and call["id"] in answered}
        batch = [n for n in range(len(asked)) if n not in skipped]
        decided = [calls.guard_call(asked[n], known) for n in batch]
        answer = messages[-1].text if messages and not asked else None  # a text answer, for max_same_answers

        def change(guard: GuardState) -> Any:
            self.policy.record_model_call(guard, seconds=seconds, cost_usd=cost, answer=answer)
            return self.policy.decide_tool_calls(guard, decided) if asked else []

        update: dict[str, Any] = {}
        refusals = yield self._where(state, update), change, [self.core.refused] * len(decided)
        refused = {n: refusal.message for n, refusal in zip(batch, refusals, strict=True) if refusal is not None}
        if last is not None and refused:
            result = calls.refuse(response.result, last, refused)
            response = ModelResponse(result=result, structured_response=response.structured_response)
        kept = [n for n in range(len(asked)) if n not in refused]
        undecided = sorted(kept.index(n) for n in skipped)  # not the guard's to decide
        if undecided or state.get(UNDECIDED_KEY):
            update[UNDECIDED_KEY] = undecided  # written when there is something to set or to clear
        names = sorted({asked[n]["name"] for n in kept})
        batch_hints = {name: known[name] for name in names if name in known}
        if batch_hints or state.get(HINTS_KEY):
            update[HINTS_KEY] = batch_hints
        return ExtendedModelResponse(model_response=response, command=Command(update=update) if update else None)

    def _verdict(
        self, request: ToolCallRequest, original: LangChainToolCall, running: LangChainToolCall
    ) -> Steps[tuple[ToolMessage | None, dict[str, Any] | None]]:
        """A reviewer's edit (``_edit``: the call the model asked for, ``original``, and the one that would run)
        decided afresh, on the counts as the model node left them: its refusal (it does not run), else ``None`` and
        the call that runs, stamped on its result (``RAN_KEY``)."""
        state, call = request.state, request.tool_call
        tools = getattr(request.runtime, "tools", None) or ()
        known = {**calls.saved_hints(state.get(HINTS_KEY)), **calls.tool_hints(tools)}
        rejected, edited = calls.guard_call(original, known), calls.guard_call(running, known)

        def change(guard: GuardState) -> Any:
            guard = guard.model_copy(deep=True)  # decided for good in the next before_model, with its outcome
            self.policy.record_rejection(guard, rejected)
            return self.policy.decide_tool_call(guard, edited)

        refusal = yield self._where(state, None), change, self.core.refused
        ran = {"name": running["name"], "args": running.get("args"), "refused": refusal is not None}
        if refusal is None:
            return None, ran
        return calls.answer(call, calls.edit_refusal(refusal.reason, running["name"]), {RAN_KEY: ran}), None

    # -- helpers -------------------------------------------------------------------------------------

    def _record_outcomes(
        self, guard: GuardState, messages: Sequence[Any], undecided: Sequence[int], known: calls.ByTool
    ) -> list[ToolMessage]:
        """Record each call of the last batch as it ran and as the model read it. A call a reviewer rejected did
        not run (``record_rejection``); one a reviewer edited is rejected too, and what ran decided afresh, as the
        tool node decided it. Returns the results that get the guard's note (``warn=True``), with it."""
        message, answers = calls.last_batch(messages)
        notes: list[ToolMessage] = []
        if message is None:
            return notes
        made, policy = message.tool_calls, self.policy
        for answer, position in zip(answers, calls.answered_positions(made, answers), strict=True):
            if position is None or position in undecided:
                continue  # a refusal (its call left tool_calls), or not the guard's (a structured-output call)
            call = calls.guard_call(made[position], known)
            ran = answer.response_metadata.get(RAN_KEY) if isinstance(answer.response_metadata, dict) else None
            if isinstance(ran, dict) and isinstance(ran.get("name"), str):  # a reviewer replaced the call
                policy.record_rejection(guard, call)
                args = ran.get("args")
                call = calls.guard_call(
                    {"name": ran["name"], "args": args if isinstance(args, dict) else {}, "id": None}, known
                )
                if policy.decide_tool_call(guard, call) is not None or ran.get("refused"):
                    continue
            elif calls.rejected_by_reviewer(answer):
                policy.record_rejection(guard, call)
                continue
            ok = self.core.ok(calls.succeeded(answer), view := calls.model_view(answer))
            policy.record_tool_result(guard, call, ok=ok, result=view, delivery_id=answer.id or None)
            note = policy.warning(guard, call) if answer.id else None
            if note is not None:
                notes.append(calls.noted(answer, note))
        return notes

    def _where(self, state: Mapping[str, Any], update: dict[str, Any] | None) -> str | GraphSlot:
        """The conversation's store key, else its graph state (written into ``update``)."""
        if self.core.store is None:
            return GraphSlot(self._parsed, state, update)
        return conversation_key(_config(), self.core.conversation_id())

    def _run(self, steps: Steps[R]) -> R:
        """A hook on the sync path: its update with ``update_now`` (an async-only store on the guard's own loop)."""
        with self._scope():
            where, change, outage = next(steps)
            return _finish(steps, None if change is None else self.core.update_now(where, change, outage=outage))

    async def _arun(self, steps: Steps[R]) -> R:
        """A hook on the async path: its update awaited."""
        with self._scope():
            where, change, outage = next(steps)
            return _finish(steps, None if change is None else await self.core.update(where, change, outage=outage))

    def _scope(self) -> contextlib.AbstractContextManager[Any]:
        """The observers' scope: the run's thread (or the caller's conversation) and ``create_agent(name=...)``."""
        config = _config()
        configurable, metadata = config.get("configurable"), config.get("metadata")
        thread = configurable.get("thread_id") if configurable else None
        name = metadata.get("lc_agent_name") if metadata else None
        return self.core.scope(str(thread) if thread is not None else self.core.conversation_id(), name)

    def _watch(self, request: ModelRequest[Any]) -> kit.Stopwatch:
        """Before a model call: the policy's tool names among the tools it is offered (once per tool set), and a
        started ``Stopwatch``."""
        names = [name for tool in request.tools if isinstance(name := getattr(tool, "name", None), str)]
        try:
            self.core.check_tool_names(names)
        except GuardSetupError as error:
            raise GuardSetupError(f"{error}{TOOLS_OFFERED}") from None
        watch = kit.Stopwatch(self.core.clock)
        watch.start()
        return watch


def _finish(steps: Steps[R], decided: Any) -> R:
    try:
        steps.send(decided)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("a hook makes one update")


def _config() -> Mapping[str, Any]:
    try:
        return get_config()
    except RuntimeError:  # not inside a graph run
        return {}


def _stamp(result: ToolMessage | Command[Any], ran: dict[str, Any] | None) -> ToolMessage | Command[Any]:
    """``result`` with the call that ran in its ``response_metadata``, when a reviewer edited the call."""
    if ran is None or not isinstance(result, ToolMessage):
        return result
    return result.model_copy(update={"response_metadata": {**result.response_metadata, RAN_KEY: ran}})


def _check_review(interrupt: GraphInterrupt) -> None:
    """Raise ``GuardSetupError`` when ``interrupt``, raised out of a tool call inside the guard's tool-call hook, is a
    per-call review: the reviewer's edit would run undecided. Else the caller raises ``interrupt`` on."""
    items = interrupt.args[0] if interrupt.args and isinstance(interrupt.args[0], Sequence) else ()
    for item in items:
        value = getattr(item, "value", None)
        if isinstance(value, Mapping) and value.get("type") == "tool_approval":
            raise GuardSetupError(PER_CALL_ORDER) from None


def _edit(request: ToolCallRequest) -> tuple[LangChainToolCall, LangChainToolCall] | None:
    """The call a tool-node request runs, when a reviewer's batched edit (``HITL_EDITS_KEY``) or an edited request
    made it differ from the one the model asked for: ``(asked, running)``; ``None`` (the common case, decided in
    the model node already) when it runs as asked or is none of the last response's calls."""
    state, call = request.state, request.tool_call
    message = calls.last_ai_message(state.get("messages", ()))
    position = None if message is None else calls.request_position(message, call)
    if message is None or position is None:
        return None
    original = message.tool_calls[position]
    running = calls.edit_of(state.get(calls.HITL_EDITS_KEY), call) or call
    return None if calls.same_call(original, running) else (original, running)


def _check_after_agent_order(own: str) -> None:
    """Raise ``GuardSetupError`` when a middleware listed after the guard (``own``) has an ``after_agent`` hook, read
    from the running task's channels (see the README); outside a graph run, or another shape, nothing is checked."""
    read = (_config().get("configurable") or {}).get("__pregel_read")
    args: Sequence[Any] = getattr(read, "args", None) or ()
    channels = args[1] if len(args) > 1 and isinstance(args[1], Mapping) else {}
    head, tail = "branch:to:", ".after_agent"
    nodes = [
        c[len(head) : -len(tail)] for c in channels if isinstance(c, str) and c.startswith(head) and c.endswith(tail)
    ]
    later = nodes[nodes.index(own) + 1 :] if own in nodes else []
    if not later:
        return
    one, listed = len(later) == 1, ", ".join(f"{name}(...)" for name in later)
    raise GuardSetupError(
        f"{', '.join(later)} {'is' if one else 'are'} listed after RepeatGuardMiddleware with an after_agent hook, "
        "which runs first (after_agent hooks run in reverse list order), as if the run were over, when the guard's "
        "may still send the agent back to the model (ShellToolMiddleware would have closed its shell); list "
        f"RepeatGuardMiddleware after {'it' if one else 'them'}: create_agent(..., middleware=[{listed}, "
        "RepeatGuardMiddleware(...)])"
    )


def _asked(state: Mapping[str, Any]) -> str | None:
    """The id of the user message the agent answers (the last ``HumanMessage``): a graph that runs the agent again
    on the same message (a loop around its node) goes on with the same turn; ``None`` without one."""
    for message in reversed(state.get("messages") or ()):
        if isinstance(message, HumanMessage):
            return message.id or None
    return None
