"""The guard's state for one conversation: the current turn's counters and a bounded memory across turns.

``GuardState`` holds a ``Turn`` (replaced whole when a new turn starts, so no per-turn count can outlive its
turn), the deliveries that make a second delivery of a hook call count once, and the last refusal and stop
events. Every map is bounded; loading a state checks every bound, and ``load_state`` turns any failure into
``StateCorrupt``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema

from .call import MAX_NAME_CHARS
from .decision import GuardEvent, RefusalKind, Stop
from .errors import StateCorrupt
from .observation import Observation


class WholeModel(BaseModel):
    """A model whose dumps are always whole: every field counts as set, so ``exclude_unset=True`` dumps
    (the OpenAI Agents SDK's ``RunState.to_json()``, Temporal's OpenAI payload converter) keep the
    counters instead of dropping every field still at its default."""

    def model_post_init(self, context: Any, /) -> None:
        """Mark every field set (pydantic calls this after construction and validation)."""
        self.__pydantic_fields_set__.update(type(self).model_fields)


MAX_KEYS = 65_536
"""The most call keys a turn may hold, whatever ``Policy.max_keys`` says: a stored state with more is refused."""
MAX_RUNS = 128
"""The most runs kept for cycles (twice the longest ``Policy.max_cycle_period``)."""
MAX_COUNT = 2**53
"""The largest count a stored state may hold (JSON's exact integers)."""

Count = Annotated[int, Field(ge=-1, le=MAX_COUNT)]
Figure = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Mark(NamedTuple):
    """What a call key's last run saw and returned, for ``count="progress"``. Build it by keyword (the policy builds
    one per result by position: the fields' order is fixed)."""

    changes: int
    """The turn's ``changes`` when the count last continued or restarted: a different number now means
    that something which may have changed the result ran since."""
    outcome: str | None
    """A digest of the last run's outcome (ok or failed, and its result); ``None`` before any."""
    ok: bool | None
    """Whether the last run succeeded; ``None`` before any outcome."""
    opaque: int = 0
    """Runs in this turn whose result had no stable form (``Policy.max_opaque_runs`` caps them)."""


class Turn(WholeModel):
    """The counters of the current turn. ``GuardState.start`` replaces it with a fresh one.

    Loading one checks every bound: counts are whole numbers up to ``MAX_COUNT``, figures finite, maps at
    most ``MAX_KEYS`` long, no unknown field.
    """

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """The turn's id, as the adapter gave it (``None`` for turns started without one)."""
    number: Count = 0
    """Which turn of the state this is: 1 for the first (0 before any)."""
    counts: dict[str, Count] = Field(default_factory=dict, max_length=MAX_KEYS)
    """Call key digest -> calls counted (oldest-used first; at most ``Policy.max_keys``)."""
    marks: dict[str, Mark] = Field(default_factory=dict, max_length=MAX_KEYS)
    """With ``count="progress"``: call key digest -> what its last run saw and returned (keys of ``counts``)."""
    changes: Count = 0
    """With ``count="progress"``: successful runs of calls that may change state."""
    changes_seen: Count = 0
    """With ``count="progress"``: ``changes`` when the current model response began (``next_response``). A response's
    calls are judged on what the model had seen when it chose them: a neighbour in the same response that ran first
    (a CLI running a response's calls one after another) restarts no count; the next response sees it."""
    runs: list[str] = Field(default_factory=list, max_length=MAX_RUNS)
    """With ``count="progress"``: the last runs (key and outcome digests), for cycles."""
    recent: list[str] = Field(default_factory=list, max_length=MAX_KEYS)
    """With ``window`` set: the keys of the last counted calls, oldest first."""
    refusals: Count = 0
    """Calls refused."""
    responses: Count = 0
    """Model calls let through by ``decide_model_call``; numbers the model's responses."""
    refused_responses: Count = 0
    """Model responses with at least one refused call (what ``max_refusals`` counts)."""
    batch: Count = -1
    """The response (``responses``) whose calls ``decide_tool_calls`` decided as a batch; -1 for none."""
    refused_in: Count = -1
    """The response (``responses``) in which the last refusal was counted; -1 for none."""
    last_refused: str | None = None
    """The tool refused last."""
    errors_in_a_row: Count = 0
    """Failed calls since the last success."""
    last_failed: str | None = None
    """The tool that failed last."""
    model_calls: Count = 0
    """Model calls recorded by ``record_model_call``."""
    model_seconds: Figure = 0.0
    """Model time recorded by ``record_model_call`` (recorded values, never a clock)."""
    cost_usd: Figure = 0.0
    """Cost recorded by ``record_model_call``."""
    answer: str | None = None
    """A digest of the model's last text answer in the turn (for ``max_same_answers``); ``None`` before any."""
    answered_in: Count = -1
    """The response (``responses``) that gave ``answer``; -1 for none."""
    same_answers: Count = 0
    """The same text answer in consecutive responses, nothing else between: how many times in a row."""
    stop: Stop | None = None
    """The turn's stop, once ``decide_model_call`` has ended it."""

    def __setattr__(self, name: str, value: Any) -> None:
        """Set a counter with a plain write, as pydantic's own path ends (no field is validated on assignment, and
        every field counts as set already) for a tenth of its cost: a decision sets several."""
        if name not in _COUNTERS:
            raise ValueError(f'"Turn" object has no field "{name}"')
        self.__dict__[name] = value


_COUNTERS = frozenset(Turn.model_fields)

MAX_DELIVERIES = 256
"""The most delivery ids a state keeps (a hard cap; a stored state with more is refused). Every id seen in the
current model response is kept while it is current, up to this cap (past it, the oldest are forgotten first)."""
RECENT_DELIVERIES = 64
"""Outcome and model-call delivery ids kept from earlier responses and turns (the newest first). A call's own
id is scoped to its response (``<call id>@<turn>.<response>``) and can never match once the response is over."""
MAX_EVENTS = 64
"""Refusal and stop events kept (oldest dropped first)."""
MAX_STATE_CHARS = 16_000_000
"""A stored state longer than this (in JSON characters) is refused before it is parsed."""


class Delivery(NamedTuple):
    """A decided delivery, remembered so that a second delivery of it is not counted again. Build it by keyword
    (the policy builds one per call by position, a third cheaper: the fields' order is part of the format)."""

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

_WHY = "|".join(["", *(kind.value for kind in RefusalKind)])
_PACKED = "(?s)^[0-7]-?[0-9]{1,19}:(" + _WHY + "):[0-9a-f]{0,64}:.*$"
"""A delivery as it is stored: ``<flags><number>:<why>:<key>:<tool>``, flags 1 refused, 2 settled, 4 taken."""
_AS_DELIVERY: TypeAdapter[Delivery] = TypeAdapter(Delivery)


def _pack(delivery: Delivery) -> str:
    flags = delivery.refused + 2 * delivery.settled + 4 * delivery.taken
    return f"{flags}{delivery.number}:{delivery.why}:{delivery.key}:{delivery.tool}"


def _unpack(text: str) -> Delivery:
    head, why, key, tool = text.split(":", 3)
    flags = ord(head[0]) - 48
    return Delivery(
        tool=tool, key=key, number=int(head[1:]), refused=bool(flags & 1), settled=bool(flags & 2), why=why,
        taken=bool(flags & 4),
    )  # fmt: skip


def _packed_texts(deliveries: Deliveries) -> dict[str, str]:
    return deliveries._packed


class Deliveries(MutableMapping[str, Delivery]):
    """Delivery id -> ``Delivery``, oldest first, at most ``MAX_DELIVERIES``: a dict whose values are kept (and
    stored) as short texts and read back as ``Delivery`` one at a time, so that loading a state with hundreds
    of them costs what a state with a few did (a full state is parsed on every update through a store).

    Loads the lists that earlier states stored (``[tool, key, number, refused, settled, why, taken]``) too.
    """

    def __init__(self, deliveries: Mapping[str, Delivery] | None = None) -> None:
        self._packed: dict[str, str] = {}
        if deliveries:
            self.update(deliveries)

    def __getitem__(self, delivery_id: str) -> Delivery:
        return _unpack(self._packed[delivery_id])

    def get(self, delivery_id: str, default: None = None) -> Delivery | None:  # type: ignore[override]
        """``Mapping.get`` (no other default), without the ``KeyError`` it raises and catches for every id not seen:
        most are not."""
        packed = self._packed.get(delivery_id)
        return None if packed is None else _unpack(packed)

    def __setitem__(self, delivery_id: str, delivery: Delivery) -> None:
        self._packed[delivery_id] = _pack(delivery)

    def __delitem__(self, delivery_id: str) -> None:
        del self._packed[delivery_id]

    def __contains__(self, delivery_id: object) -> bool:
        return delivery_id in self._packed

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Deliveries):
            return self._packed == other._packed
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Deliveries({dict(self.items())!r})"

    def settle(self, delivery_id: str, tool: str) -> str | Literal[False] | None:
        """Mark the delivery of a call of ``tool`` kept under ``delivery_id`` settled (its outcome is recorded): its
        key; ``False`` if it was refused or settled already; ``None`` if none is kept (read and written as its text)."""
        packed = self._packed
        text = packed.get(delivery_id)
        if text is None:
            return None
        head, _why, key, kept = text.split(":", 3)
        if kept != tool:
            return None
        flags = ord(head[0]) - 48
        if flags & 3:  # refused (1) or settled (2)
            return False
        packed[delivery_id] = f"{flags | 2}{text[1:]}"
        return key

    def forget_calls(self, keep: int) -> None:
        """Forget every call's delivery (one with a key), and all but the newest ``keep`` others (``SEEN``)."""
        packed = self._packed
        seen = [ident for ident, text in packed.items() if text.split(":", 3)[2] == ""][-keep:] if keep else []
        if len(seen) < len(packed):
            kept = {ident: packed[ident] for ident in seen}
            packed.clear()
            packed.update(kept)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, tp: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:  # pragma: no mutate block
        """Stored: ``{delivery id: packed text}`` (each text checked whole), or the lists of earlier states.

        Left out of mutation testing: pydantic builds the schema once, when ``GuardState`` is defined, before any
        mutant is switched on, so no test could see one here (``tests/core/test_hostile.py`` tests what it refuses).
        """
        text = core_schema.str_schema(pattern=_PACKED, max_length=MAX_NAME_CHARS + 128)
        stored = core_schema.dict_schema(
            core_schema.str_schema(max_length=4 * MAX_NAME_CHARS), text, max_length=MAX_DELIVERIES
        )
        return core_schema.no_info_wrap_validator_function(
            cls._validate,
            stored,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _packed_texts, return_schema=core_schema.dict_schema(core_schema.str_schema(), core_schema.str_schema())
            ),
        )

    @classmethod
    def _validate(cls, stored: Any, check: core_schema.ValidatorFunctionWrapHandler) -> Deliveries:
        """A ``Deliveries`` as it is; else the stored texts checked whole (earlier states' lists packed first)."""
        if isinstance(stored, Deliveries):
            return stored
        if isinstance(stored, dict) and stored and type(next(iter(stored.values()))) is not str:
            stored = {
                ident: value if type(value) is str else _pack(_AS_DELIVERY.validate_python(value))
                for ident, value in stored.items()
            }
        deliveries = cls()
        deliveries._packed = check(stored)
        return deliveries


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
    deliveries: Deliveries = Field(default_factory=Deliveries)
    """Delivery ids decided or recorded, oldest first: every one of the current model response (the work in
    flight: its calls' decisions and outcomes, its model call), up to ``MAX_DELIVERIES``, and the last
    ``RECENT_DELIVERIES`` outcome and model-call ids of earlier responses."""
    events: list[GuardEvent] = Field(default_factory=list, max_length=MAX_EVENTS)
    """The last ``MAX_EVENTS`` refusals and stops, across turns."""
    key_id: Annotated[str, Field(max_length=8)] | None = None
    """A 4-byte fingerprint of the ``Policy.digest_key`` its digests were made with (``None``: no key)."""

    _news: list[Observation] | None = PrivateAttr(None)

    def __eq__(self, other: object) -> bool:
        """States are equal when their counts are (whether one is listening does not matter)."""
        if not isinstance(other, GuardState):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable

    @property
    def news(self) -> list[Observation] | None:
        """While the state is listening, the observations the policy made on it since ``listen``; else ``None``."""
        news: list[Observation] | None = self.__pydantic_private__["_news"]  # type: ignore[index]  # no getattr
        return news

    def listen(self) -> None:
        """Keep the observations the policy makes on this state, for whoever commits it to hand them on."""
        self._news = []

    def heard(self) -> list[Observation]:
        """Stop listening; the observations kept since ``listen``, in order (none if it was not listening)."""
        news, self._news = self._news, None
        return news or []

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
        """Start turn ``turn_id``: a fresh ``Turn``; events are kept, and deliveries as at a new response."""
        self.turn = Turn(id=turn_id, number=self.turn.number + 1)
        self._end_response()

    def next_response(self) -> None:
        """The model's next response begins (a model call was let through): number it, and forget the
        deliveries that can no longer match (the past response's call ids; outcome and model-call ids past
        the newest ``RECENT_DELIVERIES``)."""
        turn = self.turn
        turn.responses += 1
        turn.changes_seen = turn.changes
        self._end_response()

    def _end_response(self) -> None:
        deliveries = self.deliveries
        if deliveries._packed:
            deliveries.forget_calls(keep=RECENT_DELIVERIES)

    def stop_of(self, turn_id: str | None = None) -> Stop | None:
        """How turn ``turn_id`` was stopped, from the kept events; ``None`` if it was not (or is forgotten).
        Without ``turn_id``: the current turn's stop."""
        turn = self.turn
        if turn_id is None or (turn.stop is not None and turn.id == turn_id):
            return turn.stop
        for event in reversed(self.events):
            if event.kind == "stop" and event.turn_id == turn_id:
                return event.as_stop()
        return None

    def events_since(self, since: GuardEvent | None) -> list[GuardEvent]:
        """The kept events after ``since``, the newest event (the very object) before a change, or ``None`` if there
        was none: the refusals and stops the change added."""
        for index in range(len(self.events) - 1, -1, -1):
            if self.events[index] is since:
                return self.events[index + 1 :]
        return list(self.events)  # none before, or forgotten since (more than MAX_EVENTS came): all that are kept

    def remember(self, delivery_id: str, delivery: Delivery) -> None:
        """Keep ``delivery`` under ``delivery_id`` (a call's is scoped to its response; an outcome's or a model
        call's is ``SEEN``), forgetting the oldest past ``MAX_DELIVERIES``."""
        self._keep(delivery_id, _pack(delivery))

    def remember_decision(self, delivery_id: str, tool: str, key: str, number: int, refused: bool, why: str) -> None:
        """``remember(delivery_id, Delivery(tool, key, number, refused, False, why))`` for a call decided now, its
        text written at once, no ``Delivery`` built: it is on the path of every call with an id."""
        self._keep(delivery_id, f"{1 if refused else 0}{number}:{why}:{key}:{tool}")

    def _keep(self, delivery_id: str, text: str) -> None:
        packed = self.deliveries._packed
        packed[delivery_id] = text
        if len(packed) > MAX_DELIVERIES:
            del packed[next(iter(packed))]

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
