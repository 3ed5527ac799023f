"""OpenTelemetry for the guard: each refusal and stop as a span event, and counters of what it decided and saved.

Install the extra (``pip install 'repeat-hooks[otel]'``: ``opentelemetry-api`` only) and instrument once per
process, as with any OpenTelemetry instrumentation::

    from repeat_hooks.observe.otel import RepeatHooksInstrumentor

    RepeatHooksInstrumentor().instrument()  # the global providers; or tracer_provider=..., meter_provider=...
    ...
    RepeatHooksInstrumentor().uninstrument()

``RepeatHooksInstrumentor`` is one instance per process, like ``BaseInstrumentor``'s: instrumenting again while
instrumented, or uninstrumenting while not, logs a warning and changes nothing. Without the extra, or without
``instrument()``, nothing of this module or of OpenTelemetry is imported and the guard's hooks pay one
truthiness check (``repeat_hooks.observe``). It is not an ``opentelemetry-instrument`` entry point (that
loader wants ``opentelemetry-instrumentation``'s ``BaseInstrumentor``; the extra depends on the API only): call
``instrument()`` in your code, where you set up your providers.

**Span events.** A refused tool call adds the event ``repeat_hooks.refusal``, and a stopped turn the event
``repeat_hooks.stop``, to the span current where the guard decided: the SDK's own span when the SDK traces with
OpenTelemetry and runs its hooks inside it (pydantic-ai: the ``chat`` span of the response that asked for the
call, and the ``chat`` span of the request a stop skipped), else the span the application has current around
the run (LangChain, Mistral). With no recording span current, the event goes on a span of its own, named like
the event, started and ended at once (a root span, or a child of the current one if that one was sampled out,
and then dropped with it). Attributes (absent when unknown):

- ``repeat_hooks.reason``: the stop reason (``repeated_call``, ``ignored_refusals``, ``too_many_errors``,
  ``repeated_answer``, ``max_steps``, ``time``, ``cost``; a refusal after a stop carries the stop's).
- ``repeat_hooks.rule``: for a refusal, the rule that refused (``repeat``, ``failure``, ``cycle``,
  ``forbidden``, ``duplicate_write``, ``opaque``, ``turn_ended``); for a stop, the ``Policy`` setting that
  tripped (``max_refusals``, ``max_errors_in_a_row``, ``max_same_answers``, ``max_model_calls``,
  ``max_model_seconds``, ``max_cost_usd``).
- ``repeat_hooks.count`` and ``repeat_hooks.limit``: what tripped and its limit (a call's number for its key,
  refusals, errors in a row, model calls, seconds or dollars), as the state's ``GuardEvent`` keeps them; a
  refusal because the turn already stopped has none.
- ``repeat_hooks.turn``: the turn's number in its conversation (1 for the first); ``repeat_hooks.response``:
  the model response within the turn.
- ``repeat_hooks.saved.seconds``, ``repeat_hooks.saved.cost`` (refusals before a stop, when the adapter records model
  seconds or cost): what the refusal is estimated to save, one model call at the turn's averages so far.
- ``gen_ai.tool.name`` (a refusal's tool; a stop's, when a tool tripped it) and ``gen_ai.tool.call.id`` (a
  refusal's: the id the model gave the call, when the adapter passes one),
  ``gen_ai.conversation.id`` and ``gen_ai.agent.name`` (from the adapter's ``observe.scope(...)``):
  the GenAI semantic conventions' correlation attributes.

A decision the store could not make (the store was down, or held no guard state) adds the event
``repeat_hooks.outage``, with ``repeat_hooks.fail`` (``open``: the call or turn went on; ``closed``: refused),
``error.type`` (the error's class, such as ``StoreUnavailable``: its message stays in the log line) and the
conversation.

No argument value, result value, argument digest or message text is ever an attribute.

**Metrics** (meter ``repeat_hooks``), all counters:

- ``repeat_hooks.decisions`` (``{decision}``): every fresh decision, by ``repeat_hooks.hook``
  (``pre_tool_call``, ``pre_llm_call``), ``repeat_hooks.outcome`` (``allowed``, ``refused``, ``stopped``) and,
  unless allowed, ``repeat_hooks.reason`` and ``repeat_hooks.rule``.
- ``repeat_hooks.calls.refused`` (``{call}``): refused tool calls, by reason and rule.
- ``repeat_hooks.turns.stopped`` (``{turn}``): stopped turns, by reason and rule.
- ``repeat_hooks.saved.seconds`` (``s``) and ``repeat_hooks.saved.cost`` (``USD``): the estimated model seconds
  and dollars the refusals saved (one model call at the turn's averages per refused call; a stop adds
  nothing: what the rest of the loop would have cost is not known).
- ``repeat_hooks.outages`` (``{decision}``): decisions left to the outage policy, by ``repeat_hooks.fail`` and
  ``error.type``.

Tool-call figures also carry ``gen_ai.tool.name``, and all carry ``gen_ai.agent.name`` where known (both
bounded sets); the conversation id is never a metric attribute.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import ClassVar

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from .. import __version__
from ..decision import RefusalKind, StopReason
from ..stop_rules import STOP_RULES, HookPoint
from . import ModelCallDecided, Observation, Observer, Outage, ToolCallDecided, add_observer, current_scope

__all__ = [
    "OUTAGE_EVENT",
    "REFUSAL_EVENT",
    "STOP_EVENT",
    "RepeatHooksInstrumentor",
]

logger = logging.getLogger("repeat_hooks")

REFUSAL_EVENT = "repeat_hooks.refusal"
"""The span event of a refused tool call."""
STOP_EVENT = "repeat_hooks.stop"
"""The span event of a stopped turn."""
OUTAGE_EVENT = "repeat_hooks.outage"
"""The span event of a decision the store's failure left to the outage policy (``fail``)."""
FAIL = "repeat_hooks.fail"
ERROR_TYPE = "error.type"

REASON = "repeat_hooks.reason"
RULE = "repeat_hooks.rule"
TURN = "repeat_hooks.turn"
RESPONSE = "repeat_hooks.response"
COUNT = "repeat_hooks.count"
LIMIT = "repeat_hooks.limit"
HOOK = "repeat_hooks.hook"
OUTCOME = "repeat_hooks.outcome"
SAVED_SECONDS = "repeat_hooks.saved.seconds"
SAVED_COST = "repeat_hooks.saved.cost"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
CONVERSATION_ID = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"

_STOP_SETTINGS: dict[StopReason, str] = {rule.reason: rule.setting for rule in STOP_RULES}
_STOP_SETTINGS[StopReason.REPEATED_CALL] = "max_refusals"  # max_refusals=0: the first refusal ends the turn

Attributes = dict[str, AttributeValue]


class _Telemetry:
    """The observer ``instrument()`` registers: it writes span events and counts, and decides nothing."""

    def __init__(self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
        self.tracer = trace.get_tracer("repeat_hooks", __version__, tracer_provider)
        meter = metrics.get_meter("repeat_hooks", __version__, meter_provider)
        self.decisions = meter.create_counter(
            "repeat_hooks.decisions", "{decision}", "Tool and model calls the guard decided, by outcome and reason."
        )
        self.refused = meter.create_counter("repeat_hooks.calls.refused", "{call}", "Tool calls the guard refused.")
        self.stopped = meter.create_counter("repeat_hooks.turns.stopped", "{turn}", "Turns the guard stopped.")
        self.saved_seconds = meter.create_counter(
            "repeat_hooks.saved.seconds", "s", "Model seconds the refusals are estimated to save."
        )
        self.saved_cost = meter.create_counter(
            "repeat_hooks.saved.cost", "USD", "Model dollars the refusals are estimated to save."
        )
        self.outages = meter.create_counter(
            "repeat_hooks.outages", "{decision}", "Decisions the store's failure left to the outage policy."
        )

    def __call__(self, seen: Observation) -> None:
        if isinstance(seen, ToolCallDecided):
            self._tool_call(seen)
        elif isinstance(seen, ModelCallDecided):
            self._model_call(seen)
        elif isinstance(seen, Outage):
            self._outage(seen)

    def _tool_call(self, seen: ToolCallDecided) -> None:
        scope = current_scope()
        labels: Attributes = {HOOK: HookPoint.PRE_TOOL_CALL.value, TOOL_NAME: seen.call.name}
        if scope.agent_name is not None:
            labels[AGENT_NAME] = scope.agent_name
        refusal = seen.refusal
        if refusal is None:
            self.decisions.add(1, {**labels, OUTCOME: "allowed"})
            return
        reason = seen.stopped if seen.stopped is not None else StopReason.REPEATED_CALL
        why: Attributes = {REASON: reason.value, RULE: refusal.reason.value}
        self.decisions.add(1, {**labels, OUTCOME: "refused", **why})
        del labels[HOOK]
        self.refused.add(1, {**labels, **why})
        event: Attributes = {**why, TURN: seen.where.turn, RESPONSE: seen.where.response}
        saves = refusal.reason is not RefusalKind.TURN_ENDED  # after a stop, no model call was coming anyway
        if saves and seen.model_seconds > 0:
            self.saved_seconds.add(seen.model_seconds, labels)
            event[SAVED_SECONDS] = seen.model_seconds
        if saves and seen.model_cost_usd > 0:
            self.saved_cost.add(seen.model_cost_usd, labels)
            event[SAVED_COST] = seen.model_cost_usd
        if seen.event is not None:
            event[COUNT], event[LIMIT] = _figure(seen.event.count), _figure(seen.event.limit)
        event[TOOL_NAME] = seen.call.name
        if seen.call.call_id:
            event[TOOL_CALL_ID] = seen.call.call_id
        self._add_event(REFUSAL_EVENT, event, scope.conversation_id, scope.agent_name)

    def _model_call(self, seen: ModelCallDecided) -> None:
        scope = current_scope()
        labels: Attributes = {HOOK: HookPoint.PRE_LLM_CALL.value}
        if scope.agent_name is not None:
            labels[AGENT_NAME] = scope.agent_name
        stop = seen.stop
        if stop is None:
            self.decisions.add(1, {**labels, OUTCOME: "allowed"})
            return
        why: Attributes = {REASON: stop.reason.value, RULE: _STOP_SETTINGS[stop.reason]}
        self.decisions.add(1, {**labels, OUTCOME: "stopped", **why})
        del labels[HOOK]
        self.stopped.add(1, {**labels, **why})
        event: Attributes = {**why, TURN: seen.where.turn, RESPONSE: seen.where.response}
        if seen.event is not None:
            event[COUNT], event[LIMIT] = _figure(seen.event.count), _figure(seen.event.limit)
            if seen.event.tool is not None:
                event[TOOL_NAME] = seen.event.tool
        self._add_event(STOP_EVENT, event, scope.conversation_id, scope.agent_name)

    def _outage(self, seen: Outage) -> None:
        scope = current_scope()
        labels: Attributes = {FAIL: seen.fail, ERROR_TYPE: seen.error.partition(":")[0]}
        if scope.agent_name is not None:
            labels[AGENT_NAME] = scope.agent_name
        self.outages.add(1, labels)
        event: Attributes = {FAIL: seen.fail, ERROR_TYPE: seen.error.partition(":")[0]}
        self._add_event(OUTAGE_EVENT, event, seen.conversation_id or scope.conversation_id, scope.agent_name)

    def _add_event(self, name: str, event: Attributes, conversation_id: str | None, agent_name: str | None) -> None:
        """``name`` with ``event`` on the current span, or on a span of its own when none is recording."""
        if conversation_id is not None:
            event[CONVERSATION_ID] = conversation_id
        if agent_name is not None:
            event[AGENT_NAME] = agent_name
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(name, event)
            return
        own = self.tracer.start_span(name)
        try:
            own.add_event(name, event)
        finally:
            own.end()


def _figure(value: float) -> int | float:
    """A count as an int (``3``, not ``3.0``); seconds and dollars as they are."""
    return int(value) if value.is_integer() else value


class RepeatHooksInstrumentor:
    """Records what every guard in this process decides, with OpenTelemetry (see the module's docstring).

    One instance per process (``RepeatHooksInstrumentor() is RepeatHooksInstrumentor()``), as OpenTelemetry's
    instrumentors are."""

    _instance: ClassVar[RepeatHooksInstrumentor | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _remove: Callable[[], None] | None
    """Removes the observer while instrumented; ``None`` when not."""

    def __new__(cls) -> RepeatHooksInstrumentor:
        with cls._lock:
            if cls._instance is None:
                cls._instance = super().__new__(cls)
                cls._instance._remove = None
            return cls._instance

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """Whether ``instrument()`` is in effect."""
        return self._remove is not None

    def instrument(
        self, *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
    ) -> None:
        """From now on, every guard decision in this process is recorded: span events on the current span, and
        counts with ``meter_provider``'s meter. ``None``: the global provider (``trace.set_tracer_provider``,
        ``metrics.set_meter_provider``); ``tracer_provider`` only makes the spans of their own (no span current).

        Already instrumented: logs a warning and changes nothing (``uninstrument()`` first)."""
        with self._lock:
            if self._remove is not None:
                logger.warning("repeat_hooks: RepeatHooksInstrumentor is already instrumented: uninstrument() first")
                return
            observer: Observer = _Telemetry(tracer_provider, meter_provider)
            self._remove = add_observer(observer)

    def uninstrument(self) -> None:
        """Stop recording; a guard decides the same either way. Not instrumented: logs a warning."""
        with self._lock:
            remove = self._remove
            if remove is None:
                logger.warning("repeat_hooks: RepeatHooksInstrumentor is not instrumented")
                return
            self._remove = None
            remove()
