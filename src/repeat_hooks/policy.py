"""The policy: the guard's settings, and the pure rules that turn a state and an event into a decision.

``Policy`` holds no counters. Its verbs take the session's ``GuardState`` and change it in place, so an
adapter can keep the state wherever its runtime needs it (on the hook, in the SDK's context, in a
``StateStore``) and call the same rules. No I/O, no clock, no randomness: a replay decides the same.

The verbs say what they do. ``decide_*`` decides *and counts* (call it once per event; a delivery id
makes a second delivery harmless) and returns the decision; ``record_*`` records what happened; ``start_turn``
starts a turn. They tell nobody: on a state that is listening (``GuardState.listen``) each fresh decision or
record leaves an observation, which whoever commits the state hands to the observers (``repeat_hooks.observe``).
``hook_points`` and ``feeds`` are pure: what an adapter must call and provide for these settings. The counting
itself lives in ``counting``.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import math
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, SecretBytes, field_serializer, field_validator, model_validator

if TYPE_CHECKING:
    from typing_extensions import Self

from . import counting
from .call import MAX_NAME_CHARS, ToolCall, as_text, batch_call_ids, blake2b_of, call_key, digest_secret, json_text
from .decision import GuardEvent, Refusal, RefusalKind, Stop, StopReason
from .errors import GuardSetupError
from .messages import REFUSAL_MESSAGES, REPEAT_MESSAGES, STOP_MESSAGES, TURN_ENDED, WARNING, check_template, render
from .observation import ModelCallDecided, ModelCallRecorded, ToolCallDecided, ToolResultRecorded, TurnStarted, Where
from .result import outcome_digest
from .state import MAX_KEYS, MAX_RUNS, SEEN, Delivery, GuardState, Turn, WholeModel
from .stop_rules import STOP_RULES, Feed, HookPoint, StopRule

logger = logging.getLogger("repeat_hooks")
if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
    logger.addHandler(logging.NullHandler())  # a library's: silent until the application configures logging

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
    destructive: frozenset[str] = frozenset()
    """Tools that act on the world so that a repeat does it twice (``{"place_order"}``; MCP's explicit
    ``destructiveHint: true`` with ``idempotentHint: false`` says the same): once such a call succeeded, the
    same call is refused until another call changes something, whatever it returned."""
    max_cycle_period: Annotated[int, Field(ge=2, le=MAX_RUNS // 2)] | None = 8
    """With ``count="progress"``: the longest cycle (A-B-A-B, A-B-C-A-B-C, ...) refused at the start of its
    third pass once its second pass repeated the first (same calls, same results); ``None`` switches it off."""
    ignore_results: frozenset[str] = frozenset()
    """Result fields left out when comparing results, at any depth (``{"checked_at", "order_id"}``): a result
    that differs only there is the same result, so a call returning a new timestamp or a new order id each
    time is still a repeat."""
    mask_volatile: bool = True
    """Mask the tokens that change on every call without meaning anything changed (UUIDs, runs of 16+ hex
    digits, ISO date-times with a time of day, the answer's own epoch time, the call's stated duration, a default
    repr's address, a temporary file's random name: ``result.mask_volatile_tokens``) before comparing results;
    ``False`` compares them too."""
    warn: bool = False
    """Warn before refusing: the last run a repeat rule lets through has a note after its result, when the same
    call made next, with nothing changed, would be refused (``Policy.warning``; the hook's ``post_tool_call``
    returns it). It changes no decision: the same calls run and are refused as without it."""
    max_opaque_runs: Annotated[int, Field(ge=1)] | None = 5
    """With ``count="progress"``: runs allowed per turn of a call whose result could not be compared (an
    object with no stable form counts as new every time); the next is refused. ``None``: no cap."""
    match: Literal["tool_and_arguments", "tool"] = "tool_and_arguments"
    """What makes two calls the same: the tool and its canonical arguments (default), or the tool alone."""
    max_calls: NonNegative | None = 2
    """Same calls allowed per turn; the next one is refused (checked in ``decide_tool_call``)."""
    limits: dict[str, NonNegative] = Field(default_factory=dict)
    """Per-tool overrides of ``max_calls``, by tool name (``{"place_order": 1}``)."""
    exempt: frozenset[str] = frozenset()
    """Tools never counted nor refused (``{"wait_for_job"}``)."""
    window: Annotated[int, Field(ge=1, le=MAX_KEYS)] | None = None
    """Count only within the last ``window`` counted calls of the turn (a sliding window)."""
    ignore_arguments: frozenset[str] = frozenset()
    """Argument fields left out of the key, at any depth (``{"request_id"}``)."""
    count_failures: bool = True
    """``False``: a call that failed is not counted, so only repeats of successes are refused."""
    max_errors_in_a_row: Annotated[int, Field(ge=1)] | None = None
    """Failed calls in a row that end the turn with ``too_many_errors``; a success resets the count."""
    max_refusals: NonNegative | None = 3
    """Model responses with a refused call that end the turn with ``ignored_refusals`` at the next model
    call; ``0`` ends it at the first refusal, with ``repeated_call``."""
    max_same_answers: Annotated[int, Field(ge=2)] | None = None
    """The same text answer from the model this many times in a row in a turn, nothing else happening between
    (no tool call: a loop around the agent re-prompting it, OpenHands' "monologue"), ends the turn with
    ``repeated_answer`` at the next model call. Needs the adapter to feed each answer
    (``post_llm_call(answer=...)``); volatile tokens are masked as in results. ``None`` (the default): off."""
    max_model_calls: Annotated[int, Field(ge=1)] | None = None
    """Model calls (recorded by ``record_model_call``) after which the turn ends with ``max_steps``."""
    max_model_seconds: Annotated[float, Field(gt=0)] | None = None
    """Recorded model seconds; going over ends the turn with ``time``."""
    max_cost_usd: Annotated[float, Field(gt=0)] | None = None
    """Recorded cost in US dollars; going over ends the turn with ``cost``."""
    refusal_message: str | None = None
    """The text the model gets for a refused call (``{tool}``, ``{count}``, ``{limit}``); ``None``: the
    default for the rule that refused it."""
    stop_messages: dict[StopReason, str] = Field(default_factory=dict)
    """Final texts by stop reason, over the defaults (same placeholders)."""
    max_keys: Annotated[int, Field(ge=1, le=MAX_KEYS)] = 1024
    """Distinct call keys kept per turn; past it the least recently used is forgotten."""
    digest_key: SecretBytes | None = Field(default=None, exclude=True, repr=False)
    """A secret (at least 16 bytes: ``secrets.token_bytes(32)``, or text) that makes every digest the state
    keeps a keyed BLAKE2b: whoever reads the state (a Redis, a session table) cannot test guesses of an
    argument or a result against it. Never serialized: give every process the same key (the state keeps a
    4-byte fingerprint of it, and a state written under another key, or none, is refused loudly)."""

    _secret: bytes = PrivateAttr(b"")
    _secret_id: str | None = PrivateAttr(None)
    _plain: bool = PrivateAttr(False)
    """Calls are told apart by all their arguments (``match``, no ``ignore_arguments``): ``_key``'s fast path."""
    _rules: tuple[tuple[StopRule, float], ...] = PrivateAttr(())
    """The stop rules switched on, with their limits, in ``STOP_RULES``'s order (read before every model call)."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, a policy validated afresh (pydantic's ``model_copy`` skips validation, so a
        clash, a misspelt setting or a short key would pass, and a new ``digest_key`` would not be used)."""
        if not update:
            return super().model_copy(deep=deep)
        settings = {name: getattr(self, name) for name in self.model_fields_set}
        return self.model_validate({**settings, **update})

    def model_post_init(self, context: Any, /) -> None:
        """Derive the digest key and its fingerprint, and the stop rules switched on (pydantic calls this after
        validation)."""
        super().model_post_init(context)
        self._rules = tuple(
            (rule, getattr(self, rule.setting)) for rule in STOP_RULES if getattr(self, rule.setting) is not None
        )
        self._plain = self.match == "tool_and_arguments" and not self.ignore_arguments
        if self.digest_key is not None:
            secret = self.digest_key.get_secret_value()
            self._secret = digest_secret(secret)
            self._secret_id = hashlib.blake2b(b"", key=self._secret, digest_size=4, person=b"rh-key-id").hexdigest()

    @field_validator("digest_key")
    @classmethod
    def _check_digest_key(cls, value: SecretBytes | None) -> SecretBytes | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 bytes (secrets.token_bytes(32)): a short key can be guessed")
        return value

    @model_validator(mode="before")
    @classmethod
    def _name_the_setting(cls, data: Any) -> Any:
        """A misspelt setting: name the closest real one (``max_cals`` -> ``max_calls``)."""
        if isinstance(data, dict):
            for name in data:
                if name not in cls.model_fields:
                    close = difflib.get_close_matches(str(name), list(cls.model_fields), n=1)
                    hint = f"; did you mean {close[0]}?" if close else ""
                    raise ValueError(f"{name} is not a setting{hint} (the settings are Policy's fields)")
        return data

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
        both = sorted(self.read_only & self.destructive)
        if both:
            raise ValueError(f"{', '.join(both)} is both in read_only and in destructive: keep it in one of the two")
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

    @field_serializer("exempt", "ignore_arguments", "read_only", "ignore_results", "destructive")
    def _sorted(self, value: frozenset[str]) -> list[str]:
        return sorted(value)

    # -- what an adapter must provide (pure) --------------------------------------------------------

    def feeds(self) -> frozenset[Feed]:
        """The figures the adapter must hand the guard for these settings to work (see ``Feed``)."""
        needed = {rule.feed for rule in STOP_RULES if rule.feed is not None and getattr(self, rule.setting) is not None}
        if self.count == "progress" or not self.count_failures:
            needed.add(Feed.OUTCOMES)
        if self.warn:
            needed.add(Feed.WARNINGS)
        return frozenset(needed)

    def hook_points(self) -> frozenset[HookPoint]:
        """The hook points an adapter must call for these settings; the others may be left unregistered.

        ``PRE_AGENT_TURN`` is always in it, but an adapter whose every hook call carries the turn's id may
        leave it unbound: each verb given a new ``turn_id`` starts that turn itself.
        """
        points = {HookPoint.PRE_AGENT_TURN, HookPoint.PRE_TOOL_CALL}
        feeds = self.feeds()
        if feeds & {Feed.OUTCOMES, Feed.WARNINGS}:  # a warning is handed over with the result, after the call
            points.add(HookPoint.POST_TOOL_CALL)
        if any(getattr(self, rule.setting) is not None for rule in STOP_RULES):
            points.add(HookPoint.PRE_LLM_CALL)
        if feeds & {Feed.MODEL_CALLS, Feed.SECONDS, Feed.COST, Feed.ANSWERS}:
            points.add(HookPoint.POST_LLM_CALL)
        return frozenset(points)

    def warning(self, state: GuardState, call: ToolCall) -> str | None:
        """With ``warn=True``, the note to hand the model after ``call``'s result when the same call made next,
        with nothing changed in between, would be refused (its count is at its limit, a write succeeded, or
        its runs without a stable result are at their cap); else ``None``. Pure: it reads the state and changes
        nothing, so it decides nothing either.

        Ask after the call's outcome is recorded (``record_tool_result``), or, where the SDK hands the result to
        the model before the adapter records it, after its decision: the count then still holds the call, and a
        result unlike the last one (which restarts the count) cannot be known yet.
        """
        if not self.warn:
            return None
        turn = state.turn
        name = call.name
        limit = self.limits.get(name, self.max_calls)
        if name in self.exempt or turn.stop is not None or not limit:
            return None
        key = self._key(call)
        number = turn.counts.get(key)
        if number is None or number > limit:
            return None
        if self.count == "progress":
            mark = turn.marks.get(key)
            if mark is None or mark.changes != turn.changes:
                return None  # something that may change its result ran since: its count restarts
            refused = (
                (self.max_opaque_runs is not None and mark.opaque >= self.max_opaque_runs)
                or (mark.ok is not False and counting.writes_once(self, call))
                or counting.next_number(self, turn, key) > limit
            )
        else:
            refused = counting.next_number(self, turn, key) > limit
        return render(WARNING, name, number, limit) if refused else None

    # -- the verbs ----------------------------------------------------------------------------------

    def start_turn(self, state: GuardState, *, turn_id: str | None = None) -> None:
        """A user message starts a turn: fresh per-turn counters, unless ``turn_id`` is already the current turn.

        ``None`` always starts a new turn. Returns nothing.
        """
        if turn_id is None:
            state.start(None)
            _told(state, TurnStarted, state.turn)
        else:
            _turn_of(state, turn_id)

    def decide_tool_calls(
        self, state: GuardState, calls: Sequence[ToolCall], *, turn_id: str | None = None
    ) -> list[Refusal | None]:
        """One model response's calls, decided as one batch before any of them runs; one decision per call.

        No result of the batch can restart another's count, however the SDK then runs them. A later
        ``decide_tool_call`` of one of these calls (in the same response) returns its decision and counts nothing:
        it is found by its ``call_id``, or, for calls without one or sharing one, by its tool and arguments, each
        batch decision taken once, in order.
        """
        turn = self._turn(state, turn_id)
        turn.batch = -1  # decided afresh, not looked up in an earlier batch of this response
        decisions = []
        for index, (call, ident) in enumerate(zip(calls, batch_call_ids(calls), strict=True)):
            decided = call if ident and call.call_id == ident else replace(call, call_id=ident or f"#{index}")
            decisions.append(self._decide_call(state, turn, decided, call))
        turn.batch = turn.responses
        return decisions

    def decide_tool_call(self, state: GuardState, call: ToolCall, *, turn_id: str | None = None) -> Refusal | None:
        """Before a tool runs: decide and count the call; ``None`` lets it run, a ``Refusal`` replaces its result.

        A ``call_id`` already decided in this model response (a second delivery, or a call decided with its
        batch by ``decide_tool_calls``) returns the first decision without counting again. A ``turn_id``
        other than the current one starts that turn first.
        """
        turn = self._turn(state, turn_id)
        if turn.batch == turn.responses:  # this response's calls were decided as a batch: find this one's
            found = self._from_batch(state, turn, call)
            if found is not None:
                return found[0]
        return self._decide_call(state, turn, call, call)

    def record_tool_result(
        self,
        state: GuardState,
        call: ToolCall,
        *,
        ok: bool = True,
        result: Any = None,
        turn_id: str | None = None,
        delivery_id: str | None = None,
    ) -> None:
        """After a tool ran: record whether it succeeded, and what it returned. Returns nothing.

        A success resets the errors in a row; a failure adds one and, with ``count_failures=False``,
        takes the call back out of its key's count. With ``count="progress"``, ``result`` (what the model
        reads; only its digest is kept) tells progress apart: a result unlike the call's previous one
        restarts its count, and a successful call that may change state restarts every other call's count.

        An outcome delivered twice is recorded once: by ``delivery_id`` when the runtime delivers outcomes
        separately from their calls (a hook call per activity), else by the ``call_id`` its decision saw.
        """
        turn = self._turn(state, turn_id)
        if delivery_id is not None and _seen_before(state, delivery_id):
            return
        ok = _as_ok(ok)
        found = _settle(state, turn, call)
        if found is False:
            return
        self._record(turn, call, ok, result, found)
        _told(state, ToolResultRecorded, turn, call, ok, result)

    def record_rejection(self, state: GuardState, call: ToolCall, *, turn_id: str | None = None) -> None:
        """A call decided to run did not run after all (a human or another guardrail rejected it): it waits for
        no outcome, and counts as a call that was rejected. Returns nothing.

        The rejection still counts toward the call's repeats, so a model that keeps asking for the same
        rejected call is not put to a human without end: with ``count="progress"``, the same call rejected
        ``max_calls`` times with nothing changed since is refused (``RefusalKind.REJECTED``) without running or
        being asked about; something that changes state in between starts its count again, as for any call.
        A rejection is not a failure (``max_errors_in_a_row`` does not see it).

        Found by its ``call_id`` in this response (as its decision saw it); without an id, the call's key is
        marked. A refused call, or one whose outcome was recorded, is left as it is.
        """
        turn = self._turn(state, turn_id)
        found = _settle(state, turn, call)
        if found is False or call.name in self.exempt or self.count != "progress":
            return  # per turn: a rejected call counts as the call it was
        counting.record_rejected(turn, found if found is not None else self._key(call))

    def withdraw_tool_call(self, state: GuardState, call: ToolCall, *, turn_id: str | None = None) -> None:
        """Deprecated: ``record_rejection``."""
        warnings.warn("Policy.withdraw_tool_call is deprecated: use Policy.record_rejection", DeprecationWarning, 2)
        self.record_rejection(state, call, turn_id=turn_id)

    def key_of(self, call: ToolCall) -> str:
        """The digest this policy counts ``call`` under (its ``match`` and ``ignore_arguments`` applied, keyed with its
        ``digest_key``): two calls it counts as one have the same key. For an adapter that must find a call again in
        what it keeps beside the SDK (never its arguments)."""
        return self._key(call)

    def decided(self, state: GuardState, call: ToolCall, *, turn_id: str | None = None) -> bool:
        """Whether ``call``'s id was decided in the current model response (a later delivery of it would get that
        decision, counted once): ``False`` for a call without an id."""
        turn = state.turn if turn_id is None or turn_id == state.turn.id else None
        scoped = None if turn is None else _scoped(turn, call.call_id)
        return scoped is not None and scoped in state.deliveries

    def decide_model_call(self, state: GuardState, *, turn_id: str | None = None) -> Stop | None:
        """Before a model call: ``None`` lets it happen; a ``Stop`` ends the turn with its final message.

        The rules of ``STOP_RULES``, in order: refusals, errors in a row, same answers, model calls, seconds,
        cost. Once a turn has stopped, every later call returns the same ``Stop``. Each call let through starts a
        new model response (for counting refusals per response, and for scoping call ids).
        """
        turn = self._turn(state, turn_id)
        if turn.stop is not None:
            return turn.stop
        for rule, limit in self.__pydantic_private__["_rules"]:  # type: ignore[index]  # as in _turn
            value = getattr(turn, rule.counter)
            reason = rule.reason
            if reason is StopReason.IGNORED_REFUSALS:
                tripped = value >= max(1, limit)
                if limit == 0:
                    reason = StopReason.REPEATED_CALL
            else:
                tripped = value > limit if rule.over else value >= limit
            if tripped:
                tool = getattr(turn, rule.tool) if rule.tool is not None else None
                template = self.stop_messages.get(reason, STOP_MESSAGES[reason])
                stop = Stop(message=render(template, tool, value, limit), reason=reason)
                turn.stop = stop
                event = self._event(state, "stop", reason, tool, value, limit, message=stop.message)
                _told(state, ModelCallDecided, turn, stop, event)
                return stop
        state.next_response()
        _told(state, ModelCallDecided, turn, None, None)
        return None

    def record_model_call(
        self,
        state: GuardState,
        *,
        seconds: float = 0.0,
        cost_usd: float = 0.0,
        answer: str | None = None,
        turn_id: str | None = None,
        delivery_id: str | None = None,
    ) -> None:
        """After a model call: count it, with its recorded latency and cost (never a clock). Returns nothing.

        ``answer``: the model's text, when the response called no tool (``None``: it called tools, or the adapter
        cannot tell); with ``max_same_answers`` set, the same answer in consecutive responses counts toward it
        (only its digest is kept).

        A ``delivery_id`` seen before is not counted again. Negative or NaN figures count as 0; infinite
        ones, and totals past the largest float, count as the largest float (any budget trips), so the
        state stays finite and serializable.
        """
        turn = self._turn(state, turn_id)
        if delivery_id is not None and _seen_before(state, delivery_id):
            return
        turn.model_calls += 1
        seconds, cost_usd = _as_figure(seconds, "seconds"), _as_figure(cost_usd, "cost_usd")
        turn.model_seconds = min(turn.model_seconds + seconds, _LARGEST)
        turn.cost_usd = min(turn.cost_usd + cost_usd, _LARGEST)
        if answer is not None and self.max_same_answers is not None and turn.answered_in != turn.responses:
            self._answered(turn, answer)
        _told(state, ModelCallRecorded, turn, seconds, cost_usd)

    # -- how a call is decided ----------------------------------------------------------------------

    def _decide_call(self, state: GuardState, turn: Turn, call: ToolCall, given: ToolCall) -> Refusal | None:
        """``call`` (``given``, as the model gave it, for the observers) not found in this response's batch: its
        first decision if its id was decided in this response, else decided and counted now."""
        call_id = call.call_id
        scoped = f"{call_id}@{turn.number}.{turn.responses}" if call_id else None  # _scoped, written out
        if scoped is not None and scoped in state.deliveries:
            seen = state.deliveries[scoped]
            if seen.tool == call.name and not seen.settled and seen.key == self._key(call):
                return self._refusal(seen.tool, seen.number, RefusalKind(seen.why)) if seen.refused else None
        refusal, event, key = self._decide(state, turn, call, scoped)
        if state.news is not None:
            calls = max(turn.model_calls, 1)  # no model call yet: both figures are 0
            seconds, cost = turn.model_seconds / calls, turn.cost_usd / calls
            stopped = None if turn.stop is None else turn.stop.reason
            key = self._key(call) if key is None else key
            decided = ToolCallDecided(_position(turn), given, key, refusal, event, seconds, cost, stopped)
            state.news.append(decided)
        return refusal

    def _decide(
        self, state: GuardState, turn: Turn, call: ToolCall, scoped: str | None
    ) -> tuple[Refusal | None, GuardEvent | None, str | None]:
        """A call not decided before in this response: decide and count it; the refusal's event, if any, and the
        call's key where it was computed (``None`` for a call not counted)."""
        name = call.name
        if name in self.exempt:
            return None, None, None
        if turn.stop is not None:
            message = TURN_ENDED.format(reason=turn.stop.reason.value)
            return Refusal(message=message, reason=RefusalKind.TURN_ENDED), None, None
        limit = self.limits.get(name, self.max_calls)
        if limit is None:
            return None, None, None
        key = self._key(call)
        if self.count == "per_turn":
            number = counting.count(self, turn, key, restart=False)
            refused, kind = number > limit, RefusalKind.REPEAT
        else:
            refused, kind, number = counting.count_progress(self, turn, call, key, limit)
        if refused:
            if limit == 0:
                kind = RefusalKind.FORBIDDEN
        elif len(turn.runs) >= 4 and self.max_cycle_period is not None:  # runs are kept with count="progress"
            period = counting.cycle_period(turn.runs, key, self.max_cycle_period)
            if period is not None:
                refused, kind, number = True, RefusalKind.CYCLE, period
                counting.continue_cycle(self, turn, period)
        if scoped is not None:
            why = kind.value if refused else ""
            state.remember_decision(scoped, name, key, number, refused, why)
        if not refused:
            return None, None, key
        turn.refusals += 1
        if turn.refused_in != turn.responses:
            turn.refused_in = turn.responses
            turn.refused_responses += 1
        turn.last_refused = name
        return self._refusal(name, number, kind), self._event(state, "refusal", kind, name, number, limit), key

    def _from_batch(self, state: GuardState, turn: Turn, call: ToolCall) -> tuple[Refusal | None] | None:
        """This call's decision from the batch of this response: ``(decision,)``, or ``None`` if the batch did
        not hold it. A call with a unique id is found by it; one without an id, or sharing it, takes the first
        batch decision of the same call not taken yet (all taken: a second delivery, the first decision)."""
        scope = f"@{turn.number}.{turn.responses}"
        ident = call.call_id or ""
        key = self._key(call)
        first: Delivery | None = None
        for stored in state.deliveries:  # by id first: only the few deliveries of this id are read
            head = stored[: -len(scope)]
            if not stored.endswith(scope) or (head != ident and not head.startswith(f"{ident}#")):
                continue
            seen = state.deliveries[stored]
            if seen.key != key or seen.tool != call.name:
                continue
            if first is None:
                first = seen
            if not seen.taken:
                state.deliveries[stored] = Delivery(*seen[:6], taken=True)  # _replace costs a microsecond more
                first = seen
                break
        if first is None:
            return None
        return (self._refusal(first.tool, first.number, RefusalKind(first.why)) if first.refused else None,)

    def _record(self, turn: Turn, call: ToolCall, ok: bool, result: Any, key: str | None) -> None:
        """An outcome not recorded before: errors in a row, and with ``count="progress"`` the call's progress."""
        name = call.name
        if ok:
            turn.errors_in_a_row = 0
        else:
            turn.errors_in_a_row += 1
            turn.last_failed = name
        progress = self.count == "progress"
        if name in self.exempt:
            if progress and ok and not counting.is_read_only(self, call):
                turn.changes += 1  # not counted, but it may still change what other calls return
            return
        if not progress and (ok or self.count_failures):
            return
        if key is None:
            key = self._key(call)
        if not ok and not self.count_failures:
            counting.uncount(self, turn, key)
        if progress:
            secret = self.__pydantic_private__["_secret"]  # type: ignore[index]  # as in _turn
            counting.record_progress(self, turn, call, key, ok, result, secret)

    def _answered(self, turn: Turn, answer: Any) -> None:
        """The model answered ``answer`` in this response: the same answer as in the response before counts one
        more in a row (no tool call can have come between), anything else starts again at 1."""
        text = answer.strip() if type(answer) is str else as_text(answer)
        secret = self.__pydantic_private__["_secret"]  # type: ignore[index]  # as in _turn
        digest = outcome_digest(True, text, key=secret)
        if digest == turn.answer and turn.answered_in == turn.responses - 1:
            turn.same_answers += 1
        else:
            turn.answer, turn.same_answers = digest, 1
        turn.answered_in = turn.responses

    def _turn(self, state: GuardState, turn_id: str | None) -> Turn:
        """What every verb starts with: ``state`` checked against this policy's digest key (``_check_key``), and
        the turn the call falls in (``_turn_of``); the usual case (the key checked already, no turn id) costs
        two reads."""
        # The private attributes are read from pydantic's dict: its __getattr__ costs a microsecond a read.
        if state.key_id != self.__pydantic_private__["_secret_id"]:  # type: ignore[index]
            self._check_key(state)
        return state.turn if turn_id is None else _turn_of(state, turn_id)

    def _check_key(self, state: GuardState) -> None:
        """A state first met under this policy's ``digest_key``: take it if it holds no digests yet, else refuse
        it loudly (its digests were made under another key, or none, and would never match again). Called by
        ``_turn`` when the state's key is not this policy's."""
        turn = state.turn
        if turn.counts or turn.marks or turn.runs or any(delivery.key for delivery in state.deliveries.values()):
            have = "no digest_key" if state.key_id is None else "another digest_key"
            want = "no digest_key" if self._secret_id is None else "this digest_key"
            raise GuardSetupError(
                f"this conversation's state was written under {have}, and this policy has {want}: give every "
                "process that serves it the same Policy(digest_key=...) (a new key starts conversations afresh: "
                "delete their stored states)"
            )
        state.key_id = self._secret_id

    def _key(self, call: ToolCall) -> str:
        private = self.__pydantic_private__  # as in _turn
        arguments = call.arguments
        if type(arguments) is dict and private["_plain"]:  # type: ignore[index]
            # What adapters hand over: ``call_key``'s own steps for a dict with a JSON form, written out (a call's key
            # is on the path of every decision and outcome); anything else takes ``call_key``'s general path.
            try:
                text = json_text(arguments)
            except Exception:  # no JSON form: call_key's canonical form below
                pass
            else:
                hasher = blake2b_of(private["_secret"], 16).copy()  # type: ignore[index]
                hasher.update(f"{call.name}\x00{text}".encode("utf-8", "surrogatepass"))
                return hasher.hexdigest()
        by_arguments = self.match == "tool_and_arguments"
        return call_key(
            call.name,
            call.arguments,
            by_arguments=by_arguments,
            ignore=self.ignore_arguments,
            key=self.__pydantic_private__["_secret"],  # type: ignore[index]  # as in _turn
        )

    def _refusal(self, tool: str, number: int, kind: RefusalKind) -> Refusal:
        limit = self.limits.get(tool, self.max_calls)
        if self.refusal_message is not None:
            template = self.refusal_message
        elif kind is RefusalKind.REPEAT:
            template = REPEAT_MESSAGES[self.count, self.match]
        else:
            template = REFUSAL_MESSAGES[kind]
        if kind is RefusalKind.OPAQUE:
            limit = self.max_opaque_runs
        return Refusal(message=render(template, tool, number, limit), reason=kind)

    def _event(
        self,
        state: GuardState,
        kind: Literal["refusal", "stop"],
        reason: RefusalKind | StopReason,
        tool: str | None,
        number: float,
        limit: float,
        *,
        message: str | None = None,
    ) -> GuardEvent:
        turn = state.turn
        event = GuardEvent(
            kind=kind,
            reason=reason,
            tool=tool,
            count=float(number),
            limit=float(limit),
            turn_id=turn.id,
            turn=turn.number,
            message=message,
        )
        state.record(event)
        log = logger.info if kind == "refusal" else logger.warning
        log(
            "repeat_hooks %s: %s tool=%s count=%s limit=%s turn=%s",
            kind,
            reason.value,
            tool,
            number,
            limit,
            turn.id if turn.id is not None else turn.number,
        )
        return event


def _turn_of(state: GuardState, turn_id: Any) -> Turn:
    """The one turn-change path: a ``turn_id`` (as text) other than the current turn's starts that turn."""
    turn = state.turn
    if turn_id is not None:
        if type(turn_id) is not str or not turn_id.isascii() or len(turn_id) > MAX_NAME_CHARS:
            turn_id = as_text(turn_id)
        if turn_id != turn.id:
            state.start(turn_id)
            turn = state.turn
            _told(state, TurnStarted, turn)
    return turn


def _told(state: GuardState, kind: Callable[..., Any], turn: Turn, *fields: Any) -> None:
    """Leave the observation ``kind(<where in turn>, *fields)`` on a listening state for whoever commits it; when
    it is not listening, nothing (not even the observation is made: most states are not)."""
    news = state.news
    if news is not None:
        news.append(kind(_position(turn), *fields))


def _position(turn: Turn) -> Where:
    return Where(turn.id, turn.number, turn.responses)


def _settle(state: GuardState, turn: Turn, call: ToolCall) -> str | Literal[False] | None:
    """Settle the delivery of ``call``'s decision in this response: its key if found (``False`` if it was refused
    or settled already: nothing more to record), ``None`` if its decision is not known by id."""
    scoped = _scoped(turn, call.call_id)
    return None if scoped is None else state.deliveries.settle(scoped, call.name)


def _as_ok(ok: Any) -> bool:
    """An outcome's ``ok`` as a bool, whatever the adapter passed (a hostile ``__bool__`` counts as a failure)."""
    if ok is True or ok is False:
        return ok
    try:
        return bool(ok)
    except Exception:
        return False


def _scoped(turn: Turn, call_id: str | None) -> str | None:
    """The one de-duplication key of a call: its id within this turn and model response (SDKs reuse
    ids such as ``call_0`` from one response to the next); ``None`` for no id or an empty one."""
    if not call_id:
        return None
    return f"{call_id}@{turn.number}.{turn.responses}"


def _seen_before(state: GuardState, delivery_id: Any) -> bool:
    """The one de-duplication path for outcomes and model calls: ``True`` if ``delivery_id`` was seen."""
    if type(delivery_id) is not str or not delivery_id.isascii() or len(delivery_id) > MAX_NAME_CHARS:
        delivery_id = as_text(delivery_id)
    if delivery_id in state.deliveries:
        return True
    state.remember(delivery_id, SEEN)
    return False


_LARGEST = sys.float_info.max


def _kind(value: Any) -> str:
    """What a bad figure was, for a log line: its type, and for a float its value (never any other value)."""
    return f"float {value}" if type(value) is float else type(value).__name__


def _as_figure(value: Any, name: str) -> float:
    """A recorded figure as a float >= 0 (see ``record_model_call``); a bad one is logged and counts as 0."""
    if type(value) is float and 0.0 <= value <= _LARGEST:  # what SDKs report: taken as it is (NaN fails both)
        return value
    try:
        amount = float(value)
    except OverflowError:  # an int past the largest float: any budget trips
        return _LARGEST
    except Exception:  # not a number, or a hostile __float__
        amount = math.nan
    if math.isnan(amount) or amount < 0:
        logger.warning(
            "repeat_hooks: post_llm_call got a %s for %s, not a figure >= 0: counted as 0", _kind(value), name
        )
        return 0.0
    return min(amount, _LARGEST)
