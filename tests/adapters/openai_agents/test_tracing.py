"""The guard's refusals and stops in the SDK's own trace (what its traces view shows), on the real Runner loop.

A ``TracingProcessor`` registered as the SDK's only processor collects every span of the run, as the
OpenAI exporter would receive them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, set_trace_processors, set_tracing_disabled
from agents.tracing import Span, Trace, TracingProcessor
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


class Collector(TracingProcessor):
    """Keeps every span the SDK ends, in order."""

    def __init__(self) -> None:
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def spans() -> Iterator[list[Span[Any]]]:
    """The spans of the runs in the test, with the SDK's tracing on (the suite runs with it off)."""
    collector = Collector()
    set_trace_processors([collector])
    set_tracing_disabled(False)
    try:
        yield collector.spans
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])


def ours(spans: list[Span[Any]]) -> list[Span[Any]]:
    return [span for span in spans if span.span_data.export().get("name", "").startswith("repeat_hooks.")]


async def test_each_refusal_and_the_stop_are_spans_in_the_turn_that_met_them(
    carrier: Any, spans: list[Span[Any]]
) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **SEED_004)

    await Runner.run(agent, "Keep checking FR-7731", context=GuardState())

    (agent_span,) = [span for span in spans if span.span_data.type == "agent"]
    guard_spans = ours(spans)
    assert [span.span_data.export() for span in guard_spans] == [
        {
            "type": "custom",
            "name": "repeat_hooks.refusal",
            "data": {
                "reason": "repeated_call",
                "rule": "repeat",
                "tool": "track_parcel",
                "call_id": f"call_{n}",
                "count": n,
                "limit": 2,
                "turn": 1,
            },
        }
        for n in (3, 4, 5)
    ] + [
        {
            "type": "custom",
            "name": "repeat_hooks.stop",
            "data": {"reason": "ignored_refusals", "tool": "track_parcel", "count": 3, "limit": 3, "turn": 1},
        }
    ]
    # Each lands in the SDK's turn span (a model response and its tools) of the response refused, beside the
    # refused call's function span, under the agent span; the stop in the same turn span as the last refusal.
    by_id = {span.span_id: span for span in spans}
    turns = [by_id[span.parent_id] for span in guard_spans if span.parent_id]
    assert [turn.span_data.type for turn in turns] == ["turn"] * 4
    assert {turn.parent_id for turn in turns} == {agent_span.span_id}
    assert len({turn.span_id for turn in turns}) == 3 and turns[2] is turns[3]
    for turn in turns[:3]:
        beside = [span.span_data.type for span in spans if span.parent_id == turn.span_id]
        assert beside.count("function") == 1
    assert len([span for span in spans if span.span_data.type == "function"]) == 5
    assert "FR-7731" not in json.dumps([span.export() for span in guard_spans])


async def test_without_turn_spans_they_land_on_the_agent_span(carrier: Any, spans: list[Span[Any]]) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **SEED_004)
    config = RunConfig(tracing={"include_task_and_turn_spans": False})

    await Runner.run(agent, "Keep checking FR-7731", context=GuardState(), run_config=config)

    (agent_span,) = [span for span in spans if span.span_data.type == "agent"]
    guard_spans = ours(spans)
    assert [span.span_data.export()["name"] for span in guard_spans] == ["repeat_hooks.refusal"] * 3 + [
        "repeat_hooks.stop"
    ]
    assert {span.parent_id for span in guard_spans} == {agent_span.span_id}


async def test_a_refusal_in_a_batch_names_its_own_call(carrier: Any, spans: list[Span[Any]]) -> None:
    first, second = {"tracking_number": "FR-1"}, {"tracking_number": "FR-2"}
    model = ScriptedModel(
        [tool_call("track_parcel", first, "c1")],
        [tool_call("track_parcel", second, "c2"), tool_call("track_parcel", first, "c3")],
        [message("Done.")],
    )
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), count="per_turn", max_calls=1)

    await Runner.run(agent, "Track two parcels", context=GuardState())

    assert carrier.calls == ["FR-1", "FR-2"]
    assert [span.span_data.export()["data"] for span in ours(spans)] == [
        {
            "reason": "repeated_call",
            "rule": "repeat",
            "tool": "track_parcel",
            "call_id": "c3",
            "count": 2,
            "limit": 1,
            "turn": 1,
        }
    ]


async def test_a_run_with_tracing_disabled_records_nothing(carrier: Any, spans: list[Span[Any]]) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **SEED_004)

    result = await Runner.run(
        agent, "Keep checking FR-7731", context=GuardState(), run_config=RunConfig(tracing_disabled=True)
    )

    assert result.final_output.startswith("I stopped")
    assert spans == []


async def test_a_run_the_guard_leaves_alone_has_no_guard_span(carrier: Any, spans: list[Span[Any]]) -> None:
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("It is in Lyon.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]))

    await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    assert sorted(span.span_data.type for span in spans) == ["agent", "function", "task", "turn", "turn"]
    assert ours(spans) == []
