"""A turn is a user message: approval rounds, ``deferred_tool_results=`` and ``message_history=`` resumes
continue the same turn's counts, rebuilt from pydantic-ai's own history (issue 18).

Every test drives pydantic-ai's real agent graph (a ``ScriptedModel`` at its model seam) and counts how
many times the tool really ran.
"""

from __future__ import annotations

from typing import Any

import pytest
from pai_parcels import Carrier, guarded, status
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    CallToolsNode,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RunContext,
    Tool,
    ToolApproved,
    ToolDenied,
    ToolFailed,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from repeat_hooks_pydantic_ai import RepeatGuard, RepeatGuardStopped, refusals_of, stop_of
from repeat_hooks_pydantic_ai.state import TURN_KEY
from repeat_hooks_pydantic_ai.testing import ScriptedModel, answer, keep_calling, steps

from repeat_hooks import MemoryStore, Policy, RefusalKind, StopReason

PARCEL = {"parcel_id": "FR-7731"}
REFUND = ("refund", {"order": "A-1"})


class Refunds:
    """A payment API behind an approval-required ``refund`` tool: records every refund that reached it."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def agent(self, script: Any, policy: Policy, **kwargs: Any) -> tuple[Agent[None, Any], ScriptedModel]:
        model = ScriptedModel(script)

        def refund(order: str) -> str:
            """Refund an order."""
            self.sent.append(order)
            return f"{order} refunded"

        agent: Agent[None, Any] = Agent(
            model,
            tools=[Tool(refund, requires_approval=True)],
            output_type=[str, DeferredToolRequests],
            capabilities=[RepeatGuard(policy, **kwargs)],
        )
        return agent, model


async def approval_rounds(
    agent: Agent[None, Any], rounds: int, *, approve: bool = True
) -> tuple[Any, list[list[str]], int]:
    """Run "Refund A-1", then resume with every asked call approved (or denied), for at most ``rounds``
    rounds; returns the last result, the call ids a person was asked about in each round, and the runs."""
    result = await agent.run("Refund A-1")
    asked: list[list[str]] = []
    runs = 1
    while isinstance(result.output, DeferredToolRequests) and len(asked) < rounds:
        ids = [call.tool_call_id for call in result.output.approvals]
        asked.append(ids)
        answer: dict[str, bool | ToolDenied] = {i: approve for i in ids}
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=DeferredToolResults(approvals=answer)
        )
        runs += 1
    return result, asked, runs


# -- approval rounds --------------------------------------------------------------------------------------


async def test_six_approval_rounds_send_the_refund_once() -> None:
    """The issue's figure: Policy(max_calls=1) let one refund go out 6 times over 6 approval rounds."""
    refunds = Refunds()
    agent, model = refunds.agent(keep_calling(*REFUND), Policy(max_calls=1))
    result, asked, runs = await approval_rounds(agent, rounds=6)
    assert refunds.sent == ["A-1"]  # approved once, run once
    assert asked == [["call_0_0"]]  # the refused repeats were never put to a person
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result.output == stop.message
    assert runs == 2
    # The model read the refund's result once, then a refusal for each repeat (3, then the turn ended).
    assert [tool for tool, _ in refusals_of(result.all_messages())] == ["refund"] * 3
    assert model.calls == 4


async def test_an_approved_call_runs_once_and_counts_once() -> None:
    """Approved, it runs in the resumed run; the next repeat of the same refund is refused there."""
    refunds = Refunds()
    agent, model = refunds.agent(steps([REFUND], [REFUND], "Refunded."), Policy(max_calls=1))
    result, asked, _ = await approval_rounds(agent, rounds=6)
    assert result.output == "Refunded."
    assert refunds.sent == ["A-1"] and asked == [["call_0_0"]]
    assert [text[:7] for text in model.tool_returns(1)] == ["A-1 ref"]
    assert model.tool_returns(2)[0].startswith("Refused")


async def test_a_refused_call_is_decided_before_anyone_is_asked() -> None:
    """Two refunds of A-1 in one response with max_calls=1: one goes to a person, the other is refused
    (answered with its refusal) without asking."""
    refunds = Refunds()
    agent, model = refunds.agent(steps([REFUND, REFUND], "Done."), Policy(max_calls=1))
    result, asked, _ = await approval_rounds(agent, rounds=3)
    assert asked == [["call_0_0"]]
    assert refunds.sent == ["A-1"]
    assert result.output == "Done."
    returns = model.tool_returns(1)
    assert returns[0] == "A-1 refunded" and returns[1].startswith("Refused")


async def test_a_denied_call_never_ran_but_counts_as_rejected() -> None:
    """Denied, the refund never ran, but it counts toward its repeats: with ``max_calls=1`` the model's retry of
    the same refund is refused (``RefusalKind.REJECTED``) without asking the person again."""
    refunds = Refunds()
    agent, model = refunds.agent(steps([REFUND], [REFUND], "Done."), Policy(max_calls=1))
    first = await agent.run("Refund A-1")
    assert isinstance(first.output, DeferredToolRequests)
    denied = DeferredToolResults(approvals={"call_0_0": ToolDenied("Not this one.")})
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=denied)
    assert second.output == "Done."  # the retry was not put to the person
    assert refunds.sent == []
    assert model.tool_returns(1) == ["Not this one."]
    (refused,) = model.tool_returns(2)
    assert refused.startswith("Refused: refund with these exact arguments was already rejected once before it ran")
    assert [refusal.reason for _, refusal in refusals_of(second.all_messages())] == [RefusalKind.REJECTED]


async def test_a_denied_call_leaves_room_for_a_retry_below_max_calls() -> None:
    """With ``max_calls=2`` the retry after one denial is asked about again and runs once approved."""
    refunds = Refunds()
    agent, _ = refunds.agent(steps([REFUND], [REFUND], "Done."), Policy(max_calls=2))
    first = await agent.run("Refund A-1")
    denied = DeferredToolResults(approvals={"call_0_0": ToolDenied("Not this one.")})
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=denied)
    assert isinstance(second.output, DeferredToolRequests)
    assert [call.tool_call_id for call in second.output.approvals] == ["call_1_0"]
    approved = DeferredToolResults(approvals={"call_1_0": True})
    third = await agent.run(message_history=second.all_messages(), deferred_tool_results=approved)
    assert third.output == "Done."
    assert refunds.sent == ["A-1"]
    assert refusals_of(third.all_messages()) == []


async def test_a_tool_asking_for_approval_itself_runs_once_when_approved() -> None:
    """A tool body raising ``ApprovalRequired`` is decided before it runs, and runs once when approved."""
    sent: list[str] = []

    def refund(ctx: RunContext[None], order: str) -> str:
        """Refund an order (large ones need a person's approval)."""
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        sent.append(order)
        return f"{order} refunded"

    model = ScriptedModel(keep_calling(*REFUND))
    agent: Agent[None, Any] = Agent(
        model,
        tools=[Tool(refund)],
        output_type=[str, DeferredToolRequests],
        capabilities=[RepeatGuard(Policy(max_calls=1))],
    )
    result, asked, _ = await approval_rounds(agent, rounds=6)
    assert sent == ["A-1"] and asked == [["call_0_0"]]
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


# -- message_history resumes ------------------------------------------------------------------------------


@pytest.mark.parametrize("instructions", [None, "You track parcels."])
async def test_resuming_a_stopped_run_stays_stopped(instructions: str | None, carrier: Carrier) -> None:
    """The issue's figure: 3 ``message_history=`` resumes of a stopped run allowed 8 real calls."""
    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier, instructions=instructions)
    result = await agent.run("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    history = result.all_messages()
    for _ in range(3):
        resumed = await agent.run(message_history=history)
        assert resumed.output == stop.message and stop_of(resumed) == stop
        history = resumed.all_messages()
    assert carrier.calls == ["FR-7731"] * 2
    assert model.calls == 5  # no resume reached the model


async def test_resuming_a_stopped_structured_run_raises_again(carrier: Carrier) -> None:
    """``RepeatGuardStopped.messages`` resumed (as its docstring suggests) is the same turn: stopped."""

    class Delivery(BaseModel):
        parcel_id: str
        eta: str

    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier, output_type=Delivery)
    with pytest.raises(RepeatGuardStopped) as raised:
        await agent.run("Keep checking FR-7731")
    messages = raised.value.messages
    for _ in range(3):
        with pytest.raises(RepeatGuardStopped) as again:
            await agent.run(message_history=messages)
        assert again.value.stop == raised.value.stop
        messages = again.value.messages
    assert carrier.calls == ["FR-7731"] * 2
    assert model.calls == 5


async def test_a_new_user_message_starts_a_new_turn(carrier: Carrier) -> None:
    """A prompt is a new user message: the new turn counts afresh (the seed-004 story's second turn)."""
    agent, _ = guarded(keep_calling("track_parcel", PARCEL), carrier)
    first = await agent.run("Keep checking FR-7731")
    second = await agent.run("Try once more", message_history=first.all_messages())
    assert stop_of(second) is not None
    assert carrier.calls == ["FR-7731"] * 4


async def pause_after(agent: Agent[None, Any], tool_steps: int) -> list[ModelMessage]:
    """Run the turn with ``iter`` and stop after ``tool_steps`` tool steps: the history so far.

    Paused at a ``CallToolsNode``, the history holds every response and the results of the calls before
    it (pydantic-ai's next ``ModelRequestNode`` carries the newest results outside the history until it
    runs, so a pause there would run those calls again on resume, guard or not).
    """
    seen = 0
    async with agent.iter("Keep checking FR-7731") as run:
        async for node in run:
            if isinstance(node, CallToolsNode):
                seen += 1
                if seen == tool_steps:
                    break
        return run.all_messages()


@pytest.mark.parametrize("tool_steps", [1, 2, 3, 4, 5])
async def test_a_paused_run_resumed_anywhere_decides_as_an_uninterrupted_one(tool_steps: int) -> None:
    reference = Carrier()
    agent, model = guarded(keep_calling("track_parcel", PARCEL), reference)
    whole = await agent.run("Keep checking FR-7731")

    carrier = Carrier()
    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier)
    history = await pause_after(agent, tool_steps)
    resumed = await agent.run(message_history=history)
    assert carrier.calls == reference.calls == ["FR-7731"] * 2
    assert resumed.output == whole.output
    assert stop_of(resumed) == stop_of(whole)
    assert model.calls == 5
    assert [r.message for _, r in refusals_of(resumed.all_messages())] == [
        r.message for _, r in refusals_of(whole.all_messages())
    ]


async def test_a_history_saved_as_json_and_loaded_resumes_the_same_turn(carrier: Carrier) -> None:
    """The turn's id rides in each response's ``metadata``, which pydantic-ai serializes."""
    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier)
    history = await pause_after(agent, 2)
    responses = [m for m in history if isinstance(m, ModelResponse)]
    assert {(m.metadata or {}).get(TURN_KEY) for m in responses} == {history[0].run_id}
    saved = ModelMessagesTypeAdapter.dump_json(history)
    resumed = await agent.run(message_history=ModelMessagesTypeAdapter.validate_json(saved))
    assert carrier.calls == ["FR-7731"] * 2
    assert stop_of(resumed) is not None and model.calls == 5


async def test_a_history_no_guard_stamped_resumes_from_its_last_prompt(carrier: Carrier) -> None:
    """A history from an unguarded agent: the turn starts after its last user prompt."""
    plain = Agent(ScriptedModel(steps([("track_parcel", PARCEL)], [("track_parcel", PARCEL)])), tools=[carrier.tool])
    async with plain.iter("Keep checking FR-7731") as run:
        async for node in run:
            if isinstance(node, CallToolsNode) and carrier.calls:
                break
        history = run.all_messages()
    assert carrier.calls == ["FR-7731"]  # paused with the second call pending
    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier, Policy(max_calls=2, max_refusals=1))
    resumed = await agent.run(message_history=history)
    # The pending call runs (the turn's 2nd), the earlier one counted: the next is refused, and the turn ends.
    assert carrier.calls == ["FR-7731"] * 2
    assert model.calls == 1 and model.tool_returns(0)[0] == status("FR-7731")
    stop = stop_of(resumed)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


# -- outcomes rebuilt as the live run recorded them ------------------------------------------------------


def flaky(how: str, calls: list[str]) -> Tool[None]:
    """A ``check_label`` tool failing the way ``how`` says."""

    async def check_label(label_id: str) -> str:
        """Validate a shipping label."""
        calls.append(label_id)
        if how == "retry":
            raise ModelRetry("label service timed out, try again")
        if how == "failed":
            raise ToolFailed("label service is down")
        return "ERROR: label service is down"

    return Tool(check_label, name="check_label", max_retries=10)


@pytest.mark.parametrize("how", ["retry", "failed", "returned", "malformed"])
@pytest.mark.parametrize("tool_steps", [1, 2, 3])
async def test_failures_in_a_row_count_across_a_resume(how: str, tool_steps: int) -> None:
    """Errors in a row (ModelRetry, ToolFailed, an error result, malformed arguments) are rebuilt from the
    history as the live run counted them: the turn still ends at the 3rd."""
    calls: list[str] = []
    arguments: Any = '{"label_id": ' if how == "malformed" else {"label_id": "L-1"}
    script = steps(*([("check_label", {"label_id": f"L-{n}"} if how != "malformed" else arguments)] for n in range(8)))
    policy = Policy(max_calls=None, max_errors_in_a_row=3)
    failure = (lambda result: str(result).startswith("ERROR")) if how == "returned" else None
    model = ScriptedModel(script)
    agent: Agent[None, Any] = Agent(
        model, tools=[flaky(how, calls)], capabilities=[RepeatGuard(policy, is_failure=failure)]
    )
    seen = 0
    async with agent.iter("Check my labels") as run:
        async for node in run:
            if isinstance(node, CallToolsNode):
                seen += 1
                if seen == tool_steps:
                    break
        history = run.all_messages()
    resumed = await agent.run(message_history=history)
    stop = stop_of(resumed)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert model.calls == 3
    assert len(calls) == (0 if how == "malformed" else 3)


async def test_progress_is_rebuilt_from_the_results_the_model_read(carrier: Carrier) -> None:
    """``count="progress"`` (the default): the same result twice, then a refusal, across a resume."""
    agent, model = guarded(keep_calling("track_parcel", PARCEL), carrier, Policy())
    history = await pause_after(agent, 2)
    resumed = await agent.run(message_history=history)
    assert carrier.calls == ["FR-7731"] * 2
    returns = [text for n in range(model.calls) for text in model.tool_returns(n)]
    assert returns[:2] == [status("FR-7731")] * 2 and returns[2].startswith("Refused")
    assert stop_of(resumed) is not None


@pytest.mark.parametrize("store", [None, "memory"])
async def test_a_call_a_person_edits_is_decided_on_its_new_arguments(store: str | None) -> None:
    """Approved with other arguments (``override_args``), the edited refund is what ran and what counts: the
    model's later refund of the same order is refused without asking; the original call, which the person
    edited away, did not run but counts as rejected (``Policy.record_rejection``), so it is refused too. The
    same with the counts in a store (the resumed run reads them there, the edit found in the history)."""
    refunds = Refunds()
    script = steps([REFUND], [("refund", {"order": "B-2"})], [REFUND], "Done.")
    keep = {"store": MemoryStore()} if store else {}
    agent, model = refunds.agent(script, Policy(max_calls=1, count="per_turn"), **keep)
    first = await agent.run("Refund A-1", conversation_id="conv-1")  # (a store= needs it named)
    assert isinstance(first.output, DeferredToolRequests)
    edited = DeferredToolResults(approvals={"call_0_0": ToolApproved(override_args={"order": "B-2"})})
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=edited)
    # B-2 again, then A-1 again: both refused, neither asked about.
    assert second.output == "Done."
    assert refunds.sent == ["B-2"]
    assert model.tool_returns(1) == ["B-2 refunded"]
    assert model.tool_returns(2)[0].startswith("Refused") and model.tool_returns(3)[0].startswith("Refused")


@pytest.mark.parametrize("store", [None, "memory"])
async def test_the_call_a_person_edited_away_counts_as_rejected(store: str | None) -> None:
    """A refund edited from A-1 to B-2: A-1 never ran, and counts as a rejected call (the same whether the counts
    live in the run's messages or in a store): the model asking for A-1 again is refused as rejected."""
    refunds = Refunds()
    keep = {"store": MemoryStore()} if store else {}
    agent, _ = refunds.agent(steps([REFUND], [REFUND], "Done."), Policy(max_calls=1, read_only={"refund"}), **keep)
    first = await agent.run("Refund A-1", conversation_id="conv-1")  # (a store= needs it named)
    edited = DeferredToolResults(approvals={"call_0_0": ToolApproved(override_args={"order": "B-2"})})
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=edited)
    assert refunds.sent == ["B-2"] and second.output == "Done."
    assert [refusal.reason for _, refusal in refusals_of(second)] == [RefusalKind.REJECTED]


async def test_a_streamed_turn_is_found_though_its_final_response_is_not_stamped(carrier: Carrier) -> None:
    """``run_stream`` keeps its final response as streamed (the guard's stamp is not on it): a resume after
    it continues that turn (found by its prompt), not the stopped turn before it."""
    stuck = [[("track_parcel", PARCEL)]] * 5
    script = steps(*stuck, "(the guard's stop)", "FR-7731 is in Lyon.", then=answer("Still in Lyon."))
    agent, model = guarded(script, carrier, instructions="You track parcels.")
    first = await agent.run("Keep checking FR-7731")
    assert stop_of(first) is not None
    async with agent.run_stream("And now?", message_history=first.all_messages()) as stream:
        assert await stream.get_output() == "FR-7731 is in Lyon."
    resumed = await agent.run(message_history=stream.all_messages())
    assert resumed.output == "Still in Lyon." and stop_of(resumed) is None
    assert model.calls == 7
