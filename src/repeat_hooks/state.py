"""The guard's state for one session: the current turn's counters and a bounded memory across turns."""

from __future__ import annotations

import json
from typing import Annotated, Any, NamedTuple

from pydantic import ConfigDict, Field, ValidationError, model_validator

from .decision import GuardEvent, Stop
from .store_errors import StateCorrupt
from .turn import Turn
from .whole import WholeModel

MAX_DELIVERIES = 64
"""Delivery ids remembered for idempotency (oldest forgotten first)."""
MAX_EVENTS = 64
"""Refusal and stop events kept (oldest dropped first)."""
MAX_STATE_CHARS = 16_000_000
"""A stored state longer than this (in JSON characters) is refused before it is parsed."""


class Delivery(NamedTuple):
    """A decided delivery, remembered so that a second delivery of it is not counted again. Build it by keyword."""

    tool: str
    key: str
    number: int
    """The call's number for its key when it was decided."""
    refused: bool
    settled: bool
    """Its outcome was recorded (``post_tool_call``)."""
    why: str = ""
    """For a refused call, the ``RefusalKind`` value of the rule that refused it."""
    taken: bool = False
    """A call decided with its batch: a later per-call decision of it has taken this decision."""


SEEN = Delivery(tool="", key="", number=0, refused=False, settled=True)
"""What the ``delivery_id`` of an outcome or a model call is remembered as: only that it was seen matters."""

_TURN_FIELDS = frozenset(Turn.model_fields) - {"id", "number"}
_SETTINGS = frozenset(
    {"max_calls", "match", "count", "limits", "exempt", "read_only", "max_refusals", "max_model_calls"}
    | {"max_cost_usd", "max_model_seconds", "max_errors_in_a_row", "window", "destructive", "digest_key"}
)
"""Policy settings (by name; the state cannot import the policy): given to a GuardState, they are a mistake."""


class GuardState(WholeModel):
    """Everything the guard counts. Serializable: ``model_validate_json(model_dump_json())`` is exact.

    Holds digests, tool names and ids, never argument or result values. A state saved by 0.1 (the
    per-turn counters at the top level) loads as it was. Loading checks every bound (see ``Turn``);
    ``load_state`` turns any failure into ``StateCorrupt``.
    """

    model_config = ConfigDict(extra="forbid")

    turn: Turn = Field(default_factory=Turn)
    """The current turn's counters (a fresh ``Turn`` at every new turn)."""
    deliveries: dict[str, Delivery] = Field(default_factory=dict, max_length=MAX_DELIVERIES)
    """Recently decided delivery ids (at most ``MAX_DELIVERIES``), across turns."""
    events: list[GuardEvent] = Field(default_factory=list, max_length=MAX_EVENTS)
    """The last ``MAX_EVENTS`` refusals and stops, across turns."""
    key_id: Annotated[str, Field(max_length=8)] | None = None
    """A 4-byte fingerprint of the ``Policy.digest_key`` its digests were made with (``None``: no key)."""

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """A 0.1 state kept the turn's counters at the top level (``turn`` was its number): nest them."""
        if isinstance(data, dict) and any(name in _SETTINGS for name in data):
            settings = sorted(name for name in data if name in _SETTINGS)
            raise ValueError(
                f"{', '.join(settings)}: a GuardState holds one conversation's counts, not settings: give "
                "them to the Policy (Policy(...), or the adapter's guard)"
            )
        if isinstance(data, dict) and (isinstance(data.get("turn"), int) or "counts" in data):
            data = dict(data)
            turn = {name: data.pop(name) for name in list(data) if name in _TURN_FIELDS}
            turn["id"] = data.pop("turn_id", None)
            turn["number"] = data.pop("turn", 0)
            data["turn"] = turn
            deliveries = data.get("deliveries")
            if isinstance(deliveries, dict):  # 0.1 kept a call's id bare: scope it to the turn and response now
                scope = f"@{turn['number']}.{turn.get('responses', 0)}"
                data["deliveries"] = {
                    (ident + scope if isinstance(seen, list) and len(seen) > 1 and seen[1] else ident): seen
                    for ident, seen in deliveries.items()
                }
        return data

    def start(self, turn_id: str | None) -> None:
        """Start turn ``turn_id``: a fresh ``Turn``; deliveries and events are kept."""
        self.turn = Turn(id=turn_id, number=self.turn.number + 1)

    def stop_of(self, turn_id: str) -> Stop | None:
        """How turn ``turn_id`` was stopped, from the kept events; ``None`` if it was not (or is forgotten)."""
        turn = self.turn
        if turn.stop is not None and turn.id == turn_id:
            return turn.stop
        for event in reversed(self.events):
            if event.kind == "stop" and event.turn_id == turn_id:
                return event.as_stop()
        return None

    def remember(self, delivery_id: str, delivery: Delivery) -> None:
        """Keep ``delivery`` under ``delivery_id``, forgetting the oldest past ``MAX_DELIVERIES``."""
        deliveries = self.deliveries
        deliveries[delivery_id] = delivery
        if len(deliveries) > MAX_DELIVERIES:
            del deliveries[next(iter(deliveries))]

    def record(self, event: GuardEvent) -> None:
        """Keep ``event``, dropping the oldest past ``MAX_EVENTS``."""
        self.events.append(event)
        if len(self.events) > MAX_EVENTS:
            del self.events[0]


def load_state(stored: str | bytes | bytearray | dict[str, Any] | GuardState | None) -> GuardState:
    """A ``GuardState`` from what an SDK or a store kept: JSON text or bytes, a dict, a state, or ``None``.

    ``None`` (nothing kept yet) gives a fresh state; a ``GuardState`` is returned as it is. Anything that
    is not a valid state raises ``StateCorrupt`` (a ``StoreUnavailable``) saying where it came from and how
    to recover, so an adapter treats it as it treats a store that cannot decide.
    """
    if stored is None:
        return GuardState()
    if isinstance(stored, GuardState):
        return stored
    held = getattr(stored, "state", None)
    if isinstance(held, GuardState):  # a StopRepeatedCalls
        return held
    if isinstance(stored, (str, bytes, bytearray)) and len(stored) > MAX_STATE_CHARS:
        raise StateCorrupt(
            f"the stored guard state is {len(stored)} characters long, more than any state the guard writes "
            f"({MAX_STATE_CHARS}); delete it to start this conversation's counts afresh"
        )
    try:
        if isinstance(stored, (str, bytes, bytearray)):
            state = GuardState.model_validate_json(stored) if b'"state"' not in _head(stored) else None
            if state is not None:
                return state
            return load_state(json.loads(stored))
        if isinstance(stored, dict):
            if isinstance(stored.get("state"), dict):  # a whole StopRepeatedCalls dump (0.1's or today's)
                stored = stored["state"]
            return GuardState.model_validate(stored)
    except (ValidationError, ValueError, RecursionError, UnicodeError) as error:
        raise StateCorrupt(
            f"the stored guard state is not a repeat-hooks GuardState ({type(error).__name__}: "
            f"{str(error).splitlines()[0]}); delete it to start this conversation's counts afresh"
        ) from error
    raise StateCorrupt(
        f"the stored guard state is a {type(stored).__name__}, not JSON or a dict; delete it to start this "
        "conversation's counts afresh"
    )


def _head(stored: str | bytes | bytearray) -> bytes:
    """The first bytes of a stored state, enough to tell a guard's dump (``{"policy": ..., "state": ...}``)."""
    head = stored[:2048]
    return head.encode("utf-8", "replace") if isinstance(head, str) else bytes(head)
