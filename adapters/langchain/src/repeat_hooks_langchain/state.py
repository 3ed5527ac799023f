"""Where the guard's state lives: a ``StateStore`` under the thread's key (``store=``), else the graph state's
``repeat_guard`` key (plain JSON, checkpointed with the thread); and ``stop_of(result)``, the one way to read, after
a run, why the guard ended its turn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import OmitFromInput, PrivateStateAttr
from typing_extensions import NotRequired

from repeat_hooks import GuardSetupError, GuardState, Stop
from repeat_hooks.kit import GuardStopped, ParsedStates, load

STATE_KEY = "repeat_guard"
"""The graph-state key holding ``GuardState.model_dump(mode="json")`` (digests and tool names, no arguments)."""
STOP_KEY = "repeat_guard_stop"
"""The graph-state key holding the turn's ``Stop`` (as JSON; ``None``: not stopped), with a store too."""
UNDECIDED_KEY = "repeat_guard_undecided"
"""The positions, in the last response's ``tool_calls``, of the calls the guard did not decide (structured output's,
answered in the model node): their answers are not results."""
HINTS_KEY = "repeat_guard_hints"
"""The effect hints of the last response's tools (``{name: {"read_only": True, ...}}``), for its outcomes."""
WHERE = f"the graph state's {STATE_KEY!r} key (only RepeatGuardMiddleware may write it)"


class RepeatGuardState(AgentState[Any]):
    """The agent state with the guard's keys: ``result["repeat_guard"]`` (without a store), ``result[
    "repeat_guard_stop"]``. Plain JSON, checkpointed like the messages; left out of the input schema."""

    repeat_guard: NotRequired[Annotated[dict[str, Any], OmitFromInput]]
    repeat_guard_stop: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]
    repeat_guard_undecided: NotRequired[Annotated[list[int], PrivateStateAttr]]
    repeat_guard_hints: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class GraphSlot:
    """The state in the graph state (no store): read from the node's state, written into its ``update`` (``None``:
    a tool node's, which may not write it: parallel calls would collide)."""

    def __init__(self, parsed: ParsedStates, state: Mapping[str, Any], update: dict[str, Any] | None) -> None:
        self.parsed, self.raw, self.update = parsed, state.get(STATE_KEY), update

    def read(self) -> GuardState:
        return self.parsed.take(self.raw, where=WHERE)

    def write(self, state: GuardState) -> None:
        if self.update is not None:
            self.update[STATE_KEY] = dumped = state.model_dump(mode="json")
            self.parsed.keep(dumped, state)

    def __repr__(self) -> str:
        return WHERE


def conversation_key(config: Mapping[str, Any], named: str | None) -> str:
    """The store key of a run's conversation: its ``configurable.thread_id``, else ``named`` (the caller's
    ``repeat_hooks.kit.request(conversation_id=...)``)."""
    thread = (config.get("configurable") or {}).get("thread_id")
    key = named if thread in (None, "") else str(thread)
    if key is None:
        raise GuardSetupError(
            "RepeatGuardMiddleware(store=...) keeps each conversation's counts under its thread id: invoke with "
            'config={"configurable": {"thread_id": ...}}, or inside repeat_hooks.kit.request(conversation_id=...)'
        )
    return key


def guard_state_of(result: Mapping[str, Any]) -> GuardState:
    """The guard's state in a result of ``invoke`` / ``ainvoke`` (or ``agent.get_state(config).values``); with a
    store it is not there (``await store.load(thread_id)``). No guard's key: ``GuardSetupError``."""
    if isinstance(result, Mapping) and STATE_KEY in result:
        return load(result[STATE_KEY], where=WHERE)
    if isinstance(result, Mapping) and STOP_KEY in result:
        raise GuardSetupError(
            "this agent's RepeatGuardMiddleware keeps its state in its store=, not in the graph state: read it "
            "with await store.load(thread_id) (stop_of(result) reads the stop)"
        )
    raise GuardSetupError(
        f"this result has no {STATE_KEY!r} key: the agent that made it runs without RepeatGuardMiddleware "
        "(create_agent(model, tools, middleware=[RepeatGuardMiddleware()])), or this is not what invoke / "
        "ainvoke returned, the last stream_mode='values' chunk or agent.get_state(config).values"
    )


def stop_of(result: Mapping[str, Any] | BaseException, /) -> Stop | None:
    """Why the guard ended the turn whose result this is (``Stop.reason``, ``Stop.message``), or ``None``: from what
    ``invoke`` / ``ainvoke`` returned, the last ``stream_mode="values"`` chunk, or ``agent.get_state(config).values``,
    with a store too; or the ``RepeatGuardStopped`` the run raised. An agent without the guard: ``GuardSetupError``."""
    if isinstance(result, BaseException):
        return GuardStopped.of(result)
    if not isinstance(result, Mapping):
        wants = "stop_of takes what invoke / ainvoke returned (the graph state, a dict) or a RepeatGuardStopped"
        raise GuardSetupError(f"{wants}; got {type(result).__name__}")
    if STOP_KEY in result:
        stop = result[STOP_KEY]
        return None if stop is None else Stop.model_validate(stop)
    return guard_state_of(result).turn.stop  # a checkpoint of 0.3.0, before the stop had a key of its own
