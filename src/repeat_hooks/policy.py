"""The policy: the guard's settings, and the pure rules that turn a state and an event into a decision.

``Policy`` holds no counters. Each rule takes the session's ``GuardState`` and changes it in place, so
an adapter can keep the state wherever its runtime needs it (on the hook, in the SDK's context, in a
``StateStore``) and call the same rules. No I/O, no clock, no randomness: a replay decides the same.
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_serializer, field_validator, model_validator

from .call import ToolCall, call_key
from .decision import Delivery, GuardEvent, Refusal, Stop
from .messages import REFUSE_SAME_ARGUMENTS, REFUSE_SAME_TOOL, STOP_MESSAGES, check_template, render
from .state import GuardState, WholeModel
from .stop_reason import StopReason

logger = logging.getLogger("repeat_hooks")

TURN_ENDED = "Refused: this turn has ended ({reason}). Do not call any more tools: answer with what you know."
_MODEL_DELIVERY = "model"
_OUTCOME_DELIVERY = "outcome"

NonNegative = Annotated[int, Field(ge=0)]


class Policy(WholeModel):
    """The guard's settings. Every limit counts within one turn; ``None`` switches a rule off.

    Invalid settings fail at construction with a ``pydantic.ValidationError`` naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: Literal["progress", "per_turn"] = "per_turn"
    """When a repeat counts: ``"progress"``, only while nothing that could change its result has happened
    since its last run; ``"per_turn"``, every same call in the turn."""
    read_only: frozenset[str] = frozenset()
    """Tools known to change nothing (``{"get_order"}``): running them restarts no other call's count."""
    max_cycle_period: Annotated[int, Field(ge=2)] | None = 4
    """Longest cycle (A-B-A-B, A-B-C-A-B-C, ...) detected; ``None`` switches cycle detection off."""
    match: Literal["tool_and_arguments", "tool"] = "tool_and_arguments"
    """What makes two calls the same: the tool and its canonical arguments (default), or the tool alone."""
    max_calls: NonNegative | None = 2
    """Same calls allowed per turn; the next one is refused (checked in ``pre_tool_call``)."""
    limits: dict[str, NonNegative] = Field(default_factory=dict)
    """Per-tool overrides of ``max_calls``, by tool name (``{"place_order": 1}``)."""
    exempt: frozenset[str] = frozenset()
    """Tools never counted nor refused (``{"wait_for_job"}``)."""
    window: Annotated[int, Field(ge=1)] | None = None
    """Count only within the last ``window`` counted calls of the turn (a sliding window)."""
    ignore_arguments: frozenset[str] = frozenset()
    """Argument fields left out of the key, at any depth (``{"request_id"}``)."""
    count_failures: bool = True
    """``False``: a call that failed is not counted, so only repeats of successes are refused."""
    max_errors_in_a_row: Annotated[int, Field(ge=1)] | None = None
    """Failed calls in a row that end the turn with ``too_many_errors``; a success resets the count."""
    max_refusals: NonNegative | None = 3
    """Refusals that end the turn with ``ignored_refusals`` at the next model call; ``0`` ends it at the
    first refusal, with ``repeated_call``."""
    max_model_calls: Annotated[int, Field(ge=1)] | None = None
    """Model calls (recorded by ``post_llm_call``) after which the turn ends with ``max_steps``."""
    max_model_seconds: Annotated[float, Field(gt=0)] | None = None
    """Recorded model seconds; going over ends the turn with ``time``."""
    max_cost_usd: Annotated[float, Field(gt=0)] | None = None
    """Recorded cost in US dollars; going over ends the turn with ``cost``."""
    refusal_message: str | None = None
    """The text the model gets for a refused call (``{tool}``, ``{count}``, ``{limit}``); ``None``: the
    default for ``match``."""
    stop_messages: dict[StopReason, str] = Field(default_factory=dict)
    """Final texts by stop reason, over the defaults (same placeholders)."""
    max_keys: Annotated[int, Field(ge=1)] = 1024
    """Distinct call keys kept per turn; past it the least recently used is forgotten."""

    @field_validator("refusal_message")
    @classmethod
    def _check_refusal_message(cls, value: str | None) -> str | None:
        return None if value is None else check_template(value)

    @field_validator("stop_messages")
    @classmethod
    def _check_stop_messages(cls, value: dict[StopReason, str]) -> dict[StopReason, str]:
        for template in value.values():
            check_template(template)
        return value

    @model_validator(mode="after")
    def _check_window(self) -> Policy:
        if self.window is not None:
            tightest = max([self.max_calls or 0, *self.limits.values()])
            if self.window <= tightest:
                raise ValueError(
                    f"window ({self.window}) must be larger than every call limit ({tightest}), "
                    "or no call could ever be refused"
                )
        return self

    @field_serializer("exempt", "ignore_arguments", "read_only")
    def _sorted(self, value: frozenset[str]) -> list[str]:
        return sorted(value)

    # -- the rules -------------------------------------------------------------------------------

    def start_turn(self, state: GuardState, turn_id: str | None = None) -> None:
        """A turn starts: reset the per-turn counters, unless ``turn_id`` is already the current turn.

        ``None`` always starts a new turn. Returns nothing.
        """
        if turn_id is None or turn_id != state.turn_id:
            state.reset_turn(turn_id)

    def check_tool_call(self, state: GuardState, call: ToolCall, turn_id: str | None = None) -> Refusal | None:
        """Before a tool runs: count the call; ``None`` lets it run, a ``Refusal`` replaces its result.

        A ``call_id`` seen before returns the first decision without counting again. A ``turn_id``
        other than the current one starts that turn first.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        call_id = call.call_id
        if call_id is not None:
            seen = state.deliveries.get(call_id)
            if seen is not None:
                return self._refusal(seen.tool, seen.number) if seen.refused else None
        name = call.name
        if name in self.exempt:
            return None
        if state.stop is not None:
            reason = state.stop.reason
            return Refusal(message=TURN_ENDED.format(reason=reason.value), reason=reason)
        limit = self.limits.get(name, self.max_calls)
        if limit is None:
            return None
        key = call_key(
            name, call.arguments, by_arguments=self.match == "tool_and_arguments", ignore=self.ignore_arguments
        )
        count = self._count(state, key)
        refused = count > limit
        if call_id is not None:
            state.remember(call_id, Delivery(name, key, count, refused, False))
        if not refused:
            return None
        state.refusals += 1
        state.last_refused = name
        self._event(state, "refusal", StopReason.REPEATED_CALL, name, count, limit)
        return self._refusal(name, count)

    def record_tool_result(
        self,
        state: GuardState,
        call: ToolCall,
        ok: bool,
        turn_id: str | None = None,
        delivery_id: str | None = None,
        *,
        result: Any = None,
    ) -> None:
        """After a tool ran: record whether it succeeded. Returns nothing; ``check_model_call`` acts on it.

        A success resets the errors in a row; a failure adds one and, with ``count_failures=False``,
        takes the call back out of its key's count. An outcome delivered twice is recorded once: by
        ``delivery_id`` when the runtime delivers outcomes separately from their calls (a hook call
        per activity), else by the ``call_id`` its ``check_tool_call`` saw.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        if delivery_id is not None:
            if delivery_id in state.deliveries:
                return
            state.remember(delivery_id, Delivery(call.name, _OUTCOME_DELIVERY, 0, False, True))
        key: str | None = None
        if call.call_id is not None:
            seen = state.deliveries.get(call.call_id)
            if seen is not None:
                if seen.settled or seen.refused:
                    return
                state.deliveries[call.call_id] = seen._replace(settled=True)
                key = seen.key
        if ok:
            state.errors_in_a_row = 0
            return
        state.errors_in_a_row += 1
        state.last_failed = call.name
        if self.count_failures or call.name in self.exempt:
            return
        if key is None:
            key = call_key(
                call.name, call.arguments, by_arguments=self.match == "tool_and_arguments", ignore=self.ignore_arguments
            )
        self._uncount(state, key)

    def check_model_call(self, state: GuardState, turn_id: str | None = None) -> Stop | None:
        """Before a model call: ``None`` lets it happen; a ``Stop`` ends the turn with its final message.

        Rules, in order: refusals (``max_refusals``), errors in a row, model calls, seconds, cost. Once
        a turn has stopped, every later call returns the same ``Stop``.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        if state.stop is not None:
            return state.stop
        tripped = self._tripped(state)
        if tripped is None:
            return None
        reason, tool, count, limit = tripped
        template = self.stop_messages.get(reason, STOP_MESSAGES[reason])
        stop = Stop(message=render(template, tool, count, limit), reason=reason)
        state.stop = stop
        self._event(state, "stop", reason, tool, count, limit, stop.message)
        return stop

    def record_model_call(
        self,
        state: GuardState,
        seconds: float = 0.0,
        cost_usd: float = 0.0,
        delivery_id: str | None = None,
        turn_id: str | None = None,
    ) -> None:
        """After a model call: count it, with its recorded latency and cost (never a clock). Returns nothing.

        A ``delivery_id`` seen before is not counted again. Negative or NaN figures count as 0.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        if delivery_id is not None:
            if delivery_id in state.deliveries:
                return
            state.remember(delivery_id, Delivery("", _MODEL_DELIVERY, 0, False, True))
        state.model_calls += 1
        state.model_seconds += _amount(seconds, "seconds")
        state.cost_usd += _amount(cost_usd, "cost_usd")

    # -- helpers ---------------------------------------------------------------------------------

    def _count(self, state: GuardState, key: str) -> int:
        counts = state.counts
        count = counts.pop(key, 0) + 1
        counts[key] = count  # re-inserted: the most recently used key is last
        if self.window is not None:
            recent = state.recent
            recent.append(key)
            if len(recent) > self.window:
                self._decrement(counts, recent.pop(0))
        if len(counts) > self.max_keys:
            oldest = next(iter(counts))
            del counts[oldest]
            if self.window is not None:
                state.recent[:] = [k for k in state.recent if k != oldest]
        return count

    def _uncount(self, state: GuardState, key: str) -> None:
        if self.window is not None:
            recent = state.recent
            for index in range(len(recent) - 1, -1, -1):
                if recent[index] == key:
                    del recent[index]
                    break
            else:
                return  # already out of the window
        self._decrement(state.counts, key)

    @staticmethod
    def _decrement(counts: dict[str, int], key: str) -> None:
        count = counts.get(key)
        if count is None:
            return
        if count <= 1:
            del counts[key]
        else:
            counts[key] = count - 1

    def _tripped(self, state: GuardState) -> tuple[StopReason, str | None, float, float] | None:
        if self.max_refusals is not None and state.refusals >= max(1, self.max_refusals):
            reason = StopReason.REPEATED_CALL if self.max_refusals == 0 else StopReason.IGNORED_REFUSALS
            return reason, state.last_refused, state.refusals, self.max_refusals
        if self.max_errors_in_a_row is not None and state.errors_in_a_row >= self.max_errors_in_a_row:
            return StopReason.TOO_MANY_ERRORS, state.last_failed, state.errors_in_a_row, self.max_errors_in_a_row
        if self.max_model_calls is not None and state.model_calls >= self.max_model_calls:
            return StopReason.MAX_STEPS, None, state.model_calls, self.max_model_calls
        if self.max_model_seconds is not None and state.model_seconds > self.max_model_seconds:
            return StopReason.TIME, None, state.model_seconds, self.max_model_seconds
        if self.max_cost_usd is not None and state.cost_usd > self.max_cost_usd:
            return StopReason.COST, None, state.cost_usd, self.max_cost_usd
        return None

    def _refusal(self, tool: str, count: int) -> Refusal:
        template = self.refusal_message
        if template is None:
            template = REFUSE_SAME_ARGUMENTS if self.match == "tool_and_arguments" else REFUSE_SAME_TOOL
        limit = self.limits.get(tool, self.max_calls)
        return Refusal(message=render(template, tool, count, limit), reason=StopReason.REPEATED_CALL)

    def _event(
        self,
        state: GuardState,
        kind: Literal["refusal", "stop"],
        reason: StopReason,
        tool: str | None,
        count: float,
        limit: float,
        message: str | None = None,
    ) -> None:
        state.record(
            GuardEvent(
                kind=kind,
                reason=reason,
                tool=tool,
                count=count,
                limit=limit,
                turn_id=state.turn_id,
                turn=state.turn,
                message=message,
            )
        )
        log = logger.info if kind == "refusal" else logger.warning
        log(
            "repeat_hooks %s: %s tool=%s count=%s limit=%s turn=%s",
            kind,
            reason.value,
            tool,
            count,
            limit,
            state.turn_id if state.turn_id is not None else state.turn,
        )


def _amount(value: Any, name: str) -> float:
    try:
        amount = float(value)
    except (TypeError, ValueError):
        amount = math.nan
    if math.isnan(amount) or amount < 0:
        logger.warning("repeat_hooks: post_llm_call got %s=%r; counted as 0", name, value)
        return 0.0
    return amount
