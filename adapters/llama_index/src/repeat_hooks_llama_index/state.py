"""The guard's state in the run's ``Context`` store (JSON under ``STATE_KEY``, carried by ``Context.to_dict()``), or
``store=``; and ``stop_of``, how a run was stopped, from what ``await handler`` returned."""

from __future__ import annotations

from typing import Any, TypedDict, cast

from llama_index.core.agent.workflow import AgentOutput
from llama_index.core.workflow import Context
from pydantic import TypeAdapter, ValidationError

from repeat_hooks import GuardSetupError, GuardState, StateCorrupt, Stop
from repeat_hooks.kit import GuardStopped, ParsedStates, load

STATE_KEY = "repeat_hooks"
"""The ``ctx.store`` key of the guard's part of the run, plain JSON (``Context.to_dict`` keeps it as it is):
``{"turn": <turn id>, "agents": {<agent name>: <state as JSON text>}, "batch": {<agent name>: [[tool, call key,
call id, claimed, refusal text or null], ...]}}``, the batch being the current response's calls not settled yet."""
STOP_KEY = "repeat_hooks_stop"
"""The ``AgentOutput.raw`` key of a stopped run's ``Stop`` (``Stop.model_dump(mode="json")``)."""


class _Run(TypedDict, total=False):
    turn: str | None
    agents: dict[str, Any]
    batch: dict[str, list[tuple[str, str, str | None, bool, str | None]]]


def run_of(value: object) -> dict[str, Any]:
    """The guard's dict of the run (a copy) from ``ctx.store[STATE_KEY]``; ``StateCorrupt`` for a value of another
    shape (one of the user's, say), which the guard treats as an outage, leaving it as it is."""
    try:
        _RUN.validate_python({} if value is None else value)
    except ValidationError:
        raise StateCorrupt(
            f"repeat-hooks: ctx.store[{STATE_KEY!r}] holds a {type(value).__name__} that is not the guard's (its "
            "turn, agents and batch): keep your own values under another key, and delete this one to start the "
            "guard's counts afresh"
        ) from None
    return dict(cast("dict[str, Any]", value or {}))


_RUN = TypeAdapter(_Run)


class ContextSlot:
    """One agent's state in the run's dict, a kit ``Slot``; with ``error`` (``StateCorrupt``) read raises it."""

    def __init__(self, run: dict[str, Any], agent: str, states: ParsedStates, error: Exception | None = None) -> None:
        self.run, self.agent, self.states, self.error = run, agent, states, error

    def read(self) -> GuardState:
        """The agent's state (a fresh one if none), parsed once per value written."""
        if self.error is not None:
            raise self.error
        raw = self.run.get("agents", {}).get(self.agent)
        return self.states.take(raw, where=repr(self))

    def write(self, state: GuardState) -> None:
        """Write ``state`` back into the run's dict (the guard stores the dict into ``ctx.store`` after)."""
        raw = state.model_dump_json()
        self.run["agents"] = {**self.run.get("agents", {}), self.agent: raw}
        self.states.keep(raw, state)

    def __repr__(self) -> str:
        return f"ctx.store[{STATE_KEY!r}]" + ("" if self.error else f"['agents'][{self.agent!r}]")


async def read_state(ctx: Context, agent: str) -> GuardState:
    """The guard's state of agent ``agent`` in the run's ``Context`` (``handler.ctx``, or one ``Context.from_dict``
    rebuilt), a copy of its own; a fresh one if none. ``StateCorrupt`` names the key when the value is no state."""
    run = run_of(await ctx.store.get(STATE_KEY, default=None))
    return load(run.get("agents", {}).get(agent), where=f"ctx.store[{STATE_KEY!r}]['agents'][{agent!r}]")


def stop_of(returned: AgentOutput | BaseException | None, /) -> Stop | None:
    """How the guard stopped a run; ``None`` if it did not. ``returned``: the ``AgentOutput`` that ``await handler``
    returned (its ``raw`` holds the stop; works with ``store=`` too), or the ``RepeatGuardStopped`` it raised
    (``on_stop="raise"``; another exception: the stop it was raised from). ``GuardSetupError`` for anything else."""
    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    if isinstance(returned, AgentOutput):
        raw = returned.raw
        whole = raw.get(STOP_KEY) if isinstance(raw, dict) else None
        return None if whole is None else Stop.model_validate(whole)
    raise GuardSetupError(
        "stop_of takes what `await handler` returned (an AgentOutput), or the RepeatGuardStopped it raised; "
        f"got {type(returned).__name__}"
    )
