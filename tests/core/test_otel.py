"""repeat_hooks.observe.otel: refusals and stops as span events on the current span, counters of decisions and savings,
never a value; without instrument() (or the extra) nothing of OpenTelemetry is imported."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from repeat_hooks import GuardState, Policy, StopRepeatedCalls, StoreUnavailable, ToolCall, __version__
from repeat_hooks.kit import GuardCore, request
from repeat_hooks.observe import scope
from repeat_hooks.observe.otel import OUTAGE_EVENT, REFUSAL_EVENT, STOP_EVENT, RepeatHooksInstrumentor

SECRET_ARGUMENT = "MARKER-ARG-7731"
SECRET_RESULT = "MARKER-RESULT-5521"


@dataclass
class Telemetry:
    """The SDK's in-memory exporter and reader, with a tracer of the test's own to open spans."""

    provider: TracerProvider
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def sums(self, name: str) -> dict[frozenset[tuple[str, Any]], float]:
        """Each data point of the counter ``name``, by its attributes."""
        found: dict[frozenset[tuple[str, Any]], float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scoped in resource.scope_metrics:
                for metric in scoped.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found[frozenset((point.attributes or {}).items())] = point.value  # type: ignore[union-attr]
        return found

    def units(self) -> dict[str, str]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            metric.name: metric.unit or ""
            for resource in data.resource_metrics
            for scoped in resource.scope_metrics
            for metric in scoped.metrics
        }


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    RepeatHooksInstrumentor().instrument(tracer_provider=provider, meter_provider=MeterProvider([reader]))
    try:
        yield Telemetry(provider, spans, reader)
    finally:
        RepeatHooksInstrumentor().uninstrument()


def _loop(policy: Policy, state: GuardState, *, steps: int = 3) -> list[object]:
    """One turn: identical lookups, one model call (2 s, $0.5) before each, the same result every time, through
    the hook (which commits each decision, then tells the observers)."""
    guard = StopRepeatedCalls(policy=policy, state=state)
    decisions: list[object] = []
    guard.pre_agent_turn(turn_id="t1")
    for step in range(steps):
        decisions.append(guard.pre_llm_call())
        guard.post_llm_call(seconds=2.0, cost_usd=0.5, delivery_id=f"m{step}")
        call = ToolCall(name="track", arguments={"id": SECRET_ARGUMENT}, call_id=f"c{step}")
        decisions.append(guard.pre_tool_call(call))
        guard.post_tool_call(call, ok=True, result={"status": SECRET_RESULT})
    decisions.append(guard.pre_llm_call())
    return decisions


def test_a_refusal_and_a_stop_are_events_on_the_current_span(telemetry: Telemetry) -> None:
    tracer = telemetry.provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent tracker"), scope(conversation_id="conv-9", agent_name="tracker"):
        _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    (span,) = telemetry.finished()  # no span of the guard's own: the current one holds the events
    assert span.name == "invoke_agent tracker"
    assert [event.name for event in span.events] == [REFUSAL_EVENT, STOP_EVENT]
    refusal, stop = (dict(event.attributes or {}) for event in span.events)
    assert refusal == {
        "repeat_hooks.reason": "repeated_call",
        "repeat_hooks.rule": "repeat",
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 3,
        "repeat_hooks.count": 3,  # the third call of the same key
        "repeat_hooks.limit": 2,
        "repeat_hooks.saved.seconds": 2.0,
        "repeat_hooks.saved.cost": 0.5,
        "gen_ai.tool.name": "track",
        "gen_ai.tool.call.id": "c2",
        "gen_ai.conversation.id": "conv-9",
        "gen_ai.agent.name": "tracker",
    }
    assert type(refusal["repeat_hooks.count"]) is int and type(stop["repeat_hooks.limit"]) is int  # 3, not 3.0
    assert stop == {
        "repeat_hooks.reason": "ignored_refusals",
        "repeat_hooks.rule": "max_refusals",
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 3,
        "repeat_hooks.count": 1,  # one refusal ignored
        "repeat_hooks.limit": 1,
        "gen_ai.tool.name": "track",
        "gen_ai.conversation.id": "conv-9",
        "gen_ai.agent.name": "tracker",
    }


def test_with_no_span_current_each_event_gets_a_short_span_of_its_own(telemetry: Telemetry) -> None:
    _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    spans = telemetry.finished()
    assert [(span.name, [event.name for event in span.events]) for span in spans] == [
        (REFUSAL_EVENT, [REFUSAL_EVENT]),
        (STOP_EVENT, [STOP_EVENT]),
    ]
    assert all(span.parent is None for span in spans)
    assert "gen_ai.conversation.id" not in (spans[0].events[0].attributes or {})  # no scope: not known


def test_a_span_sampled_out_keeps_the_events_out_too(telemetry: Telemetry) -> None:
    quiet = TracerProvider(sampler=ALWAYS_OFF).get_tracer("app")
    with quiet.start_as_current_span("not sampled"):
        _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    assert telemetry.finished() == []
    assert sum(telemetry.sums("repeat_hooks.calls.refused").values()) == 1  # the counts still count


def test_counters_count_decisions_refusals_stops_and_savings(telemetry: Telemetry) -> None:
    with scope(conversation_id="conv-9", agent_name="tracker"):
        _loop(Policy(max_calls=2, max_refusals=1), GuardState())
    _loop(Policy(max_calls=2, max_refusals=1), GuardState(), steps=2)  # a turn with no refusal, no scope

    tool, agent = ("gen_ai.tool.name", "track"), ("gen_ai.agent.name", "tracker")
    refused = {("repeat_hooks.reason", "repeated_call"), ("repeat_hooks.rule", "repeat")}
    stopped = {("repeat_hooks.reason", "ignored_refusals"), ("repeat_hooks.rule", "max_refusals")}
    pre_tool, pre_llm = ("repeat_hooks.hook", "pre_tool_call"), ("repeat_hooks.hook", "pre_llm_call")
    allowed = ("repeat_hooks.outcome", "allowed")
    assert telemetry.sums("repeat_hooks.decisions") == {
        frozenset({pre_tool, allowed, tool, agent}): 2,
        frozenset({pre_tool, allowed, tool}): 2,
        frozenset({pre_tool, ("repeat_hooks.outcome", "refused"), tool, agent, *refused}): 1,
        frozenset({pre_llm, allowed, agent}): 3,
        frozenset({pre_llm, allowed}): 3,
        frozenset({pre_llm, ("repeat_hooks.outcome", "stopped"), agent, *stopped}): 1,
    }
    assert telemetry.sums("repeat_hooks.calls.refused") == {frozenset({tool, agent, *refused}): 1}
    assert telemetry.sums("repeat_hooks.turns.stopped") == {frozenset({agent, *stopped}): 1}
    assert telemetry.sums("repeat_hooks.saved.seconds") == {frozenset({tool, agent}): 2.0}
    assert telemetry.sums("repeat_hooks.saved.cost") == {frozenset({tool, agent}): 0.5}
    units = telemetry.units()
    assert (units["repeat_hooks.saved.seconds"], units["repeat_hooks.saved.cost"]) == ("s", "USD")
    assert units["repeat_hooks.decisions"] == "{decision}"


def test_no_argument_or_result_value_reaches_any_attribute(telemetry: Telemetry) -> None:
    tracer = telemetry.provider.get_tracer("app")
    with tracer.start_as_current_span("agent"), scope(conversation_id="conv-9"):
        _loop(Policy(max_calls=2, max_refusals=1), GuardState())
    _loop(Policy(max_calls=1, max_refusals=1), GuardState())  # the own spans too

    written = json.dumps(
        [
            [span.name, dict(span.attributes or {}), [[e.name, dict(e.attributes or {})] for e in span.events]]
            for span in telemetry.finished()
        ]
    ) + json.dumps(telemetry.reader.get_metrics_data().to_json())  # type: ignore[union-attr]
    assert REFUSAL_EVENT in written and "repeat_hooks.decisions" in written  # the scan sees what was written
    assert SECRET_ARGUMENT not in written and SECRET_RESULT not in written
    assert "MARKER" not in written


def test_a_call_carries_the_id_the_model_gave_it_not_the_batch_position(telemetry: Telemetry) -> None:
    policy, state = Policy(limits={"refund": 0}), GuardState()
    guard = StopRepeatedCalls(policy=policy, state=state)
    guard.pre_agent_turn()
    guard.pre_llm_call()
    calls = [
        ToolCall(name="refund", arguments={"order": 1}, call_id="call_0"),
        ToolCall(name="refund", arguments={"order": 2}, call_id="call_0"),  # reused: decided as "call_0#1"
        ToolCall(name="refund", arguments={"order": 3}),  # none: decided as "#2"
    ]
    assert all(guard.pre_tool_calls(calls))

    events = [dict(e.attributes or {}) for span in telemetry.finished() for e in span.events]
    assert [event.get("gen_ai.tool.call.id") for event in events] == ["call_0", "call_0", None]
    assert {event["repeat_hooks.rule"] for event in events} == {"forbidden"}


@pytest.mark.parametrize(
    ("settings", "feeds_failures", "reason", "rule"),
    [
        ({"max_refusals": 0}, False, "repeated_call", "max_refusals"),
        ({"max_errors_in_a_row": 2}, True, "too_many_errors", "max_errors_in_a_row"),
        ({"max_model_calls": 2}, False, "max_steps", "max_model_calls"),
        ({"max_cost_usd": 0.75}, False, "cost", "max_cost_usd"),
        ({"max_model_seconds": 3.0}, False, "time", "max_model_seconds"),
    ],
)
def test_a_stop_names_the_setting_that_tripped(
    telemetry: Telemetry, settings: dict[str, Any], feeds_failures: bool, reason: str, rule: str
) -> None:
    policy, state = Policy(max_calls=1, **settings), GuardState()
    guard = StopRepeatedCalls(policy=policy, state=state)
    guard.pre_agent_turn()
    for step in range(4):
        if guard.pre_llm_call() is not None:
            break
        guard.post_llm_call(seconds=2.0, cost_usd=0.5)
        call = ToolCall(name="track", arguments={"step": step if feeds_failures else 0}, call_id=f"c{step}")
        if guard.pre_tool_call(call) is None:
            guard.post_tool_call(call, ok=not feeds_failures, result="boom")

    stops = [event for span in telemetry.finished() for event in span.events if event.name == STOP_EVENT]
    assert [(e.attributes or {}).get("repeat_hooks.reason") for e in stops] == [reason]
    assert [(e.attributes or {}).get("repeat_hooks.rule") for e in stops] == [rule]


def test_uninstrumented_nothing_is_recorded_and_decisions_are_the_same(
    telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    observed = _loop(Policy(max_calls=2, max_refusals=1), GuardState())
    instrumentor = RepeatHooksInstrumentor()
    assert instrumentor is RepeatHooksInstrumentor() and instrumentor.is_instrumented_by_opentelemetry
    with caplog.at_level(logging.WARNING, logger="repeat_hooks"):
        instrumentor.instrument()  # twice: a warning, and still one observer (each event once)
    assert "already instrumented" in caplog.text
    instrumentor.uninstrument()
    assert not instrumentor.is_instrumented_by_opentelemetry
    telemetry.spans.clear()

    quiet = _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    assert quiet == observed
    assert telemetry.finished() == []
    instrumentor.instrument(tracer_provider=telemetry.provider)  # the fixture's uninstrument() has one to remove
    _loop(Policy(max_calls=2, max_refusals=1), GuardState())
    assert [span.name for span in telemetry.finished()] == [REFUSAL_EVENT, STOP_EVENT]  # once each, not twice


def test_without_instrument_nothing_of_opentelemetry_is_imported() -> None:
    script = """
import sys
from repeat_hooks import GuardState, Policy, StopRepeatedCalls, ToolCall
policy, state = Policy(max_calls=1, max_refusals=1), GuardState()
policy.start_turn(state)
for step in range(3):
    policy.decide_model_call(state)
    call = ToolCall(name="track", arguments={"id": 1}, call_id=f"c{step}")
    if policy.decide_tool_call(state, call) is None:
        policy.record_tool_result(state, call, result="same")
assert policy.decide_model_call(state) is not None, "the turn should have stopped"
loaded = sorted(name for name in sys.modules if name.startswith(("opentelemetry", "repeat_hooks.observe.otel")))
print(loaded)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _metrics(telemetry: Telemetry) -> dict[str, Any]:
    """Each metric exported, by name (its scope beside it: ``(scope, metric)``)."""
    data = telemetry.reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: (scoped.scope, metric)
        for resource in data.resource_metrics
        for scoped in resource.scope_metrics
        for metric in scoped.metrics
    }


def test_each_metric_says_its_scope_unit_and_description(telemetry: Telemetry) -> None:
    _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    exported = _metrics(telemetry)
    assert {(scope.name, scope.version) for scope, _ in exported.values()} == {("repeat_hooks", __version__)}
    assert {name: (metric.unit, metric.description) for name, (_, metric) in exported.items()} == {
        "repeat_hooks.decisions": ("{decision}", "Tool and model calls the guard decided, by outcome and reason."),
        "repeat_hooks.calls.refused": ("{call}", "Tool calls the guard refused."),
        "repeat_hooks.turns.stopped": ("{turn}", "Turns the guard stopped."),
        "repeat_hooks.saved.seconds": ("s", "Model seconds the refusals are estimated to save."),
        "repeat_hooks.saved.cost": ("USD", "Model dollars the refusals are estimated to save."),
    }


def test_a_span_of_the_guards_own_says_its_scope(telemetry: Telemetry) -> None:
    _loop(Policy(max_calls=2, max_refusals=1), GuardState())

    spans = telemetry.finished()
    assert [span.name for span in spans] == [REFUSAL_EVENT, STOP_EVENT]
    assert {(span.instrumentation_scope.name, span.instrumentation_scope.version) for span in spans} == {  # type: ignore[union-attr]
        ("repeat_hooks", __version__)
    }


def _refused_once(seconds: float, cost_usd: float) -> None:
    """Three identical lookups in one turn (the third refused), each model call ``seconds`` and ``cost_usd``."""
    policy, state = Policy(max_calls=2, max_refusals=None), GuardState()
    guard = StopRepeatedCalls(policy=policy, state=state)
    guard.pre_agent_turn()
    for step in range(3):
        guard.pre_llm_call()
        guard.post_llm_call(seconds=seconds, cost_usd=cost_usd)
        call = ToolCall(name="track", arguments={"id": 1}, call_id=f"c{step}")
        if guard.pre_tool_call(call) is None:
            guard.post_tool_call(call, result="in transit")


def test_savings_are_counted_when_measured_and_never_as_zero(telemetry: Telemetry) -> None:
    _refused_once(seconds=0.0, cost_usd=0.0)  # an adapter that measures neither
    (event,) = [e for span in telemetry.finished() for e in span.events]
    assert "repeat_hooks.saved.seconds" not in (event.attributes or {})
    assert "repeat_hooks.saved.cost" not in (event.attributes or {})
    assert set(_metrics(telemetry)) == {"repeat_hooks.decisions", "repeat_hooks.calls.refused"}

    telemetry.spans.clear()
    _refused_once(seconds=0.5, cost_usd=0.25)  # under a second, under a dollar: still counted
    (event,) = [e for span in telemetry.finished() for e in span.events]
    assert (event.attributes or {})["repeat_hooks.saved.seconds"] == 0.5
    assert (event.attributes or {})["repeat_hooks.saved.cost"] == 0.25
    tool = frozenset({("gen_ai.tool.name", "track")})
    assert telemetry.sums("repeat_hooks.saved.seconds") == {tool: 0.5}
    assert telemetry.sums("repeat_hooks.saved.cost") == {tool: 0.25}


def test_a_refusal_after_the_turn_stopped_saves_nothing(telemetry: Telemetry) -> None:
    policy, state = Policy(max_calls=2, max_refusals=1), GuardState()
    guard = StopRepeatedCalls(policy=policy, state=state)
    _loop(policy, state)  # the third lookup refused, saving one model call; then the turn stops
    late = ToolCall(name="note", arguments={}, call_id="late")
    assert guard.pre_tool_call(late) is not None  # no model call was coming anyway

    events = [e for span in telemetry.finished() for e in span.events if e.name == REFUSAL_EVENT]
    assert [(e.attributes or {}).get("repeat_hooks.rule") for e in events] == ["repeat", "turn_ended"]
    assert "repeat_hooks.saved.seconds" not in (events[1].attributes or {})
    assert "repeat_hooks.saved.cost" not in (events[1].attributes or {})
    tool = frozenset({("gen_ai.tool.name", "track")})
    assert telemetry.sums("repeat_hooks.saved.seconds") == {tool: 2.0}
    assert telemetry.sums("repeat_hooks.saved.cost") == {tool: 0.5}


def test_dollars_in_a_stop_stay_dollars_and_counts_are_ints(telemetry: Telemetry) -> None:
    policy, state = Policy(max_cost_usd=0.75), GuardState()
    guard = StopRepeatedCalls(policy=policy, state=state)
    guard.pre_agent_turn()
    while guard.pre_llm_call() is None:
        guard.post_llm_call(seconds=2.0, cost_usd=0.5)

    (stop,) = [dict(e.attributes or {}) for span in telemetry.finished() for e in span.events]
    assert (stop["repeat_hooks.count"], stop["repeat_hooks.limit"]) == (1.0, 0.75)
    assert type(stop["repeat_hooks.count"]) is int  # $1.00 spent: written 1


def test_instrumenting_twice_or_uninstrumenting_twice_warns(
    telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    instrumentor = RepeatHooksInstrumentor()
    with caplog.at_level(logging.WARNING, logger="repeat_hooks"):
        instrumentor.instrument()
        instrumentor.uninstrument()
        instrumentor.uninstrument()
        instrumentor.instrument()  # the fixture's uninstrument() has one to remove
    assert [record.getMessage() for record in caplog.records] == [
        "repeat_hooks: RepeatHooksInstrumentor is already instrumented: uninstrument() first",
        "repeat_hooks: RepeatHooksInstrumentor is not instrumented",
    ]


CONVERSATION = "gen_ai.conversation.id"


class _DownStore:
    """A store that is down, as a Redis that refuses connections is."""

    async def update(self, key: str, change: Any) -> Any:
        raise StoreUnavailable("Redis failed while updating 'repeat-hooks:conv-9': ConnectionError: refused")

    async def load(self, key: str) -> GuardState | None:
        raise StoreUnavailable("down")


async def test_an_outage_is_an_event_with_its_conversation_and_a_count_by_policy(telemetry: Telemetry) -> None:
    """The operator sees which conversation went unguarded (fail open) or was refused (fail closed)."""
    opened = GuardCore(owner="Guard", store=_DownStore())  # type: ignore[arg-type]
    closed = GuardCore(owner="Guard", store=_DownStore(), fail="closed")  # type: ignore[arg-type]
    call = ToolCall("track", {"id": SECRET_ARGUMENT})
    with request(conversation_id="conv-9"):
        assert await opened.update("conv-9", lambda s: opened.policy.decide_tool_call(s, call), outage=None) is None
        refused = await closed.update(
            "conv-9", lambda s: closed.policy.decide_tool_call(s, call), outage=closed.refused
        )
    assert refused is not None

    events = [event for span in telemetry.finished() for event in span.events]
    assert [(event.name, dict(event.attributes or {})) for event in events] == [
        (
            OUTAGE_EVENT,
            {"repeat_hooks.fail": fail, "error.type": "StoreUnavailable", "gen_ai.conversation.id": "conv-9"},
        )
        for fail in ("open", "closed")
    ]
    assert telemetry.sums("repeat_hooks.outages") == {
        frozenset({("repeat_hooks.fail", fail), ("error.type", "StoreUnavailable")}): 1 for fail in ("open", "closed")
    }
    assert SECRET_ARGUMENT not in json.dumps([dict(event.attributes or {}) for event in events])
