"""Where the guard's counters live: one key of the agent's graph state, holding plain JSON.

The key is checkpointed with the thread like the messages are, so the counts follow the conversation
through an interrupt and ``Command(resume=...)``, a process restart, and another process serving the
same thread through a shared checkpointer. The middleware object keeps nothing per thread.

``stop_of(result)`` is the one documented way to read, after a run, why the guard ended its turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import OmitFromInput, PrivateStateAttr
from typing_extensions import NotRequired

from repeat_hooks import GuardSetupError, GuardState, StateCorrupt, Stop
from repeat_hooks.kit import load_state as load_guard_state

STATE_KEY = "repeat_guard"
"""The graph-state key holding ``GuardState.model_dump(mode="json")`` (digests and tool names, no arguments)."""

UNDECIDED_KEY = "repeat_guard_undecided"
"""The graph-state key holding the positions, in the last model response's ``tool_calls``, of the calls the
guard did not decide (structured output's, answered in the model node): their answers are not results."""


HINTS_KEY = "repeat_guard_hints"
"""The graph-state key holding the effect hints of the last model response's tools (``calls.dump_hints``),
for recording their outcomes before the next model call."""


class RepeatGuardState(AgentState[Any]):
    """The agent state with the guard's key: read it from a result as ``result["repeat_guard"]``.

    Plain JSON (dicts, lists, strings, numbers), so every checkpointer stores it as it stores the
    messages. Left out of the input schema: a caller cannot pass counters in.
    """

    repeat_guard: NotRequired[Annotated[dict[str, Any], OmitFromInput]]
    repeat_guard_undecided: NotRequired[Annotated[list[int], PrivateStateAttr]]
    """The calls of the last model response the guard did not decide: written with the decisions."""
    repeat_guard_hints: NotRequired[Annotated[dict[str, list[bool | None]], PrivateStateAttr]]
    """The effect hints of the last model response's tools: written with the decisions."""


def load_state(state: Mapping[str, Any]) -> GuardState:
    """The ``GuardState`` saved in a graph state (a fresh one when the key is absent).

    A value that is not a saved ``GuardState`` raises ``repeat_hooks.StateCorrupt`` naming the key: it was
    written by something other than this middleware, and guessing would lose counts. A state saved by
    repeat-hooks 0.1 loads as it was.
    """
    try:
        return load_guard_state(state.get(STATE_KEY))
    except StateCorrupt as error:
        raise StateCorrupt(
            f"the graph state's {STATE_KEY!r} key (only RepeatGuardMiddleware may write it): {error}"
        ) from error


def dump_state(state: GuardState) -> dict[str, Any]:
    """The plain-JSON form stored under ``STATE_KEY``."""
    return state.model_dump(mode="json")


MISSING = (
    "this result has no {key!r} key: the agent that made it runs without RepeatGuardMiddleware "
    "(create_agent(model, tools, middleware=[RepeatGuardMiddleware()])), or this is not what invoke / "
    "ainvoke returned, the last stream_mode='values' chunk or agent.get_state(config).values"
)


def guard_state_of(result: Mapping[str, Any]) -> GuardState:
    """The guard's state in a result of ``invoke`` / ``ainvoke`` (or ``agent.get_state(config).values``).

    A result without the guard's key raises ``repeat_hooks.GuardSetupError``: the middleware is missing.
    """
    if not isinstance(result, Mapping) or STATE_KEY not in result:
        raise GuardSetupError(MISSING.format(key=STATE_KEY))
    return load_state(result)


def stop_of(result: Mapping[str, Any]) -> Stop | None:
    """Why the guard ended the turn whose result this is (``Stop.reason``, ``Stop.message``), or ``None``.

    ``result``: what ``invoke`` / ``ainvoke`` returned, the last ``stream_mode="values"`` chunk, or
    ``agent.get_state(config).values``. A result without the guard's key raises
    ``repeat_hooks.GuardSetupError``: the agent runs without ``RepeatGuardMiddleware``.
    """
    return guard_state_of(result).turn.stop
