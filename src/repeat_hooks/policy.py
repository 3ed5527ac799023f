"""The policy: the guard's settings, and the pure rules that turn a state and an event into a decision.

``Policy`` holds no counters. Each rule takes the session's ``GuardState`` and changes it in place, so
an adapter can keep the state wherever its runtime needs it (on the hook, in the SDK's context, in a
``StateStore``) and call the same rules. No I/O, no clock, no randomness: a replay decides the same.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_serializer, field_validator, model_validator

from .call import UNKNOWN_OUTCOME, ToolCall, call_key, outcome_digest
from .decision import Delivery, GuardEvent, Mark, Refusal, Stop
from .messages import (
    REFUSE_CYCLE,
    REFUSE_FORBIDDEN,
    REFUSE_NO_PROGRESS,
    REFUSE_NO_PROGRESS_TOOL,
    REFUSE_SAME_ARGUMENTS,
    REFUSE_SAME_FAILURE,
    REFUSE_SAME_TOOL,
    STOP_MESSAGES,
    check_template,
    render,
)
from .state import GuardState, WholeModel
from .stop_reason import StopReason

logger = logging.getLogger("repeat_hooks")

TURN_ENDED = "Refused: this turn has ended ({reason}). Do not call any more tools: answer with what you know."
_SEEN = Delivery("", "", 0, False, True)
"""What a ``delivery_id`` of an outcome or a model call is remembered as: only that it was seen matters."""

_REPEAT, _FAILURE, _CYCLE, _FORBIDDEN = "repeat", "failure", "cycle", "forbidden"
_REFUSALS = {
    ("per_turn", "tool_and_arguments"): REFUSE_SAME_ARGUMENTS,
    ("per_turn", "tool"): REFUSE_SAME_TOOL,
    ("progress", "tool_and_arguments"): REFUSE_NO_PROGRESS,
    ("progress", "tool"): REFUSE_NO_PROGRESS_TOOL,
}

NonNegative = Annotated[int, Field(ge=0)]


class Policy(WholeModel):
    """The guard's settings. Every limit counts within one turn; ``None`` switches a rule off.

    Invalid settings fail at construction with a ``pydantic.ValidationError`` naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: Literal["progress", "per_turn"] = "progress"
    """When a repeat counts: ``"progress"``, only while nothing that could change its result has happened
    since its last run; ``"per_turn"``, every same call in the turn."""
    read_only: frozenset[str] = frozenset()
    """Tools known to change nothing (``{"get_order"}``): running them restarts no other call's count."""
    max_cycle_period: Annotated[int, Field(ge=2)] | None = 8
    """With ``count="progress"``: the longest cycle (A-B-A-B, A-B-C-A-B-C, ...) refused at the start of its
    third pass once its second pass repeated the first (same calls, same results); ``None`` switches it off."""
    ignore_results: frozenset[str] = frozenset()
    """Result fields left out when comparing results, at any depth (``{"checked_at", "order_id"}``): a result
    that differs only there is the same result, so a call returning a new timestamp or a new order id each
    time is still a repeat."""
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
    def _check_exempt(self) -> Policy:
        both = sorted(self.exempt & set(self.limits))
        if both:
            raise ValueError(
                f"{', '.join(both)} is both in exempt (never refused) and in limits (refused past a limit): "
                "keep it in one of the two"
            )
        return self

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

    @field_serializer("exempt", "ignore_arguments", "read_only", "ignore_results")
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
        name = call.name
        if call_id is not None:
            seen = state.deliveries.get(call_id)
            if seen is not None and seen.tool == name and seen.key == self._key(call):
                return self._refusal(seen.tool, seen.number, seen.why) if seen.refused else None
        if name in self.exempt:
            return None
        if state.stop is not None:
            reason = state.stop.reason
            return Refusal(message=TURN_ENDED.format(reason=reason.value), reason=reason)
        limit = self.limits.get(name, self.max_calls)
        if limit is None:
            return None
        key = call_key(name, call.arguments, by_arguments=self.match != "tool", ignore=self.ignore_arguments)
        why = _REPEAT
        if self.count == "per_turn":
            count = self._count(state, key, restart=False)
        else:
            marks = state.marks
            mark = marks.get(key)
            if mark is None:
                count = self._count(state, key, restart=True)
                marks[key] = Mark(state.changes, None, None)
            else:
                restart = mark.changes != state.changes
                count = self._count(state, key, restart)
                if restart:
                    marks[key] = mark._replace(changes=state.changes)
                elif mark.ok is False:
                    why = _FAILURE
        refused = count > limit
        if refused:
            if limit == 0:
                why = _FORBIDDEN
        elif len(state.runs) >= 4:  # runs are kept with count="progress" and max_cycle_period set
            period = self._cycle(state.runs, key)
            if period is not None:
                refused, why, count = True, _CYCLE, period
        if call_id is not None:
            state.remember(call_id, Delivery(name, key, count, refused, False, why))
        if not refused:
            return None
        state.refusals += 1
        if state.refused_in != state.responses:
            state.refused_in = state.responses
            state.refused_responses += 1
        state.last_refused = name
        self._event(state, "refusal", StopReason.REPEATED_CALL, name, count, limit)
        return self._refusal(name, count, why)

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
        """After a tool ran: record whether it succeeded, and what it returned. Returns nothing.

        A success resets the errors in a row; a failure adds one and, with ``count_failures=False``,
        takes the call back out of its key's count. With ``count="progress"``, ``result`` (any value;
        only its digest is kept) tells progress apart: a result unlike the call's previous one restarts
        its count, and a successful call that may change state restarts every other call's count.

        An outcome delivered twice is recorded once: by ``delivery_id`` when the runtime delivers
        outcomes separately from their calls (a hook call per activity), else by the ``call_id`` its
        ``check_tool_call`` saw.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        if delivery_id is not None:
            if delivery_id in state.deliveries:
                return
            state.remember(delivery_id, _SEEN)
        key: str | None = None
        if call.call_id is not None:
            seen = state.deliveries.get(call.call_id)
            if seen is not None and seen.tool == call.name:
                if seen.settled or seen.refused:
                    return
                state.deliveries[call.call_id] = seen._replace(settled=True)
                key = seen.key
        name = call.name
        if ok:
            state.errors_in_a_row = 0
        else:
            state.errors_in_a_row += 1
            state.last_failed = name
        progress = self.count == "progress"
        if name in self.exempt:
            if progress and ok and not self._read_only(call):
                state.changes += 1  # not counted, but it may still change what other calls return
            return
        if not progress and (ok or self.count_failures):
            return
        if key is None:
            key = self._key(call)
        if not ok and not self.count_failures:
            self._uncount(state, key)
        if progress:
            self._progress(state, call, key, ok, result)

    def check_model_call(self, state: GuardState, turn_id: str | None = None) -> Stop | None:
        """Before a model call: ``None`` lets it happen; a ``Stop`` ends the turn with its final message.

        Rules, in order: refusals (``max_refusals``), errors in a row, model calls, seconds, cost. Once
        a turn has stopped, every later call returns the same ``Stop``. Each call let through starts a
        new model response, for counting refusals per response.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        if state.stop is not None:
            return state.stop
        tripped = self._tripped(state)
        if tripped is None:
            state.responses += 1
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

        A ``delivery_id`` seen before is not counted again. Negative or NaN figures count as 0; infinite
        ones, and totals past the largest float, count as the largest float (any budget trips), so the
        state stays finite and serializable.
        """
        if turn_id is not None and turn_id != state.turn_id:
            state.reset_turn(turn_id)
        if delivery_id is not None:
            if delivery_id in state.deliveries:
                return
            state.remember(delivery_id, _SEEN)
        state.model_calls += 1
        state.model_seconds = min(state.model_seconds + _amount(seconds, "seconds"), _LARGEST)
        state.cost_usd = min(state.cost_usd + _amount(cost_usd, "cost_usd"), _LARGEST)

    # -- helpers ---------------------------------------------------------------------------------

    def _key(self, call: ToolCall) -> str:
        return call_key(
            call.name, call.arguments, by_arguments=self.match == "tool_and_arguments", ignore=self.ignore_arguments
        )

    def _read_only(self, call: ToolCall) -> bool:
        return call.read_only if call.read_only is not None else call.name in self.read_only

    def _count(self, state: GuardState, key: str, restart: bool) -> int:
        """Count a call of ``key`` (from 1 again if ``restart``), keeping the window and ``max_keys``."""
        counts = state.counts
        previous = counts.pop(key, 0)
        window = self.window
        if window is not None:
            recent = state.recent
            if restart and previous:
                recent[:] = [k for k in recent if k != key]  # its earlier calls no longer count
            while len(recent) >= window:  # the window is the last ``window`` calls, this one included
                oldest = recent.pop(0)
                if oldest == key:
                    previous -= 1
                else:
                    self._decrement(counts, oldest)
            recent.append(key)
        count = 1 if restart else max(previous, 0) + 1
        counts[key] = count  # re-inserted: the most recently used key is last
        if len(counts) > self.max_keys:
            oldest = next(iter(counts))
            del counts[oldest]
            state.marks.pop(oldest, None)
            if window is not None:
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

    def _progress(self, state: GuardState, call: ToolCall, key: str, ok: bool, result: Any) -> None:
        """``count="progress"``: record a run's outcome; a new result restarts its count, a change the others'."""
        outcome = outcome_digest(ok, result, self.ignore_results)
        mark = state.marks.get(key)
        changes = state.changes if mark is None else mark.changes
        new = mark is not None and mark.outcome is not None and (mark.outcome != outcome or outcome == UNKNOWN_OUTCOME)
        if new and key in state.counts:
            state.counts[key] = 1  # it returned something new: progress, so its count restarts
            if self.window is not None:
                recent = state.recent
                recent[:] = [k for k in recent if k != key]
                recent.append(key)
        if ok and not self._read_only(call):
            if changes == state.changes:
                changes += 1  # its own change does not restart its own count
            state.changes += 1
        if key in state.counts:
            state.marks[key] = Mark(changes, outcome, ok)
        if self.max_cycle_period is not None:
            runs = state.runs
            runs.append(key + outcome)
            if len(runs) > 2 * self.max_cycle_period:
                del runs[0]

    def _cycle(self, runs: list[str], key: str) -> int | None:
        """The period of a cycle that ``key`` would start a third pass of, or ``None``."""
        assert self.max_cycle_period is not None
        size = len(runs)
        for period in range(2, self.max_cycle_period + 1):
            start = size - period
            if start < period:
                return None
            if not runs[start].startswith(key):
                continue
            last = runs[start:]
            if (
                last == runs[start - period : start]
                and any(not run.startswith(key) for run in last)
                and not any(run.endswith(UNKNOWN_OUTCOME) for run in last)
            ):
                return period
        return None

    def _tripped(self, state: GuardState) -> tuple[StopReason, str | None, float, float] | None:
        if self.max_refusals is not None and state.refused_responses >= max(1, self.max_refusals):
            reason = StopReason.REPEATED_CALL if self.max_refusals == 0 else StopReason.IGNORED_REFUSALS
            return reason, state.last_refused, state.refused_responses, self.max_refusals
        if self.max_errors_in_a_row is not None and state.errors_in_a_row >= self.max_errors_in_a_row:
            return StopReason.TOO_MANY_ERRORS, state.last_failed, state.errors_in_a_row, self.max_errors_in_a_row
        if self.max_model_calls is not None and state.model_calls >= self.max_model_calls:
            return StopReason.MAX_STEPS, None, state.model_calls, self.max_model_calls
        if self.max_model_seconds is not None and state.model_seconds > self.max_model_seconds:
            return StopReason.TIME, None, state.model_seconds, self.max_model_seconds
        if self.max_cost_usd is not None and state.cost_usd > self.max_cost_usd:
            return StopReason.COST, None, state.cost_usd, self.max_cost_usd
        return None

    def _refusal(self, tool: str, count: int, why: str) -> Refusal:
        limit = self.limits.get(tool, self.max_calls)
        if self.refusal_message is not None:
            template = self.refusal_message
        elif why == _CYCLE:
            template = REFUSE_CYCLE
        elif why == _FORBIDDEN:
            template = REFUSE_FORBIDDEN
        elif why == _FAILURE:
            template = REFUSE_SAME_FAILURE
        else:
            template = _REFUSALS[self.count, self.match]
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


_LARGEST = sys.float_info.max


def _amount(value: Any, name: str) -> float:
    try:
        amount = float(value)
    except (TypeError, ValueError):
        amount = math.nan
    if math.isnan(amount) or amount < 0:
        logger.warning("repeat_hooks: post_llm_call got %s=%r; counted as 0", name, value)
        return 0.0
    return min(amount, _LARGEST)
