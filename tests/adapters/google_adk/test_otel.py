"""OpenTelemetry on ADK's real Runner, traced by ADK's own spans (``invoke_agent``, ``execute_tool``, ...).

ADK traces through the process's global tracer provider, which can be set once: the ``adk_spans`` fixture
sets an SDK ``TracerProvider`` if none is set yet (or takes the one set), and adds this module's in-memory
exporter to it. The guard decides a model response's calls as a batch, before any of them runs, in
the OpenTelemetry context of the model call that produced it: the refusal event lands on that model call's
span (ADK 2.11: ``call_llm``; 2.13 has none by default, schema v2: the agent's ``invoke_agent``, which covers
its model calls; with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``, ``call_llm`` again) and names its call by
``gen_ai.tool.call.id``, as ADK's ``execute_tool`` span of that call does; the stop lands
on the span of the model call it skips. Both carry the session id as ``gen_ai.conversation.id`` and the
agent's name. ADK's ``generate_content`` span cannot hold them: it is current only inside the model's own
stream, and ends before any plugin callback receives the response.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.genai import types
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from repeat_hooks_google_adk import Policy, RepeatGuardPlugin
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling
from support.telemetry import counters, global_spans, holding, instrumented

from repeat_hooks.observe.otel import REFUSAL_EVENT, STOP_EVENT

from .conftest import Carrier, new_session, run_turn, runner_for

PARCEL = "MARKER-FR-7731"


@pytest.fixture(scope="module")
def adk_spans() -> Iterator[InMemorySpanExporter]:
    """The spans ADK's global tracer ends while this module runs."""
    with global_spans() as exporter:
        yield exporter


@pytest.fixture
def telemetry(adk_spans: InMemorySpanExporter) -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    adk_spans.clear()
    with instrumented(spans=adk_spans) as telemetry:
        yield telemetry.spans, telemetry.reader


def _parcel_runner(model: ScriptedLlm, carrier: Carrier) -> Any:
    agent = LlmAgent(name="parcel_tracker", instruction="Track parcels.", model=model, tools=[carrier.tool])
    return runner_for(agent, RepeatGuardPlugin(Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3)))


async def test_refusals_and_the_stop_are_events_on_the_spans_of_their_model_calls(
    telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader], carrier: Carrier
) -> None:
    exporter, reader = telemetry
    model = ScriptedLlm(then=keep_calling("track_parcel", {"tracking_number": PARCEL}))
    runner = _parcel_runner(model, carrier)
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking the parcel")

    assert turn.final_text.startswith("I stopped") and model.calls == 5
    spans = list(exporter.get_finished_spans())
    tools = [span for span in spans if span.name == "execute_tool track_parcel"]
    assert [span.attributes.get("gen_ai.tool.call.id") for span in tools] == [f"call_{n}" for n in range(1, 6)]  # type: ignore[union-attr]
    (agent_span,) = [span for span in spans if span.name == "invoke_agent parcel_tracker"]

    refusals = holding(spans, REFUSAL_EVENT)
    assert [attributes for _, attributes in refusals] == [
        {
            "repeat_hooks.reason": "repeated_call",
            "repeat_hooks.rule": "repeat",
            "repeat_hooks.count": n,
            "repeat_hooks.limit": 2,
            "repeat_hooks.turn": 1,
            "repeat_hooks.response": n,
            "gen_ai.tool.name": "track_parcel",
            "gen_ai.tool.call.id": f"call_{n}",
            "gen_ai.conversation.id": session_id,
            "gen_ai.agent.name": "parcel_tracker",
        }
        for n in (3, 4, 5)
    ]
    # Each on the span of the model call whose response asked for the call (decided with its batch, before it
    # ran): ADK 2.11's call_llm spans (the 3rd to 5th; the 6th is the call the stop skipped), or in ADK 2.13,
    # which has no call_llm span (schema v2), the agent span that covers its model calls. The refused call's
    # own execute_tool span carries the same gen_ai.tool.call.id.
    model_calls = sorted((span for span in spans if span.name == "call_llm"), key=lambda span: span.start_time or 0)
    assert all(span.parent is not None and span.parent.span_id == agent_span.context.span_id for span in model_calls)
    assert len(model_calls) in (0, 6)
    assert [holder for holder, _ in refusals] == (model_calls[2:5] if model_calls else [agent_span] * 3)
    assert [tool.attributes["gen_ai.tool.call.id"] for tool in tools[2:]] == [  # type: ignore[index]
        attributes["gen_ai.tool.call.id"] for _, attributes in refusals
    ]

    ((stopped_on, stopped),) = holding(spans, STOP_EVENT)
    assert stopped_on is (model_calls[5] if model_calls else agent_span)
    assert stopped == {
        "repeat_hooks.reason": "ignored_refusals",
        "repeat_hooks.rule": "max_refusals",
        "repeat_hooks.count": 3,
        "repeat_hooks.limit": 3,
        "repeat_hooks.turn": 1,
        "repeat_hooks.response": 5,
        "gen_ai.tool.name": "track_parcel",
        "gen_ai.conversation.id": session_id,
        "gen_ai.agent.name": "parcel_tracker",
    }

    counted = counters(reader)
    why = {"repeat_hooks.reason": "repeated_call", "repeat_hooks.rule": "repeat"}
    agent_name = {"gen_ai.agent.name": "parcel_tracker"}
    assert counted["repeat_hooks.calls.refused"] == [({"gen_ai.tool.name": "track_parcel", **agent_name, **why}, 3)]
    assert counted["repeat_hooks.turns.stopped"] == [
        ({**agent_name, "repeat_hooks.reason": "ignored_refusals", "repeat_hooks.rule": "max_refusals"}, 1)
    ]
    written = json.dumps([attributes for _, attributes in refusals] + [stopped]) + json.dumps(counted)
    assert "MARKER" not in written  # the parcel id is an argument value: never in the guard's attributes


async def test_uninstrumented_adk_traces_as_before_and_the_guard_adds_nothing(
    adk_spans: InMemorySpanExporter, carrier: Carrier
) -> None:
    adk_spans.clear()
    model = ScriptedLlm(then=keep_calling("track_parcel", {"tracking_number": PARCEL}))
    runner = _parcel_runner(model, carrier)

    turn = await run_turn(runner, await new_session(runner), "Keep checking the parcel")

    assert turn.final_text.startswith("I stopped")
    spans = list(adk_spans.get_finished_spans())
    assert len([span for span in spans if span.name == "execute_tool track_parcel"]) == 5
    assert holding(spans, REFUSAL_EVENT) == holding(spans, STOP_EVENT) == []
    assert not [span for span in spans if span.name.startswith("repeat_hooks")]


class FinishingLlm(ScriptedLlm):
    """A ``ScriptedLlm`` whose responses report why generation stopped (``finish_reason``), as Gemini's do."""

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
        async for response in super().generate_content_async(llm_request, stream):
            response.finish_reason = types.FinishReason.STOP
            yield response


async def test_adks_generate_content_span_has_ended_before_the_guard_sees_the_response(
    telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader], carrier: Carrier
) -> None:
    """Why the refusals are not on ``generate_content``: ADK opens that span after ``before_model_callback``,
    makes it current only inside the model's own stream, and ends it at the response reporting a finish reason,
    before any plugin callback receives the response (2.11 and 2.13 alike; 2.11 also has ``call_llm``)."""
    exporter, _ = telemetry
    model = FinishingLlm(then=keep_calling("track_parcel", {"tracking_number": PARCEL}))
    runner = _parcel_runner(model, carrier)

    turn = await run_turn(runner, await new_session(runner), "Keep checking the parcel")

    assert turn.final_text.startswith("I stopped") and model.calls == 5
    spans = list(exporter.get_finished_spans())
    inferences = sorted((s for s in spans if s.name == "generate_content scripted"), key=lambda s: s.start_time or 0)
    assert len(inferences) == 5
    refusals = [(span, event) for span in spans for event in span.events if event.name == REFUSAL_EVENT]
    assert len(refusals) == 3 and not [span for span, _ in refusals if span.name.startswith("generate_content")]
    for inference, (_, refusal) in zip(inferences[2:], refusals, strict=True):
        assert inference.end_time is not None and inference.end_time <= refusal.timestamp


async def test_adk_2_13_puts_the_refusals_on_call_llm_with_the_legacy_schema_opt_in(
    telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader], carrier: Carrier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1`` (ADK 2.13's schema v1) keeps a ``call_llm`` span per model
    call, current in the plugin's model callbacks: each refusal lands on the one whose response asked for the
    call, and the stop on the one it skipped, as in ADK 2.11 (which always has it)."""
    monkeypatch.setenv("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", "1")
    exporter, _ = telemetry
    model = FinishingLlm(then=keep_calling("track_parcel", {"tracking_number": PARCEL}))
    runner = _parcel_runner(model, carrier)

    await run_turn(runner, await new_session(runner), "Keep checking the parcel")

    spans = list(exporter.get_finished_spans())
    model_calls = sorted((span for span in spans if span.name == "call_llm"), key=lambda span: span.start_time or 0)
    assert len(model_calls) == 6
    refusals = holding(spans, REFUSAL_EVENT)
    assert [holder for holder, _ in refusals] == model_calls[2:5]
    assert [attributes["gen_ai.tool.call.id"] for _, attributes in refusals] == ["call_3", "call_4", "call_5"]
    ((stopped_on, _),) = holding(spans, STOP_EVENT)
    assert stopped_on is model_calls[5]
