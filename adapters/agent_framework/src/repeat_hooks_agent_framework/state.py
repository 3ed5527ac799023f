"""Where the guard's state lives: in the run's ``AgentSession.state`` (JSON text under ``STATE_KEY``, which
``session.to_dict()`` carries with the conversation), for a run without a session in the run alone, or with
``store=`` in the store; and ``stop_of``, which reads how a run was stopped from what the caller got back."""

from __future__ import annotations

from typing import Any

from agent_framework import AgentResponse, AgentSession, ChatResponse, Content, Message

from repeat_hooks import GuardSetupError, GuardState, Stop
from repeat_hooks.kit import GuardStopped, ParsedStates, load

STATE_KEY = "repeat_hooks"
"""The ``AgentSession.state`` key of the guard's state (``GuardState.model_dump_json()``: a text, so that
``AgentSession.from_dict`` restores it as it was; a dict is read too)."""
STOP_KEY = "repeat_hooks_stop"
"""The ``additional_properties`` key, on the stop message of a stopped run, of its whole ``Stop``
(``Stop.model_dump(mode="json")``)."""


def read_state(session: AgentSession, key: str = STATE_KEY) -> GuardState:
    """The guard's state in ``session.state[key]`` (a fresh one if none), a copy of its own. Raises
    ``repeat_hooks.StateCorrupt`` naming the key when the value there is no guard state."""
    return load(session.state.get(key), where=f"session.state[{key!r}]")


def stop_of(returned: Any, /) -> Stop | None:
    """How the guard stopped a run; ``None`` if it did not. ``returned``: the ``AgentResponse`` ``agent.run(...)``
    returned (its stop message carries the ``Stop``), a workflow's ``AgentExecutorResponse``, a conversation (a
    ``list[Message]``: a group chat's, its latest stop), the ``RepeatGuardStopped`` raised (``on_stop="raise"``), or
    the ``AgentSession`` (its latest turn). Raises ``GuardSetupError`` for anything else."""
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
        return read_state(returned).stop_of()
    raise GuardSetupError(
        "stop_of takes what agent.run(...) returned (an AgentResponse), a workflow's AgentExecutorResponse, a "
        f"list of Messages, the AgentSession, or a RepeatGuardStopped; got {type(returned).__name__}"
    )


def stop_message(stop: Stop) -> Message:
    """The assistant message a stopped run ends with: the stop's text, the ``Stop`` under ``STOP_KEY`` (on the
    message and on its text, which a streamed run's updates carry)."""
    marked = {STOP_KEY: stop.model_dump(mode="json")}
    return Message(
        role="assistant",
        contents=[Content.from_text(stop.message, additional_properties=marked)],
        additional_properties=marked,
    )


class SessionSlot:
    """``session.state[key]`` as the kit's ``Slot`` (parsed once per value written)."""

    def __init__(self, session: AgentSession, key: str, states: ParsedStates) -> None:
        self.session = session
        self.key = key
        self.states = states

    def read(self) -> GuardState:
        """The state in the session (a fresh one if none)."""
        return self.states.take(self.session.state.get(self.key), where=repr(self))

    def write(self, state: GuardState) -> None:
        """Write ``state`` into the session, as JSON text."""
        raw = state.model_dump_json()
        self.session.state[self.key] = raw
        self.states.keep(raw, state)

    def __repr__(self) -> str:
        return f"session.state[{self.key!r}]"


class RunSlot:
    """A run without a session: its state lives for that run alone (each such run is its own conversation)."""

    def __init__(self) -> None:
        self.state = GuardState()

    def read(self) -> GuardState:
        """The run's state."""
        return self.state

    def write(self, state: GuardState) -> None:
        """Keep ``state`` for the rest of the run."""
        self.state = state

    def __repr__(self) -> str:
        return "the run's state (no session)"
