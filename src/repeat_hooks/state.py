"""The guard's counters for one session: the current turn's counts and a bounded memory across turns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .decision import Delivery, GuardEvent, Mark, Stop

MAX_DELIVERIES = 64
"""Delivery ids remembered for idempotency (oldest forgotten first)."""
MAX_EVENTS = 64
"""Refusal and stop events kept (oldest dropped first)."""


class WholeModel(BaseModel):
    """A model whose dumps are always whole: every field counts as set, so ``exclude_unset=True`` dumps
    (the OpenAI Agents SDK's ``RunState.to_json()``, Temporal's OpenAI payload converter) keep the
    counters instead of dropping every field still at its default."""

    def model_post_init(self, context: Any, /) -> None:
        """Mark every field set (pydantic calls this after construction and validation)."""
        self.__pydantic_fields_set__.update(type(self).model_fields)


class GuardState(WholeModel):
    """Everything the guard counts. Serializable: ``model_validate_json(model_dump_json())`` is exact.

    Holds digests and tool names, never argument values.
    """

    turn_id: str | None = None
    """The current turn's id, as the adapter gave it (``None`` for turns started without one)."""
    turn: int = 0
    """How many turns this state has seen; the current turn's number."""
    counts: dict[str, int] = Field(default_factory=dict)
    """This turn: call key digest -> calls counted (oldest-used first; capped at ``max_keys``)."""
    marks: dict[str, Mark] = Field(default_factory=dict)
    """This turn, with ``count="progress"``: call key digest -> what its last run saw and returned (same keys
    as ``counts``)."""
    changes: int = 0
    """This turn, with ``count="progress"``: successful runs of calls that may change state."""
    runs: list[str] = Field(default_factory=list)
    """This turn, with ``count="progress"``: the last runs (key and outcome digests), for cycles."""
    recent: list[str] = Field(default_factory=list)
    """This turn, with ``window`` set: the keys of the last counted calls, oldest first."""
    refusals: int = 0
    """This turn: calls refused."""
    responses: int = 0
    """This turn: model calls let through by ``pre_llm_call``; numbers the model's responses."""
    refused_responses: int = 0
    """This turn: model responses with at least one refused call (what ``max_refusals`` counts)."""
    refused_in: int = -1
    """This turn: the response (``responses``) in which the last refusal was counted; -1 for none."""
    last_refused: str | None = None
    """This turn: the tool refused last."""
    errors_in_a_row: int = 0
    """This turn: failed calls since the last success."""
    last_failed: str | None = None
    """This turn: the tool that failed last."""
    model_calls: int = 0
    """This turn: model calls recorded by ``post_llm_call``."""
    model_seconds: float = 0.0
    """This turn: model time recorded by ``post_llm_call`` (recorded values, never a clock)."""
    cost_usd: float = 0.0
    """This turn: cost recorded by ``post_llm_call``."""
    stop: Stop | None = None
    """This turn's stop, once ``pre_llm_call`` has ended it."""
    deliveries: dict[str, Delivery] = Field(default_factory=dict)
    """Recently decided delivery ids (at most ``MAX_DELIVERIES``), across turns."""
    events: list[GuardEvent] = Field(default_factory=list)
    """The last ``MAX_EVENTS`` refusals and stops, across turns."""

    def reset_turn(self, turn_id: str | None) -> None:
        """Start turn ``turn_id``: clear the per-turn counters, keep deliveries and events."""
        self.turn_id = turn_id
        self.turn += 1
        self.counts.clear()
        self.marks.clear()
        self.changes = 0
        self.runs.clear()
        self.recent.clear()
        self.refusals = 0
        self.responses = 0
        self.refused_responses = 0
        self.refused_in = -1
        self.last_refused = None
        self.errors_in_a_row = 0
        self.last_failed = None
        self.model_calls = 0
        self.model_seconds = 0.0
        self.cost_usd = 0.0
        self.stop = None

    def stop_of(self, turn_id: str) -> Stop | None:
        """How turn ``turn_id`` was stopped, from the kept events; ``None`` if it was not (or is forgotten)."""
        if self.stop is not None and self.turn_id == turn_id:
            return self.stop
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
