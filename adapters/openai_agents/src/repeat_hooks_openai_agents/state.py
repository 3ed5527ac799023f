"""Where the state lives: with a ``store``, under the conversation's id; else the conversation's ``GuardState`` in
the run context (saved with a paused ``RunState``, workflow state under Temporal). What the guard keeps of each run
(its turn, its response's decided calls, its stop) hangs beside the run's ``Usage``; ``stop_of`` reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents import TResponseInputItem, Usage
from agents.memory import Session
from agents.result import RunResultBase
from pydantic import BaseModel

from repeat_hooks import GuardState, Stop, StopRepeatedCalls
from repeat_hooks.kit import Batch, Beside, GuardStopped, Slot, Stopwatch, load_state

GUARD_ATTRIBUTE = "repeat_guard"
"""The attribute of your own context object that holds the conversation's ``GuardState``."""


def find_state(context: Any) -> GuardState | None:
    """The ``GuardState`` the run context holds: the context itself or its ``repeat_guard``; ``None`` if neither."""
    if isinstance(context, GuardState):
        return context
    state = getattr(context, GUARD_ATTRIBUTE, None)
    return state if isinstance(state, GuardState) else None


def missing(context: Any) -> str:
    """What to say when the run context holds no ``GuardState`` (``context``: the application's context)."""
    if isinstance(context, StopRepeatedCalls) or isinstance(getattr(context, GUARD_ATTRIBUTE, None), StopRepeatedCalls):
        return (
            "repeat-hooks: the run context holds a StopRepeatedCalls (repeat-hooks 0.1). The settings now go to "
            "guard_agent and the context holds only the conversation's counts: agent = guard_agent(Agent(...), "
            "max_calls=2, ...); Runner.run(agent, input, context=GuardState()) (or your context's "
            f"`{GUARD_ATTRIBUTE}` holding a GuardState; a saved guard's counts: guard.state)"
        )
    if isinstance(context, Mapping) and ("turn" in context or "state" in context or GUARD_ATTRIBUTE in context):
        return (
            "repeat-hooks: the run context is a plain dict, not a GuardState: this RunState was restored with "
            "RunState.from_json(agent, data) and no context_deserializer, so the SDK left the saved context as "
            "JSON. Restore it with RunState.from_json(agent, data, context_deserializer=context_deserializer) "
            "(from repeat_hooks_openai_agents), or context_deserializer=YourContext.model_validate for your own "
            f"pydantic context holding the state in `{GUARD_ATTRIBUTE}`"
        )
    return (
        "repeat-hooks: a guarded agent keeps each conversation's counts in its run context: pass "
        "Runner.run(agent, input, context=GuardState()) (one per conversation, reused for its every turn), or a "
        f"context object with a `{GUARD_ATTRIBUTE}` attribute holding one (got a context of type "
        f"{type(context).__name__}), or give guard_agent a store= and name the conversation"
    )


@dataclass(frozen=True)
class InContext:
    """The ``Slot`` of the run context's ``GuardState``: changed in place, saved by the SDK with the context."""

    state: GuardState

    def read(self) -> GuardState:
        return self.state

    def write(self, state: GuardState) -> None:
        """In place: nothing to write."""


def context_serializer(context: Any) -> Mapping[str, Any]:
    """``RunState.to_json(context_serializer=...)``: a pydantic context (a ``GuardState``, or yours holding one)
    dumped whole (the SDK's default drops unset fields); raises ``TypeError`` for any other context."""
    if isinstance(context, BaseModel):
        return context.model_dump(mode="json")
    raise TypeError(
        "repeat-hooks: context_serializer handles pydantic contexts; for "
        f"{type(context).__name__}, dump `{GUARD_ATTRIBUTE}.model_dump(mode='json')` yourself"
    )


def context_deserializer(data: Mapping[str, Any]) -> GuardState:
    """``RunState.from_json(context_deserializer=...)``: the ``GuardState`` as saved (a 0.1 or 0.2 state loads
    too); raises ``repeat_hooks.StateCorrupt`` saying how to recover. Your own pydantic context:
    ``context_deserializer=YourContext.model_validate``."""
    return load_state(dict(data))


def has_worked(usage: Usage) -> bool:
    """``True`` once ``usage`` recorded model work (a resumed run's restored usage has; so has a response's)."""
    return bool(usage.requests or usage.input_tokens or usage.output_tokens or usage.total_tokens)


def next_turn(state: GuardState) -> str:
    """The id of the turn a new run starts when the caller names none: ``turn-<n>`` (deterministic under replay)."""
    number = state.turn.number + 1
    while f"turn-{number}" == state.turn.id:  # a state restored from elsewhere may use that id
        number += 1
    return f"turn-{number}"


@dataclass(eq=False)
class Run:
    """What the guard keeps of one run (``Runner.run``, its handoffs and resumes here): ``where`` its state is, the
    ids the caller named, whether it ``resumed`` (carries on the state's turn), its turn once entered, its latest
    response's ``batch``, its calls by id (``invoked``), its stopwatch, ``stop``, setup ``error``, and the tool's own
    output of each call whose output got the guard's note (``own``, by call id, until ``tool_use_behavior`` takes
    it)."""

    where: str | Slot
    conversation_id: str | None
    named: str | None
    resumed: bool
    turn_id: str | None = None
    batch: Batch = field(default_factory=Batch)
    invoked: dict[str, Any] = field(default_factory=dict)
    watch: Stopwatch | None = None
    stop: Stop | None = None
    error: Exception | None = None
    own: dict[str, Any] = field(default_factory=dict)


Runs = Beside[Run]
"""What one guard keeps of each run, beside the run's ``Usage`` (by identity: it is unhashable), dropped with it."""


def stop_of(result: RunResultBase | BaseException, /) -> Stop | None:
    """The guard's ``Stop`` when it ended the run ``result`` comes from (a ``RunResult``, a finished
    ``RunResultStreaming``, or the ``RepeatGuardStopped`` it raised); ``None`` when the run ended otherwise; anything
    else: ``GuardSetupError``."""
    if isinstance(result, BaseException):
        return GuardStopped.of(result)
    if not isinstance(result, RunResultBase):
        from .guard import GuardSetupError  # (guard.py imports this module)

        wants = "stop_of takes what Runner.run returned (a RunResult) or a RepeatGuardStopped"
        raise GuardSetupError(f"{wants}; got {type(result).__name__}")
    runs = getattr(getattr(result.last_agent, "hooks", None), "runs", None)
    run = runs.get(result.context_wrapper.usage) if isinstance(runs, Beside) else None
    stop = None if run is None else run.stop
    return stop if stop is not None and result.final_output == stop.message else None


def stop_items(result: RunResultBase | GuardStopped) -> list[TResponseInputItem]:
    """``[{"role": "assistant", "content": stop.message}]`` when the guard ended the run, else ``[]``: no model
    message carries the stop, so append it to ``result.to_input_list()`` when you keep the history yourself."""
    stop = stop_of(result)
    return [] if stop is None else [{"role": "assistant", "content": stop.message}]


async def save_stop(session: Session, result: RunResultBase | GuardStopped) -> bool:
    """Add the guard's stop message to ``session`` as the assistant's reply (the SDK saves no final output that no
    model produced); ``True`` if it did. Call it after each run with that session."""
    items = stop_items(result)
    if items:
        await session.add_items(items)
    return bool(items)
