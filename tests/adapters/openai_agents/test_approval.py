"""Human in the loop: a turn paused for approval, saved, and resumed elsewhere keeps its counts (issue 18).

An approved call runs once; a call a human rejected did not run but counts as a rejected call (the same call
rejected ``max_calls`` times is refused without asking anyone again); a call the guard refused with its batch
is never put to a human. Resumes run in a fresh process from the saved ``RunState`` alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, RunState, Tool, function_tool
from agents.run_config import RunConfig, ToolExecutionConfig
from repeat_hooks_openai_agents import GuardState, context_deserializer, context_serializer, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import RefusalKind

from .approval_child import refund_agent, scripted

STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
ARGS = {"tracking_number": "FR-7731"}
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}

# The resuming side, run in a fresh Python process: it knows the agent's shape, nothing else.
RESUME = textwrap.dedent(
    """
    import asyncio, json, sys
    from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
    from repeat_hooks_openai_agents import context_deserializer, guard_agent
    from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling

    set_tracing_disabled(True)
    reached, notified = [], []

    @function_tool
    def track_parcel(tracking_number: str) -> str:
        "Where the parcel is now."
        reached.append(tracking_number)
        return "in transit"

    @function_tool(needs_approval=True)
    def notify_customer(text: str) -> str:
        "Tell the customer (needs a human's approval)."
        notified.append(text)
        return "notified"

    async def main():
        model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}), call_id_prefix="r")
        agent = guard_agent(
            Agent(name="parcel-tracker", model=model, tools=[track_parcel, notify_customer]),
            count="per_turn", match="tool", max_calls=2, max_refusals=3,
        )
        saved = json.loads(open(sys.argv[1]).read())
        state = await RunState.from_json(agent, saved, context_deserializer=context_deserializer)
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(agent, state)
        guard = result.context_wrapper.context
        print(json.dumps({
            "reached": reached, "notified": notified, "final": result.final_output, "model_calls": model.calls,
            "first_request": model.outputs_received(0), "turn": guard.turn.number, "turn_id": guard.turn.id,
        }))

    asyncio.run(main())
    """
)


def tools(carrier: Any) -> tuple[list[Tool], list[str]]:
    notified: list[str] = []

    @function_tool(needs_approval=True)
    def notify_customer(text: str) -> str:
        """Tell the customer (needs a human's approval)."""
        notified.append(text)
        return "notified"

    return [carrier.tool, notify_customer], notified


def paused_model() -> ScriptedModel:
    return ScriptedModel(
        [tool_call("track_parcel", ARGS, "c1")],
        [tool_call("track_parcel", ARGS, "c2")],
        [tool_call("notify_customer", {"text": "Still looking"}, "c3")],
    )


async def pause(carrier: Any) -> tuple[Any, GuardState]:
    agent_tools, _ = tools(carrier)
    agent = guard_agent(Agent(name="parcel-tracker", model=paused_model(), tools=agent_tools), **SEED_004)
    state = GuardState()
    result = await Runner.run(agent, "Keep checking FR-7731", context=state)
    assert [item.name for item in result.interruptions] == ["notify_customer"]
    return result, state


async def test_a_paused_turn_resumed_in_another_process_keeps_its_counts(carrier: Any, tmp_path: Path) -> None:
    result, guard = await pause(carrier)
    assert carrier.calls == ["FR-7731", "FR-7731"]
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps(result.to_state().to_json(context_serializer=context_serializer)))

    child = subprocess.run(
        [sys.executable, "-c", RESUME, str(saved)], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 0, child.stderr
    resumed = json.loads(child.stdout.strip().splitlines()[-1])

    # The approved call ran; the turn had already used its 2 track_parcel calls, so none ran again.
    assert resumed["notified"] == ["Still looking"]
    assert resumed["reached"] == []
    assert resumed["first_request"]["c3"] == "notified"
    assert resumed["final"] == STOPPED
    assert resumed["model_calls"] == 3  # 3 refusals, then the turn ended without a 4th call
    assert resumed["turn"] == 1 and resumed["turn_id"] == guard.turn.id


async def test_both_the_sdk_default_dump_and_ours_keep_the_counts(carrier: Any) -> None:
    result, guard = await pause(carrier)
    default = result.to_state().to_json()["context"]["context"]
    ours = result.to_state().to_json(context_serializer=context_serializer)["context"]["context"]

    # The SDK dumps pydantic contexts with exclude_unset=True; the core's models count every field as set.
    assert default["turn"]["counts"] == guard.turn.counts and guard.turn.counts
    assert GuardState.model_validate(default) == guard
    assert context_deserializer(ours) == guard


async def test_resumed_with_fresh_objects_in_process(carrier: Any) -> None:
    result, _ = await pause(carrier)
    saved = json.dumps(result.to_state().to_json(context_serializer=context_serializer))

    fresh_tools, notified = tools(carrier)
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS), call_id_prefix="r")
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=fresh_tools), **SEED_004)
    state = await RunState.from_json(agent, json.loads(saved), context_deserializer=context_deserializer)
    for item in state.get_interruptions():
        state.approve(item)
    resumed = await Runner.run(agent, state)

    assert notified == ["Still looking"]
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert resumed.final_output == STOPPED
    assert model.calls == 3


async def test_guardrails_run_before_and_after_approval_count_the_call_once() -> None:
    sent: list[str] = []

    @function_tool(needs_approval=True)
    def send_update(text: str) -> str:
        """Send an update (needs a human's approval)."""
        sent.append(text)
        return "sent"

    model = ScriptedModel(
        [tool_call("send_update", {"text": "hi"}, "u1")], [tool_call("send_update", {"text": "hi"}, "u2")]
    )
    agent = guard_agent(Agent(name="notifier", model=model, tools=[send_update]))
    guard = GuardState()
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))

    result = await Runner.run(agent, "Update the customer", context=guard, run_config=config)
    for _ in range(2):  # each call: guardrail before the pause, approval, guardrail again before it runs
        state = result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(agent, state, run_config=config)

    assert sent == ["hi", "hi"]  # 2 allowed: neither call was counted twice
    assert list(guard.turn.counts.values()) == [2]
    assert guard.turn.refusals == 0


# -- approvals and rejections across fresh processes (issue 18) ----------------------------------------------

CHILD = Path(__file__).with_name("approval_child.py")


def resume(tmp_path: Path, saved: Path, decision: str, replies: list[dict[str, Any]], save: Path) -> dict[str, Any]:
    """Resume ``saved`` in a fresh Python process (``approval_child.py``) with the human's ``decision``."""
    script = tmp_path / f"{save.stem}-replies.json"
    script.write_text(json.dumps(replies))
    argv = [
        sys.executable,
        str(CHILD),
        str(saved),
        "--decision",
        decision,
        "--replies",
        str(script),
        "--save",
        str(save),
    ]
    child = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == 0, child.stderr
    report: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return report


async def test_a_rejected_call_counts_an_approved_one_runs_once_a_refused_one_is_never_asked(
    tmp_path: Path,
) -> None:
    # One refund per order and turn. The same paused refund, resumed twice from its saved RunState, each time
    # in a fresh process: once rejected, once approved; either way the model then asks for it again.
    refunds: list[str] = []
    agent = refund_agent(scripted([{"call": ["c1", "A1"]}]), refunds)
    guard = GuardState()
    paused = await Runner.run(agent, "Refund order A1", context=guard)
    assert [item.call_id for item in paused.interruptions] == ["c1"]
    first = tmp_path / "paused-1.json"
    first.write_text(json.dumps(paused.to_state().to_json(context_serializer=context_serializer)))

    # 1. Rejected: c1 never ran, but it counts (per turn, as the call it was): the model's retry (c2) is refused
    #    with its batch and never put to the human; the model reads the refusal and answers.
    replies = [{"call": ["c2", "A1"]}, {"text": "I could not refund A1."}]
    rejected = resume(tmp_path, first, "reject", replies, tmp_path / "paused-2.json")
    assert rejected["decided"] == ["c1"] and rejected["refunds"] == []
    assert rejected["read"][0]["c1"] != "refunded A1"  # the model read the SDK's rejection text
    assert rejected["asked"] == []  # c2 was never put to the human
    assert rejected["read"][1]["c2"].startswith("Refused: you already called send_refund")
    assert rejected["final"] == "I could not refund A1." and rejected["model_calls"] == 2
    assert rejected["counts"] == [2] and rejected["refusals"] == 1
    assert rejected["turn_id"] == guard.turn.id  # the same turn goes on

    # 2. Approved: c1 runs, once. The model asks again (c2): the guard refuses it with its batch, and the SDK
    #    never asks the human about it; the model reads the refusal and answers.
    replies = [{"call": ["c2", "A1"]}, {"text": "Refund sent for A1."}]
    approved = resume(tmp_path, first, "approve", replies, tmp_path / "paused-3.json")
    assert approved["decided"] == ["c1"] and approved["refunds"] == ["A1"]
    assert approved["read"][0]["c1"] == "refunded A1"
    assert approved["asked"] == []  # c2 was never put to the human
    assert approved["read"][1]["c2"].startswith("Refused: you already called send_refund")
    assert approved["final"] == "Refund sent for A1." and approved["model_calls"] == 2
    assert approved["counts"] == [2] and approved["refusals"] == 1
    assert approved["turn_id"] == guard.turn.id
    assert refunds == []  # the pausing process ran nothing


@pytest.mark.parametrize("pre_approval", [False, True], ids=["default", "pre_approval_guardrails"])
async def test_a_call_the_guard_refused_with_its_batch_is_never_asked_about(pre_approval: bool) -> None:
    # Two identical refunds in one response: the batch lets the first through and refuses the second before the
    # SDK asks anyone. Only the first is put to the human, with or without the SDK's pre-approval guardrails.
    refunds: list[str] = []
    model = scripted([{"call": ["c1", "A1"]}, {"call": ["c2", "A1"]}, {"text": "Done."}])
    model.replies = [[*model.replies[0], *model.replies[1]], model.replies[2]]  # type: ignore[list-item,misc]
    agent = refund_agent(model, refunds)
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=pre_approval))
    guard = GuardState()

    paused = await Runner.run(agent, "Refund order A1", context=guard, run_config=config)
    assert [item.call_id for item in paused.interruptions] == ["c1"]
    state = paused.to_state()
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(agent, state, run_config=config)

    assert refunds == ["A1"]
    assert model.outputs_received(1)["c1"] == "refunded A1"
    assert model.outputs_received(1)["c2"].startswith("Refused: you already called send_refund")
    assert result.final_output == "Done." and result.interruptions == []
    assert guard.turn.refusals == 1


async def test_a_call_rejected_in_the_same_process_counts_too() -> None:
    refunds: list[str] = []
    model = scripted([{"call": ["c1", "A1"]}, {"call": ["c2", "A1"]}, {"text": "Done."}])
    agent = refund_agent(model, refunds)
    guard = GuardState()

    paused = await Runner.run(agent, "Refund order A1", context=guard)
    state = paused.to_state()
    state.reject(state.get_interruptions()[0])
    done = await Runner.run(agent, state)

    assert done.interruptions == []  # the retry (c2) was refused with its batch, not asked about
    assert model.outputs_received(2)["c2"].startswith("Refused: you already called send_refund")
    assert refunds == [] and done.final_output == "Done."
    assert list(guard.turn.counts.values()) == [2] and guard.turn.refusals == 1


async def test_a_model_asking_again_for_a_rejected_call_is_refused_without_asking_after_max_calls() -> None:
    """Before, a rejected call did not count: a model that kept asking for it was put to the human forever."""
    refunds: list[str] = []

    @function_tool(needs_approval=True)
    def send_refund(order: str) -> str:
        """Refund an order (a human approves each refund)."""
        refunds.append(order)
        return f"refunded {order}"

    model = ScriptedModel(then=keep_calling("send_refund", {"order": "A1"}))
    agent = guard_agent(Agent(name="refunds", model=model, tools=[send_refund]), max_calls=2, max_refusals=3)
    guard = GuardState()

    result = await Runner.run(agent, "Refund order A1", context=guard)
    asked: list[str] = []
    while result.interruptions and len(asked) < 10:
        state = result.to_state()
        for item in state.get_interruptions():
            asked.append(str(item.call_id))
            state.reject(item)
        result = await Runner.run(agent, state)

    assert asked == ["call_1", "call_2"]  # asked max_calls times, never again
    assert refunds == []
    read = model.outputs_received(model.calls - 1)
    assert [read[f"call_{n}"] for n in (1, 2)] == ["Tool execution was not approved."] * 2  # the SDK's text
    assert all(
        read[f"call_{n}"].startswith("Refused: send_refund with these exact arguments was already rejected 2 times")
        for n in (3, 4)
    )
    assert [event.reason for event in guard.events if event.kind == "refusal"] == [RefusalKind.REJECTED] * 3
    assert result.final_output == STOPPED.replace("track_parcel", "send_refund")
    assert model.calls == 5


async def test_your_own_needs_approval_callable_is_still_asked_for_the_calls_the_guard_lets_through() -> None:
    asked: list[tuple[str, str]] = []
    refunds: list[str] = []

    async def big_orders(context: Any, params: dict[str, Any], call_id: str) -> bool:
        asked.append((params["order"], call_id))
        return str(params["order"]).startswith("B")

    @function_tool(needs_approval=big_orders)
    def send_refund(order: str) -> str:
        """Refund an order (a human approves big ones)."""
        refunds.append(order)
        return f"refunded {order}"

    batch = [tool_call("send_refund", {"order": o}, i) for o, i in (("A1", "c1"), ("B1", "c2"), ("B1", "c3"))]
    model = ScriptedModel(batch, [message("Done.")])
    agent = guard_agent(Agent(name="refunds", model=model, tools=[send_refund]), count="per_turn", max_calls=1)

    paused = await Runner.run(agent, "Refund A1 and B1", context=GuardState())

    assert refunds == ["A1"]  # a small order: your callable said no approval, so it ran
    assert [item.call_id for item in paused.interruptions] == ["c2"]  # c3, a refused repeat, is not put to you
    assert asked == [("A1", "c1"), ("B1", "c2")]  # your callable, with the SDK's arguments; never for c3
    assert guard_agent(agent).tools[0].needs_approval.original is big_orders  # type: ignore[union-attr]
