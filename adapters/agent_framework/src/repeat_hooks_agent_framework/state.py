"""Where the guard's state lives: in the run's ``AgentSession.state`` (one agent's, JSON text, which
``session.to_dict()`` carries with the conversation), for a run without a session in the run alone, or with
``store=`` in the store; and ``stop_of``, which reads how a run was stopped from what the caller got back."""

from __future__ import annotations

from typing import Any

from agent_framework import AgentResponse, AgentSession, ChatResponse, Content, Message

from repeat_hooks import GuardSetupError, GuardState, StateCorrupt, Stop
from repeat_hooks.kit import GuardStopped, ParsedStates, load

STATE_KEY = "repeat_hooks"
"""The ``AgentSession.state`` key of an agent's guard state, ``"<key>:<agent name>"`` for a named agent, so agents
sharing a session (``as_tool(propagate_session=True)``) count apart: ``GuardState.model_dump_json()``, a text, which
``AgentSession.from_dict`` restores as it was (a dict is read too); with ``store=``, ``{IN_STORE: <store key>}``."""
STOP_KEY = "repeat_hooks_stop"
"""The ``additional_properties`` key of its ``Stop`` (``model_dump(mode="json")``) on a stopped run's message."""
IN_STORE = "in_store"


def slot_key(key: str, agent: str | None) -> str:
    """The ``session.state`` key of the state of the agent named ``agent`` (``key`` itself for one with no name)."""
    return f"{key}:{agent}" if agent else key


def read_state(session: AgentSession, key: str = STATE_KEY, *, agent: str | None = None) -> GuardState:
    """The guard state of the agent named ``agent`` (``""``: the one with no name; ``None``: the only one) in
    ``session.state`` (a fresh one if none), a copy of its own. Raises ``repeat_hooks.StateCorrupt`` naming the key
    when the value there is no guard state; ``GuardSetupError`` when ``agent=None`` is ambiguous (several agents'
    states there), or when the guard keeps the state in its ``store=``."""
    found = [name for name in session.state if name == key or str(name).startswith(f"{key}:")]
    if agent is None and len(found) > 1:  # a session shared, as by as_tool(propagate_session=True)
        raise GuardSetupError(
            f"repeat-hooks: session.state holds several agents' guard states {found}: name the "
            f"agent, as in stop_of(session, agent={found[-1].partition(':')[2]!r})"
        )
    where = slot_key(key, agent) if agent is not None else found[0] if found else key
    raw = session.state.get(where)
    if isinstance(raw, dict) and IN_STORE in raw:
        raise GuardSetupError(
            f"repeat-hooks: this agent's guard keeps its state in its store=, not in the session: read the stop from "
            f"what the run returned (stop_of(response)), or its store: (await store.load({raw[IN_STORE]!r})).stop_of()"
        )
    return load(raw, where=f"session.state[{where!r}]")


def stop_of(returned: Any, /, *, agent: str | None = None) -> Stop | None:
    """How the guard stopped a run; ``None`` if it did not. ``returned``: the ``AgentResponse`` ``agent.run(...)``
    returned (its stop message carries the ``Stop``), a workflow's ``AgentExecutorResponse``, a conversation (a
    ``list[Message]``: a group chat's, its latest stop), the ``RepeatGuardStopped`` raised (``on_stop="raise"``), or
    the ``AgentSession`` (the latest turn of ``agent``, as ``read_state``). Raises ``GuardSetupError`` for others."""
    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    inner = getattr(returned, "agent_response", None)
    if isinstance(inner, AgentResponse):
        returned = inner
    if isinstance(returned, list) and all(isinstance(item, Message) for item in returned):
        returned = ChatResponse(messages=returned)
    if isinstance(returned, (AgentResponse, ChatResponse)):
        for message in reversed(returned.messages):
            holders: list[Message | Content] = [message, *message.contents]
            for holder in holders:  # a streamed run's messages keep only their contents' properties
                marked = (holder.additional_properties or {}).get(STOP_KEY)
                if marked is not None:
                    return Stop.model_validate(marked)
        return None
    if isinstance(returned, AgentSession):
        return read_state(returned, agent=agent).stop_of()
    raise GuardSetupError(
        "stop_of takes what agent.run(...) returned (an AgentResponse), a workflow's AgentExecutorResponse, a "
        f"list of Messages, the AgentSession, or a RepeatGuardStopped; got {type(returned).__name__}"
    )


def stop_message(stop: Stop) -> Message:
    """The assistant message a stopped run ends with: the stop's text, the ``Stop`` under ``STOP_KEY`` (on the
    message and on its text, which a streamed run's updates carry)."""
    marked = {STOP_KEY: stop.model_dump(mode="json")}
    text = Content.from_text(stop.message, additional_properties=marked)
    return Message(role="assistant", contents=[text], additional_properties=marked)


class SessionSlot:
    """``session.state[key]`` as the kit's ``Slot`` (parsed once per value written; a guard's ``store=`` mark reads
    as no state). ``down``: the value there is the one found corrupt (an outage logged already)."""

    def __init__(self, session: AgentSession, key: str, states: ParsedStates) -> None:
        self.session, self.key, self.states = session, key, states
        self.corrupt: object = None

    def read(self) -> GuardState:
        raw = self.session.state.get(self.key)
        try:
            return self.states.take(None if isinstance(raw, dict) and IN_STORE in raw else raw, where=repr(self))
        except StateCorrupt:
            self.corrupt = raw
            raise

    def write(self, state: GuardState) -> None:
        raw = state.model_dump_json()  # JSON text
        self.session.state[self.key] = raw
        self.states.keep(raw, state)

    @property
    def down(self) -> bool:
        return self.corrupt is not None and self.session.state.get(self.key) is self.corrupt

    def __repr__(self) -> str:
        return f"session.state[{self.key!r}]"


class RunSlot:
    """A run without a session: its state lives for that run alone (each such run is its own conversation)."""

    def __init__(self) -> None:
        self.state = GuardState()

    def read(self) -> GuardState:
        return self.state

    def write(self, state: GuardState) -> None:
        self.state = state
