"""Where the guard's state lives: in the workflow run's ``Context`` store (JSON under ``STATE_KEY``, carried by
``Context.to_dict()`` / ``Context.from_dict()``), or with ``store=`` in a ``StateStore``; and ``stop_of``, which reads
how a run was stopped from what ``await handler`` returned (see the README's "How it maps to LlamaIndex")."""

from __future__ import annotations

from typing import Any

from llama_index.core.agent.workflow import AgentOutput
from llama_index.core.workflow import Context

from repeat_hooks import GuardSetupError, GuardState, Stop
from repeat_hooks.kit import GuardStopped, ParsedStates, load

STATE_KEY = "repeat_hooks"
"""The ``ctx.store`` key of the guard's part of the run, plain JSON (``Context.to_dict`` keeps it as it is):
``{"turn": <turn id>, "agents": {<agent name>: <state as JSON text>}, "batch": {<agent name>: [[tool, arguments'
digest, call id, claimed, refusal text or null], ...]}}``, the batch being the current response's calls as decided."""
STOP_KEY = "repeat_hooks_stop"
"""The ``AgentOutput.raw`` key of a stopped run's ``Stop`` (``Stop.model_dump(mode="json")``)."""


class ContextSlot:
    """One agent's state in the run's ``STATE_KEY`` dict (``run``), as the kit's ``Slot``; ``written`` once changed."""

    def __init__(self, run: dict[str, Any], agent: str, states: ParsedStates) -> None:
        self.run, self.agent, self.states = run, agent, states
        self.written = False

    def read(self) -> GuardState:
        """The agent's state (a fresh one if none), parsed once per value written."""
        raw = self.run.get("agents", {}).get(self.agent)
        return self.states.take(raw, where=repr(self))

    def write(self, state: GuardState) -> None:
        """Write ``state`` back into the run's dict (the guard stores the dict into ``ctx.store`` after)."""
        raw = state.model_dump_json()
        self.run["agents"] = {**self.run.get("agents", {}), self.agent: raw}
        self.states.keep(raw, state)
        self.written = True

    def __repr__(self) -> str:
        return f"ctx.store[{STATE_KEY!r}]['agents'][{self.agent!r}]"


async def read_state(ctx: Context, agent: str) -> GuardState:
    """The guard's state of agent ``agent`` in the run's ``Context`` (``handler.ctx``, or one ``Context.from_dict``
    rebuilt), a copy of its own; a fresh one if none. ``StateCorrupt`` names the key when the value is no state."""
    run = await ctx.store.get(STATE_KEY, default=None) or {}
    return load(run.get("agents", {}).get(agent), where=f"ctx.store[{STATE_KEY!r}]['agents'][{agent!r}]")


def stop_of(returned: AgentOutput | BaseException | None, /) -> Stop | None:
    """How the guard stopped a run; ``None`` if it did not. ``returned``: the ``AgentOutput`` that ``await handler``
    returned (its ``raw`` holds the stop; works with ``store=`` too), or the ``RepeatGuardStopped`` it raised
    (``on_stop="raise"``; another exception: the guard's stop it was raised from, else ``None``). Raises
    ``GuardSetupError`` for anything else."""
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
