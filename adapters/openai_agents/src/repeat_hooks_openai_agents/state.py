"""Where the state lives: the conversation's ``GuardState`` in the run context, this run's turn beside the run.

- **The conversation's counts** are a ``repeat_hooks.GuardState`` in the run context you pass to
  ``Runner.run(..., context=...)``: the context *is* the ``GuardState``, or your own object holds one in
  a ``repeat_guard`` attribute. Nothing else is looked at, so one guarded agent serves any number of
  conversations at once, each with its own context. The SDK saves the context with a paused
  ``RunState`` (``context_serializer`` / ``context_deserializer``), and under Temporal it is workflow
  state, rebuilt by replay.
- **This run's turn**: one ``Runner.run`` call is one turn. The SDK fires the agent's ``on_start`` at
  the start of a run, after every handoff, when a saved ``RunState`` resumes, and inside every nested
  run of an agent used as a tool; only the first starts a turn. They are told apart by the run's
  ``Usage`` object, which the SDK keeps for the whole run (``run_context.py``:
  ``RunContextWrapper.usage``), shares with nested agent-as-tool runs (``agent.py``:
  ``ToolContext(usage=context.usage)``) and restores from a saved ``RunState``: a ``Usage`` already
  seen is a handoff or a nested run (same turn); a new one that has recorded model work is a resumed
  run (same turn); a new, empty one is a new run (a new turn, ids ``turn-1``, ``turn-2``, ...:
  deterministic, so a Temporal replay decides the same). What the adapter keeps of a run (its turn,
  its response's calls decided as a batch, the calls it refused, its stopwatch) hangs on that
  ``Usage`` object weakly: nothing outlives the run.
- **Reading a stop afterwards**: ``stop_of(result)``; ``save_stop`` and ``stop_items`` put the stop's
  message where the next turn's model reads it (the SDK keeps no message for it).

The setup errors live here too: each is about a run that cannot find or own its state.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from agents import AgentsException, TResponseInputItem, UserError
from agents.memory import Session
from pydantic import BaseModel

import repeat_hooks
from repeat_hooks import GuardState, Stop, StopRepeatedCalls
from repeat_hooks.kit import Stopwatch, load_state

if TYPE_CHECKING:
    from agents import Usage


class GuardSetupError(repeat_hooks.GuardSetupError, UserError):
    """A guarded agent is set up or run wrongly (a budget nothing feeds, a tool name that matches no tool, one
    conversation's state shared by two concurrent runs, agent hooks replaced after ``guard_agent``); the
    message says how to fix it.

    A ``repeat_hooks.GuardSetupError`` (a ``ValueError``) and the SDK's ``UserError``, so the SDK re-raises
    it as it is from a tool guardrail, a ``tool_use_behavior`` or a hook, instead of wrapping it in "Error
    running tool ...". Raised at construction, or at the first model or tool call that meets the mistake.
    """


class MissingGuard(GuardSetupError, TypeError):
    """The run context holds no ``GuardState`` (a ``TypeError`` too, as in earlier versions)."""


class RepeatGuardStopped(AgentsException):
    """The guard ended a run whose output must not be its text: raised from ``Runner.run`` / ``run_streamed``.

    Raised for an agent with a structured ``output_type`` (its output guardrails, ``on_end`` hooks and
    ``final_output`` never receive the stop text as its output), and for every guarded agent built with
    ``guard_agent(..., on_stop="raise")``. An ``agents.AgentsException``, as the SDK's own ``MaxTurnsExceeded``
    is: the SDK attaches ``run_data`` (``RunErrorDetails``: the run's input, new items, responses, last agent
    and context). ``stop`` says why (``stop.reason``) and what to tell the user (``stop.message``, also
    ``message`` and ``str(error)``'s tail). Under Temporal it reaches the workflow code as it is: catch it there
    (uncaught, it fails the workflow task, which then retries).
    """

    message: str

    def __init__(self, stop: Stop) -> None:
        super().__init__(f"repeat-hooks stopped the run ({stop.reason.value}): {stop.message}")
        self.stop = stop
        """The guard's stop: ``reason`` (a ``StopReason``) and ``message`` (written for the user)."""
        self.message = stop.message
        """The stop's message, as ``MaxTurnsExceeded.message`` holds its own."""

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.stop,)


GUARD_ATTRIBUTE = "repeat_guard"
"""The attribute of your own context object that holds the conversation's ``GuardState``."""

NOT_STARTED = (
    "repeat-hooks: a guarded tool ran in a run whose agent never started a turn: the agent's hooks were replaced "
    "after guard_agent (agent.clone(hooks=...) or agent.hooks = ...), or the tool was taken from a guarded agent "
    "into another one. Guard the agent you run, after setting its hooks: guard_agent(Agent(..., hooks=yours))"
)
"""A guarded tool was called in a run in which no guarded agent started (its ``on_start`` never fired)."""

ONE_STATE_PER_CONVERSATION = (
    "repeat-hooks: one GuardState per conversation: another run started turn {new} on this state while this run "
    "(turn {old}) was still going, and the two runs would reset each other's counts. Give each conversation its "
    "own GuardState and run one turn of it at a time (queue or reject a message sent while a turn is running)"
)
"""Two runs overlap on one state (``{old}``: this run's turn, ``{new}``: the one that replaced it)."""


# -- the conversation's state, in the run context -------------------------------------------------------


def find_state(context: Any) -> GuardState | None:
    """The ``GuardState`` the run context holds: the context itself or its ``repeat_guard``; ``None`` if neither."""
    if isinstance(context, GuardState):
        return context
    state = getattr(context, GUARD_ATTRIBUTE, None)
    return state if isinstance(state, GuardState) else None


def require_state(context: Any) -> GuardState:
    """The ``GuardState`` the run context holds; raises ``MissingGuard`` (a ``TypeError``) saying how to pass one.

    A ``StopRepeatedCalls`` (how 0.1 was set up), a plain dict that looks like a saved state (what
    ``RunState.from_json`` restores without a ``context_deserializer``) and anything else each get their own
    message with the right spelling.
    """
    state = find_state(context)
    if state is not None:
        return state
    if isinstance(context, StopRepeatedCalls) or isinstance(getattr(context, GUARD_ATTRIBUTE, None), StopRepeatedCalls):
        raise MissingGuard(
            "repeat-hooks: the run context holds a StopRepeatedCalls (repeat-hooks 0.1). The settings now go to "
            "guard_agent and the context holds only the conversation's counts: agent = guard_agent(Agent(...), "
            "max_calls=2, ...); Runner.run(agent, input, context=GuardState()) (or your context's "
            f"`{GUARD_ATTRIBUTE}` holding a GuardState; a saved guard's counts: guard.state)"
        )
    if _looks_saved(context):
        raise MissingGuard(
            "repeat-hooks: the run context is a plain dict, not a GuardState: this RunState was restored with "
            "RunState.from_json(agent, data) and no context_deserializer, so the SDK left the saved context as "
            "JSON. Restore it with RunState.from_json(agent, data, context_deserializer=context_deserializer) "
            "(from repeat_hooks_openai_agents), or context_deserializer=YourContext.model_validate for your own "
            f"pydantic context holding the state in `{GUARD_ATTRIBUTE}`"
        )
    raise MissingGuard(
        "repeat-hooks: a guarded agent keeps each conversation's counts in its run context: pass "
        "Runner.run(agent, input, context=GuardState()) (one per conversation, reused for its every turn), or a "
        f"context object with a `{GUARD_ATTRIBUTE}` attribute holding one (got a context of type "
        f"{type(context).__name__})"
    )


def _looks_saved(context: Any) -> bool:
    """``True`` for a dict holding a dumped state (its ``turn``) or a dumped context with ``repeat_guard``."""
    return isinstance(context, Mapping) and ("turn" in context or "state" in context or GUARD_ATTRIBUTE in context)


def context_serializer(context: Any) -> Mapping[str, Any]:
    """Serialize a run context for ``RunState.to_json(context_serializer=...)``, guard state included.

    Fires when the SDK saves a ``RunState`` (for example at a human-in-the-loop interruption) and
    returns the context's full JSON dump. Without it the SDK dumps pydantic contexts with
    ``exclude_unset=True``: the guard's own models dump whole anyway, but a context of yours whose
    state field was left at its default would lose it. Works for a ``GuardState`` context and for any
    pydantic model holding one; raises ``TypeError`` for other objects (write your own serializer that
    dumps ``context.repeat_guard.model_dump(mode="json")``).
    """
    if isinstance(context, BaseModel):
        return context.model_dump(mode="json")
    raise TypeError(
        "repeat-hooks: context_serializer handles pydantic contexts; for "
        f"{type(context).__name__}, dump `{GUARD_ATTRIBUTE}.model_dump(mode='json')` yourself"
    )


def context_deserializer(data: Mapping[str, Any]) -> GuardState:
    """Restore a ``GuardState`` context for ``RunState.from_json(context_deserializer=...)``.

    Fires when the SDK loads a saved ``RunState``; returns the state exactly as it was saved, so the
    resumed turn keeps its counts (a state saved by 0.1 loads too). Raises ``repeat_hooks.StateCorrupt``
    saying how to recover when ``data`` is not a guard state. For your own pydantic context class, pass
    ``context_deserializer=YourContext.model_validate`` instead.
    """
    return load_state(dict(data))


# -- this run's turn, beside the run ---------------------------------------------------------------------


class Run:
    """What the adapter keeps of one run: its turn, its decided calls, its refusals and its stopwatch."""

    __slots__ = ("batch", "batched_at", "claimed", "error", "invoked", "refused", "stopwatches", "turn_id", "usage")

    def __init__(self, usage: weakref.ref[Usage], turn_id: str) -> None:
        self.usage = usage
        self.turn_id = turn_id
        self.refused: set[str] = set()
        """Ids of the calls the guard refused in this run."""
        self.batch: dict[tuple[str, str, str], list[str | None]] = {}
        """The last response's calls, decided as a batch: (call id, tool, arguments) -> the ids they were
        decided under (``repeat_hooks.batch_call_ids``), first unclaimed first."""
        self.batched_at: int | None = None
        """The turn's ``responses`` when that batch was decided."""
        self.invoked: dict[str, Any] = {}
        """The calls of this run's responses, by call id: each call's item (see ``calls.batch_of``)."""
        self.claimed: dict[int, str] = {}
        """Calls let through, by their ``ToolContext`` (``id``): the id each was decided under, for its outcome."""
        self.stopwatches: dict[int, Stopwatch] = {}
        """The model call being timed, by its context wrapper (``id``): nested runs time their own."""
        self.error: GuardSetupError | None = None

    def batch_id(self, call_id: str, name: str, arguments: str) -> str:
        """The id the call was decided under with its batch (its own id when it was not in one)."""
        ids = self.batch.get((call_id, name, arguments))
        if not ids:
            return call_id
        decided = ids.pop(0)
        return decided if decided is not None else call_id


_runs: dict[int, Run] = {}


def run_of(usage: Usage) -> Run | None:
    """What the adapter keeps of the run that owns ``usage``; ``None`` if no turn was started for it."""
    entry = _runs.get(id(usage))
    if entry is None or entry.usage() is not usage:
        return None
    return entry


def turn_of(usage: Usage) -> str | None:
    """The turn id of the run that owns ``usage``; ``None`` if no turn was started for it."""
    entry = run_of(usage)
    return None if entry is None else entry.turn_id


def turn_in_run(state: GuardState, usage: Usage, *, resumed: bool = False) -> str:
    """The turn of the run that owns ``usage``, checked against the state; fires in every guarded callback.

    Raises ``GuardSetupError`` when the run has no turn (no guarded agent started it), unless ``resumed``:
    a call a human approved runs, on resume, before the run's ``on_start``; it belongs to the state's
    saved turn. Raises it too when the state's current turn is another run's (two runs share one state):
    the older run fails at its next step, the newer keeps clean counts.
    """
    return check_turn(state, run_of(usage), usage, resumed=resumed)


def check_turn(state: GuardState, run: Run | None, usage: Usage, *, resumed: bool = False) -> str:
    """``turn_in_run`` for a caller that already holds the run's entry (``run_of(usage)``)."""
    current = state.turn.id
    if run is None:
        if resumed and current is not None:
            return current
        raise GuardSetupError(NOT_STARTED)
    if run.error is not None:
        raise run.error
    if run.turn_id != current:
        fail(usage, GuardSetupError(ONE_STATE_PER_CONVERSATION.format(old=run.turn_id, new=current)))
    return run.turn_id


def fail(usage: Usage, error: GuardSetupError) -> NoReturn:
    """Raise ``error``, and raise it again at the run's next guarded step.

    An agent used as a tool turns an exception of its nested run into the tool's error text
    (``as_tool(failure_error_function=...)``), which would hide the mistake; the nested run shares
    the outer run's ``Usage``, so the outer run raises it at its next step.
    """
    entry = run_of(usage)
    if entry is not None and entry.error is None:
        entry.error = error
    raise error


def turn_for_run(usage: Usage, state: GuardState) -> str:
    """Fires at every ``on_start``: the id of the turn this run is in, starting one if the run is new."""
    known = turn_of(usage)
    if known is not None:
        return known
    current = state.turn
    if current.id is not None and has_worked(usage):
        turn_id = current.id  # a resumed RunState: carry on with the saved turn
    else:
        number = current.number + 1
        while f"turn-{number}" == current.id:  # a state restored from elsewhere may use that id
            number += 1
        turn_id = f"turn-{number}"
    _remember(usage, turn_id)
    return turn_id


def has_worked(usage: Usage) -> bool:
    """``True`` once the run's ``Usage`` recorded model work (a resumed run's restored usage has)."""
    return bool(usage.requests or usage.input_tokens or usage.output_tokens or usage.total_tokens)


def _remember(usage: Usage, turn_id: str) -> None:
    key = id(usage)

    def forget(ref: weakref.ref[Usage]) -> None:
        entry = _runs.get(key)
        if entry is not None and entry.usage is ref:
            del _runs[key]

    _runs[key] = Run(weakref.ref(usage, forget), turn_id)


# -- reading a stop afterwards ---------------------------------------------------------------------------


class _RunOutcome(Protocol):
    """What ``stop_of`` reads of a ``RunResult`` / ``RunResultStreaming``."""

    @property
    def final_output(self) -> Any: ...

    @property
    def context_wrapper(self) -> Any: ...


def stop_of(result: _RunOutcome | RepeatGuardStopped) -> Stop | None:
    """The guard's ``Stop`` when it ended the run ``result`` comes from; ``None`` when the run ended otherwise.

    The one way to read a stop afterwards: ``result`` is a ``RunResult`` / ``RunResultStreaming`` (then
    ``result.final_output`` is ``stop.message``; only a text agent's run ends so) or a ``RepeatGuardStopped``.
    For a streamed run, call it once the stream is done.
    """
    if isinstance(result, RepeatGuardStopped):
        return result.stop
    wrapper = result.context_wrapper
    state = find_state(wrapper.context)
    turn_id = turn_of(wrapper.usage)
    if state is None or turn_id is None:
        return None
    stop = state.stop_of(turn_id)
    if stop is None or result.final_output != stop.message:
        return None  # the guard stopped, but your own tool_use_behavior ended the run first
    return stop


def stop_items(result: _RunOutcome | RepeatGuardStopped) -> list[TResponseInputItem]:
    """``[{"role": "assistant", "content": stop.message}]`` when the guard ended the run, else ``[]``.

    The SDK ends a stopped run from ``tool_use_behavior``: no model message carries the stop, so
    ``result.to_input_list()`` lacks it. Append this when you keep the conversation yourself, so the
    next turn's model sees what the user was told (``result`` may be a ``RepeatGuardStopped`` too).
    """
    stop = stop_of(result)
    if stop is None:
        return []
    item: TResponseInputItem = {"role": "assistant", "content": stop.message}
    return [item]


async def save_stop(session: Session, result: _RunOutcome | RepeatGuardStopped) -> bool:
    """Add the guard's stop message to ``session`` as the assistant's reply; ``True`` if it did.

    The SDK saves the run's items to the session but not a final output that no model produced.
    Call it after each run with that session (it adds nothing when the guard did not end the run).
    """
    items = stop_items(result)
    if not items:
        return False
    await session.add_items(items)
    return True
