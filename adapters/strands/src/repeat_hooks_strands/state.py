"""Where the guard's state lives: in the agent's own ``agent.state`` (JSON text under ``STATE_KEY``, saved by the
agent's session manager), or with ``store=`` in the store under ``conversation_key``; and ``stop_of``, which reads
how a turn was stopped from what the invocation handed back (see the README's "How it maps to Strands")."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strands.agent import Agent, AgentResult
from strands.hooks import AgentInitializedEvent

from repeat_hooks import GuardSetupError, GuardState, Stop
from repeat_hooks.kit import GuardCore, GuardStopped, ParsedStates, load

if TYPE_CHECKING:
    from strands.types.agent import LocalAgent

STATE_KEY = "repeat_hooks"
"""The ``agent.state`` key of the guard's state (``GuardState.model_dump_json()``; a dict is read too), and the
``AgentResult.state`` key of a stopped turn's whole ``Stop`` (``Stop.model_dump(mode="json")``)."""
STOP_KEY = "repeat_hooks_stop"
"""The ``AgentResult.state`` (``request_state``) key of a stopped turn's reason (``"ignored_refusals"``)."""
TURN_KEY = "repeat_hooks_turn_id"
"""The ``invocation_state`` key of a caller's turn id: ``agent(text, invocation_state={TURN_KEY: request_id})``."""


def read_state(agent: LocalAgent, key: str = STATE_KEY) -> GuardState:
    """The guard's state in ``agent.state`` (a fresh one if none), a copy of its own. Raises
    ``repeat_hooks.StateCorrupt`` naming the key and how to recover when the value there is no guard state."""
    return load(agent.state.get(key), where=f"agent.state[{key!r}]")


def stop_of(
    returned: AgentResult | LocalAgent | BaseException | None = None,
    /,
    *old: str,
    turn_id: str | None = None,
    key: str = STATE_KEY,
    agent: LocalAgent | None = None,
) -> Stop | None:
    """How the guard stopped a turn; ``None`` if it did not. ``returned``: the ``AgentResult`` an invocation
    returned (its own turn; works with ``store=`` too), the ``RepeatGuardStopped`` it raised, or the ``Agent`` (its
    latest turn, or turn ``turn_id`` while its stop is kept, from ``agent.state[key]``). Raises ``GuardSetupError``
    for anything else, and for an agent whose guard keeps its states in a ``store=``: read the ``AgentResult``."""
    if len(old) > 2:
        raise TypeError("stop_of(agent, turn_id=...) takes one positional argument, what agent(...) handed you")
    if old or agent is not None:
        spelt = "stop_of(agent=agent)" if agent is not None else "stop_of(agent, turn_id)"
        warnings.warn(f"{spelt} is deprecated: use stop_of(agent, turn_id=...)", DeprecationWarning, 2)
        returned, turn_id, key = agent or returned, old[0] if old else turn_id, old[1] if len(old) > 1 else key
    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    if isinstance(returned, AgentResult):
        whole = returned.state.get(STATE_KEY) if isinstance(returned.state, dict) else None
        return None if whole is None else Stop.model_validate(whole)
    if not isinstance(returned, Agent):
        wants = "stop_of takes what agent(...) returned (an AgentResult), the Agent, or a RepeatGuardStopped"
        raise GuardSetupError(f"{wants}; got {type(returned).__name__}")
    guards = [
        getattr(callback, "__self__", None)
        for callback in returned.hooks.get_callbacks_for(AgentInitializedEvent(agent=returned))
    ]
    if any(
        getattr(guard, "state_key", None) == key and getattr(getattr(guard, "core", None), "store", None)
        for guard in guards
    ):
        raise GuardSetupError(
            "stop_of(agent): this agent's guard keeps its states in store=..., not in agent.state: pass what the "
            "invocation returned, stop_of(agent(...)), or catch RepeatGuardStopped (on_stop='raise')"
        )
    return read_state(returned, key).stop_of(turn_id)


def mark_stop(invocation_state: dict[str, Any] | None, stop: Stop) -> dict[str, Any] | None:
    """Write ``stop`` into the invocation's ``request_state`` (``AgentResult.state``): its reason under ``STOP_KEY``,
    the whole ``Stop`` under ``STATE_KEY``; returns that ``request_state``."""
    if invocation_state is None:
        return None
    request: dict[str, Any] = invocation_state.setdefault("request_state", {})
    request[STOP_KEY] = stop.reason.value
    request[STATE_KEY] = stop.model_dump(mode="json")
    return request


def conversation_key(core: GuardCore, agent: Any, state_key: str) -> str | None:
    """The store key of ``agent``'s state, ``<state_key>:<conversation>/<agent_id>/<name>``: the conversation a caller
    names (``repeat_hooks.kit.request``), else the session manager's ``session_id``; ``None`` if neither."""
    conversation = core.conversation_id(getattr(session_manager(agent), "session_id", None))
    return None if conversation is None else f"{state_key}:{conversation}/{agent.agent_id}/{agent.name}"


def session_manager(agent: Any) -> Any:
    """The agent's session manager (``Agent(session_manager=...)``), if it has one that saves agents."""
    manager = getattr(agent, "_session_manager", None)
    return manager if callable(getattr(manager, "sync_agent", None)) else None


class AgentSlot:
    """``agent.state[key]`` as the kit's ``Slot``; while ``staging`` (a tool batch in progress), a write is kept
    here (``pending``) and read back, until the batch ends and the next write reaches ``agent.state``."""

    def __init__(self, agent: Any, key: str, states: ParsedStates) -> None:
        self.agent: Callable[[], Any] = weakref.ref(agent)
        self.key = key
        self.states = states
        self.staging = False
        self.pending: GuardState | None = None

    def read(self) -> GuardState:
        """The state: the staged one, else ``agent.state``'s (parsed once per value written)."""
        if self.pending is not None:
            return self.pending
        store = self.agent().state
        return self.states.take(store.get(self.key), where=repr(self), version=(id(store), store._get_version()))

    def write(self, state: GuardState) -> None:
        """Stage ``state`` during a batch; else write it into ``agent.state``."""
        if self.staging:
            self.pending = state
            return
        self.pending = None
        store = self.agent().state
        raw = state.model_dump_json()
        store.set(self.key, raw)
        self.states.keep(raw, state, version=(id(store), store._get_version()))

    def __repr__(self) -> str:
        return f"agent.state[{self.key!r}]"
