"""Which calls count: a response's calls decided before any runs, repeated model call ids, re-delivered hook
calls, calls made inside run_typescript."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, cast

from mistralai.agents import agents
from mistralai.vibe.harness.core.protocol import (
    CandidateMessage,
    CompletionCandidate,
    HookToolCall,
    ProtocolError,
    ProvidedToolCall,
    TextContentBlock,
    ToolFailureResult,
)
from mistralai.vibe.harness.runtime.capabilities import (
    PostLlmCallHookInvocation,
    PostToolCallHookInvocation,
    PreLlmCallHookInvocation,
    PreToolCallHookInvocation,
)
from mistralai.vibe_agents.sdk.authoring.contracts import HookContext, HookSession
from repeat_hooks_mistral import RepeatGuardHook, events_of, read_state, stop_of
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages
from temporalio.testing import ActivityEnvironment

from repeat_hooks import Policy, StopReason

FR = {"tracking_number": "FR-7731"}


class ParcelGuard(RepeatGuardHook):
    policy = Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3)


# -- one model response, several calls: all decided before any of them runs ------------------------------

ORDER: list[str] = []


@agents.tool
async def slow_scan(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel; slow."""
    ORDER.append(f"run {tracking_number}")
    await asyncio.sleep(0.05)
    return f"{tracking_number}: in transit"


class OrderGuard(RepeatGuardHook):
    """The default policy; notes each decision as it returns."""

    async def pre_tool_call(self, ctx: HookContext, call: Any) -> Any:
        decision = await super().pre_tool_call(ctx, call)
        ORDER.append(f"decide {call.tool_call.call.arguments['tracking_number']} {type(decision).__name__}")
        return decision


async def test_a_response_s_calls_are_all_decided_before_any_of_them_runs(agent_for: Any) -> None:
    """rc11 runs the pre_tool_call of every call of a response before it runs any tool, so the guard's
    per-call decisions are the batch's: no result of the response restarts another call's count."""
    ORDER.clear()
    scans = [ToolUse("slow_scan", {"tracking_number": number}) for number in ("A", "B", "A", "A", "C")]
    model = ScriptedModel.replies(scans, "Done.")
    async with await agent_for(model, OrderGuard(), tools=[slow_scan]).create_session() as session:
        await run_turn(session, "Check A, B and C.")

    decisions, runs = ORDER[:5], ORDER[5:]
    assert all(line.startswith("decide") for line in decisions) and all(line.startswith("run") for line in runs)
    assert sorted(decisions) == sorted(
        [f"decide {n} PreToolCallHookContinue" for n in ("A", "A", "B", "C")] + ["decide A PreToolCallHookSkip"]
    )
    assert sorted(runs) == ["run A", "run A", "run B", "run C"]
    assert [m.startswith("Refused") for m in tool_messages(model.requests[-1])] == [False, False, False, True, False]


async def test_distinct_calls_sharing_one_model_call_id_are_all_counted(carrier: Any, agent_for: Any) -> None:
    # Real models reuse call ids; rc11 derives its action ids from them, so they repeat too.
    model = ScriptedModel(lambda request: ToolUse("track_parcel", FR, call_id="call_1"))
    async with await agent_for(model, ParcelGuard()).create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")

    assert len(carrier.calls) == 2, "the 3rd call with the same id is refused, not taken for a re-delivery"
    assert len(model.requests) == 5
    assert tool_messages(model.requests[-1])[2].startswith("Refused: you already called track_parcel 2 times")


async def test_calls_made_inside_run_typescript_are_counted(carrier: Any, agent_for: Any) -> None:
    code = (
        "const out = [];\n"
        "for (let i = 0; i < 4; i++) {\n"
        '  try { out.push(await tools.client.track_parcel({tracking_number: "FR-7731"})); }\n'
        '  catch (e) { out.push("ERR " + String(e)); }\n'
        "}\n"
        "return out;"
    )
    program = ToolUse("run_typescript", {"code": code}, call_id="ts_1")
    model = ScriptedModel.replies(program, "FR-7731 is in transit.")
    builtins = agents.Builtins(skills=False, subagents=False, background_processes=False)  # run_typescript on
    async with await agent_for(model, ParcelGuard(), builtins=builtins).create_session() as session:
        result = await run_turn(session, "Check FR-7731 four times.")
        events = await events_of(session, guard=ParcelGuard)

    assert len(carrier.calls) == 2
    outputs = json.loads(tool_messages(model.requests[-1])[0])
    assert [isinstance(o, dict) for o in outputs] == [True, True, False, False]
    # rc11 hands a program a fixed error for a skipped call, not the refusal text (see the README).
    assert outputs[2] == "ERR tool_skipped: Tool execution was skipped by Runtime policy."
    assert [(e.kind, e.tool, e.count) for e in events] == [
        ("refusal", "track_parcel", 3),
        ("refusal", "track_parcel", 4),
    ]
    assert result.text == "FR-7731 is in transit."


# -- re-delivery: a deployed worker runs each hook call as a Temporal activity, retried at least once --


def _context(session_id: str = "session-1", turn_id: str = "turn-1") -> HookContext:
    return HookContext(session=HookSession(id=session_id, turn_id=turn_id), harness=cast(Any, None))


def _pre_tool_call(call_id: str = "call_1") -> Any:
    call = ProvidedToolCall(group_name="client", tool_name="track_parcel", arguments=FR)
    tool_call = HookToolCall(action_id="a-" + call_id, call_id=call_id, call=call)
    return PreToolCallHookInvocation(action_id="h-" + call_id, turn_id="turn-1", binding_id="b", tool_call=tool_call)


def _failed_result(call_id: str = "call_1") -> Any:
    pre = _pre_tool_call(call_id)
    error = ProtocolError(code="capability_execution_failed", message="boom", retryable=False)
    failure = ToolFailureResult(error=error)
    return PostToolCallHookInvocation(
        action_id="p-" + call_id, turn_id="turn-1", binding_id="b", tool_call=pre.tool_call, tool_result=failure
    )


def _activity(activity_id: str) -> ActivityEnvironment:
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, activity_id=activity_id)
    return environment


class OneCallGuard(RepeatGuardHook):
    policy = Policy(count="per_turn", match="tool", max_calls=1, max_errors_in_a_row=2, max_model_calls=2)


async def test_a_redelivered_tool_call_is_decided_once() -> None:
    guard, ctx = OneCallGuard(), _context("redelivered-tool")

    first = await _activity("7").run(guard.pre_tool_call, ctx, _pre_tool_call())
    again = await _activity("7").run(guard.pre_tool_call, ctx, _pre_tool_call())  # the same activity, retried
    other = await _activity("9").run(guard.pre_tool_call, ctx, _pre_tool_call())  # a distinct call, same call id
    other_again = await _activity("9").run(guard.pre_tool_call, ctx, _pre_tool_call())

    assert [type(r).__name__ for r in (first, again, other, other_again)] == [
        "PreToolCallHookContinue",
        "PreToolCallHookContinue",
        "PreToolCallHookSkip",
        "PreToolCallHookSkip",
    ]
    assert other_again.reason == other.reason
    state = await read_state("redelivered-tool", guard=OneCallGuard)
    assert state is not None and state.turn.refusals == 1


async def test_a_redelivered_failure_is_recorded_once() -> None:
    guard, ctx = OneCallGuard(), _context("redelivered-failure")
    llm = PreLlmCallHookInvocation(action_id="l", turn_id="turn-1", binding_id="b")

    await _activity("3").run(guard.post_tool_call, ctx, _failed_result())
    await _activity("3").run(guard.post_tool_call, ctx, _failed_result())
    assert type(await guard.pre_llm_call(ctx, llm)).__name__ == "PreLlmCallHookContinue", "one failure so far"

    await _activity("5").run(guard.post_tool_call, ctx, _failed_result())
    assert type(await guard.pre_llm_call(ctx, llm)).__name__ == "PreLlmCallHookSkip"
    stop = await stop_of("redelivered-failure", guard=OneCallGuard)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS


async def test_a_redelivered_model_call_is_counted_once() -> None:
    guard, ctx = OneCallGuard(), _context("redelivered-model")
    candidate = CompletionCandidate(
        message=CandidateMessage(content=[TextContentBlock(text="checking")]), finish_reason="stop", usage=None
    )
    post = PostLlmCallHookInvocation(action_id="m", turn_id="turn-1", binding_id="b", candidate=candidate)
    pre = PreLlmCallHookInvocation(action_id="l", turn_id="turn-1", binding_id="b")

    await _activity("11").run(guard.post_llm_call, ctx, post)
    await _activity("11").run(guard.post_llm_call, ctx, post)
    assert type(await guard.pre_llm_call(ctx, pre)).__name__ == "PreLlmCallHookContinue"

    await _activity("12").run(guard.post_llm_call, ctx, post)
    assert type(await guard.pre_llm_call(ctx, pre)).__name__ == "PreLlmCallHookSkip"
    stop = await stop_of("redelivered-model", guard=OneCallGuard)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
