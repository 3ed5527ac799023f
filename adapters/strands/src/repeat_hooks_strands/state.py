"""Where the guard's state lives: in the agent's own ``agent.state``, as JSON text under one key.

``agent.state`` is Strands' JSON key-value store of the agent; every session manager saves it with the
agent (``FileSessionManager``, ``S3SessionManager``, the repository and snapshot managers), and restores it
when an agent joins its session again, in this process or another. So the guard keeps no counters of its
own: each hook reads the agent's ``GuardState`` (``GuardState.model_dump_json()`` under ``STATE_KEY``),
applies one verb of the ``Policy`` and writes it back. JSON text rather than a nested dict: ``agent.state``
deep-copies and re-validates every value on each write, which for a dict of a few kilobytes costs several
times what the guard's own decision does; a string is copied for free. Strands' session managers save the
agent each time a message is added, so the counts of a tool batch are saved with the batch's results, and
before the batch runs (the guard asks the agent's session manager to save then).

Each agent has its own state, so counts stay with the agent whose model made the calls: an agent used as a
tool, a swarm's or a graph's nodes each count their own calls (and Strands resets a node's, or a
``preserve_context=False`` agent tool's, state to what it was built with before each run).

``stop_of(agent)`` is the one way to read afterwards how the guard stopped the agent's last turn.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from repeat_hooks import GuardState, StateCorrupt, Stop
from repeat_hooks.kit import load_state

if TYPE_CHECKING:
    from strands.agent.state import AgentState
    from strands.types.agent import LocalAgent

STATE_KEY = "repeat_hooks"
"""The ``agent.state`` key the guard's state is kept under (JSON text: ``GuardState.model_dump_json()``; a
dict, ``GuardState.model_dump(mode="json")``, is read too)."""


def read_state(agent: LocalAgent, key: str = STATE_KEY) -> GuardState:
    """The guard's state in ``agent.state`` (a fresh ``GuardState`` if it has none yet), a copy of its own.

    Raises ``repeat_hooks.StateCorrupt`` naming the key, and saying how to recover, when the value there is
    not a guard state (something else wrote to the key): the guard never guesses counts.
    """
    return _parse(agent.state.get(key), key)


def write_state(agent: LocalAgent, state: GuardState, key: str = STATE_KEY) -> None:
    """Write ``state`` into ``agent.state`` (the agent's session manager saves it with the agent)."""
    agent.state.set(key, state.model_dump_json())


def stop_of(agent: LocalAgent, turn_id: str | None = None, key: str = STATE_KEY) -> Stop | None:
    """How the guard stopped ``agent``'s latest turn (or turn ``turn_id``, while its stop is kept); ``None``
    if it did not. Read it after ``agent(...)`` returns; the final message the caller got is ``stop.message``."""
    state = read_state(agent, key)
    if turn_id is None:
        return state.turn.stop
    return state.stop_of(turn_id)


class ParsedStates:
    """The states last written, parsed: reading back the state just written skips parsing it again.

    An entry is used only while the agent holds the very ``AgentState`` it was written to, unchanged since
    (Strands counts every change: ``AgentState._get_version``; a session restore, a swarm's or a graph's
    reset puts a new ``AgentState`` in place), and at most once: ``read`` takes it out, ``write`` puts one
    back, so a state that a hook changed and then failed to write is never read from here. ``agent.state``
    stays the only source of truth.
    """

    def __init__(self) -> None:
        self._entries: weakref.WeakKeyDictionary[Any, tuple[AgentState, int, GuardState]] = weakref.WeakKeyDictionary()

    def read(self, agent: LocalAgent, key: str) -> GuardState:
        """The guard's state of ``agent``, for the caller to change and then ``write``."""
        entry = self._entries.pop(agent, None)
        store = agent.state
        if entry is not None and entry[0] is store and entry[1] == _version(store):
            return entry[2]
        return _parse(store.get(key), key)

    def write(self, agent: LocalAgent, state: GuardState, key: str) -> None:
        """``write_state``, remembering the state written."""
        agent.state.set(key, state.model_dump_json())
        self.keep(agent, state)

    def keep(self, agent: LocalAgent, state: GuardState) -> None:
        """Remember ``state`` as what ``agent.state`` holds now (just written, or read and left unchanged)."""
        store = agent.state
        version = _version(store)
        if version is not None:
            self._entries[agent] = (store, version, state)


def _version(store: AgentState) -> int | None:
    version = getattr(store, "_get_version", None)
    return version() if callable(version) else None


def _parse(raw: Any, key: str) -> GuardState:
    try:
        return load_state(raw)
    except StateCorrupt as error:
        raise StateCorrupt(f"repeat-hooks: agent.state[{key!r}]: {error}") from error.__cause__
