"""A human reviewer next to the guard (``HumanInTheLoopMiddleware`` as it comes, issue 18), on the real
``create_agent`` loop, in both interrupt modes and both middleware orders: nobody is asked about a call the
guard refused; an edited call is decided afresh on its new arguments; a rejected call did not run but counts
as asked for (rejected ``max_calls`` times, it is refused without asking anyone); resuming
(``Command(resume=...)``) continues the same turn's counts. The order that cannot work (a per-call review
listed after the guard) fails loudly before anyone is asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_parcels import ARGS, IN_TRANSIT, REFUSAL, STOPPED, USER, Carrier, parcel_agent, seed_004, thread
from langgraph.types import Command
from repeat_hooks_langchain import Policy, RepeatGuardMiddleware, guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message, keep_calling, steps

from repeat_hooks import GuardSetupError

SETUPS = pytest.mark.parametrize(
    ("mode", "review_first"),
    [("batched", True), ("batched", False), ("per_call", True)],
    ids=["batched-review-first", "batched-guard-first", "per_call-review-first"],
)
"""Every setup that works: a per-call review must be listed before the guard (the 4th setup fails loudly)."""
Decide = Callable[[dict[str, Any]], dict[str, Any]]
"""The reviewer: a decision for the call it is shown (``{"name", "args"}``)."""


def approve(call: dict[str, Any]) -> dict[str, Any]:
    return {"type": "approve"}


def agent_with_review(
    model: ScriptedChatModel,
    carrier: Carrier,
    *,
    mode: str,
    review_first: bool,
    policy: Policy | None = None,
) -> Any:
    # LangChain's stock setup, nothing of the guard's in it.
    review = HumanInTheLoopMiddleware(interrupt_on={"track_parcel": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    guard = RepeatGuardMiddleware(policy or seed_004())
    return parcel_agent(model, carrier, middleware=[review, guard] if review_first else [guard, review])


def run_reviewed(agent: Any, decide: Decide, config: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One turn, answering every review with ``decide``; the result and every call the reviewer was shown."""
    config = config or thread("t1")
    shown: list[dict[str, Any]] = []
    result = agent.invoke(USER, config)
    while result.get("__interrupt__"):
        assert len(shown) < 20, "the turn never ended"
        batched: dict[str, Any] = {}
        answers: dict[str, Any] = {}
        for interrupt in result["__interrupt__"]:
            value = interrupt.value
            if value.get("type") == "tool_approval":  # per_call: one interrupt per call, answered by its id
                call = {"name": value["name"], "args": value["args"]}
                shown.append(call)
                answers[interrupt.id] = decide(call)
            else:  # batched: one interrupt per response, decisions by position
                calls = [{"name": a["name"], "args": a["args"]} for a in value["action_requests"]]
                shown.extend(calls)
                batched = {"decisions": [decide(call) for call in calls]}
        result = agent.invoke(Command(resume=answers or batched), config)
    return result, shown


def tool_texts(result: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)]


@SETUPS
def test_the_reviewer_is_asked_only_about_calls_the_guard_lets_run(
    mode: str, review_first: bool, carrier: Carrier
) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = agent_with_review(model, carrier, mode=mode, review_first=review_first)

    result, shown = run_reviewed(agent, approve)

    # Approved 2, and both ran; the 3 refused calls were never shown to the reviewer.
    assert shown == [{"name": "track_parcel", "args": ARGS}] * 2 and carrier.calls == ["FR-7731", "FR-7731"]
    assert tool_texts(result) == [IN_TRANSIT, IN_TRANSIT, REFUSAL, REFUSAL, REFUSAL]
    assert [model.tool_results(call) for call in range(1, 5)] == [[IN_TRANSIT], [IN_TRANSIT], [REFUSAL], [REFUSAL]]
    assert model.calls == 5 and result["messages"][-1].content == STOPPED
    state = guard_state_of(result)
    assert (state.turn.number, state.turn.model_calls, state.turn.refusals) == (1, 5, 3)  # resumes: one turn


@SETUPS
def test_in_a_parallel_batch_the_reviewer_sees_only_the_calls_the_guard_lets_run(
    mode: str, review_first: bool, carrier: Carrier
) -> None:
    batch = call_message(*[("track_parcel", ARGS)] * 3)
    model = ScriptedChatModel(then=steps(batch, then=lambda m: AIMessage(content="In transit.")))
    agent = agent_with_review(model, carrier, mode=mode, review_first=review_first, policy=Policy(max_calls=2))

    result, shown = run_reviewed(agent, approve)

    assert len(shown) == 2 and carrier.calls == ["FR-7731", "FR-7731"]
    assert sorted(text[:8] for text in tool_texts(result)) == sorted([IN_TRANSIT[:8]] * 2 + ["Refused:"])
    assert result["messages"][-1].content == "In transit."


def test_a_per_call_review_listed_after_the_guard_fails_before_anyone_is_asked(carrier: Carrier) -> None:
    # Listed after the guard, a per-call review runs inside the guard's tool-call hook: an edit would run
    # undecided. The first review raises, naming the order that works; nothing ran, nobody was asked.
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = agent_with_review(model, carrier, mode="per_call", review_first=False)

    with pytest.raises(GuardSetupError, match=r"middleware=\[HumanInTheLoopMiddleware\(interrupt_on=\{\.\.\.\}, "):
        agent.invoke(USER, thread("t1"))
    assert carrier.calls == []


@SETUPS
def test_an_edited_call_runs_on_its_new_arguments_and_the_counts_follow_what_ran(
    mode: str, review_first: bool, carrier: Carrier
) -> None:
    # The reviewer turns the model's FR-7731 into FR-9000: FR-9000 runs (decided afresh), and FR-7731, which
    # never ran, counts as rejected once, before FR-9000 ran (a change). When the model asks for FR-9000, the
    # call that ran, the guard refuses it and nobody is asked; when it asks for FR-7731, it is asked and runs.
    nine = {"tracking_number": "FR-9000"}
    model = ScriptedChatModel(
        then=steps(
            call_message(("track_parcel", ARGS)),
            call_message(("track_parcel", nine)),
            call_message(("track_parcel", ARGS)),
            then=lambda messages: AIMessage(content="Done."),
        )
    )
    agent = agent_with_review(model, carrier, mode=mode, review_first=review_first, policy=Policy(max_calls=1))
    asked = 0

    def edit_the_first(call: dict[str, Any]) -> dict[str, Any]:
        nonlocal asked
        asked += 1
        if asked > 1:
            return {"type": "approve"}
        return {"type": "edit", "edited_action": {"name": "track_parcel", "args": nine}}

    result, shown = run_reviewed(agent, edit_the_first)

    assert shown == [{"name": "track_parcel", "args": ARGS}] * 2
    assert carrier.calls == ["FR-9000", "FR-7731"]
    first, second, third = model.tool_results(1), model.tool_results(2), model.tool_results(3)
    assert "Executed instead: track_parcel" in first[0] and first[0].endswith("FR-9000: in transit, hub Lyon")
    assert len(second) == 1 and second[0].startswith("Refused: you already called track_parcel")
    assert third == [IN_TRANSIT]
    assert result["messages"][-1].content == "Done."
    assert guard_state_of(result).turn.refusals == 1


@SETUPS
def test_an_edit_to_a_repeat_is_refused_on_its_new_arguments(mode: str, review_first: bool, carrier: Carrier) -> None:
    other = call_message(("track_parcel", {"tracking_number": "FR-1"}))
    model = ScriptedChatModel(
        then=steps(call_message(("track_parcel", ARGS)), other, other, then=lambda m: AIMessage(content="Done."))
    )
    agent = agent_with_review(model, carrier, mode=mode, review_first=review_first, policy=Policy(max_calls=1))
    asked = 0

    def edit_the_second(call: dict[str, Any]) -> dict[str, Any]:
        nonlocal asked
        asked += 1
        if asked != 2:
            return {"type": "approve"}
        return {"type": "edit", "edited_action": {"name": "track_parcel", "args": ARGS}}  # back to FR-7731

    result, shown = run_reviewed(agent, edit_the_second)

    # FR-7731 ran once; the reviewer turned FR-1 into FR-7731 again: refused on those arguments, not run. The
    # model reads that the reviewer's replacement repeats a call that ran, not that it called it itself.
    assert carrier.calls == ["FR-7731"]
    (edited,) = model.tool_results(2)
    # (after LangChain's "Executed instead: ..." notice, where its hook wraps the guard's)
    assert edited.endswith(
        "Refused: the reviewer's replacement call did not run: it repeats a call that already ran, and nothing "
        "has changed since that could change its result. Neither your call nor the replacement ran; use the "
        "earlier results, or give your answer with what you know."
    )
    assert "you already called" not in edited
    # FR-1, replaced by the reviewer, counts as rejected: asked for again, it is refused without asking anyone.
    (again,) = model.tool_results(3)
    assert again.startswith("Refused: track_parcel with these exact arguments was already rejected once")
    assert len(shown) == 2 and result["messages"][-1].content == "Done."


@SETUPS
def test_a_call_the_reviewer_rejects_did_not_run_and_counts_as_asked(
    mode: str, review_first: bool, carrier: Carrier
) -> None:
    model = ScriptedChatModel(
        then=steps(*[keep_calling("track_parcel", ARGS)] * 3, then=lambda m: AIMessage(content="OK, in transit."))
    )
    agent = agent_with_review(model, carrier, mode=mode, review_first=review_first)
    asked = 0

    def reject_the_first(call: dict[str, Any]) -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"type": "reject", "message": "Not now."} if asked == 1 else {"type": "approve"}

    result, shown = run_reviewed(agent, reject_the_first)

    # Seed 004 lets 2 calls a turn through: the rejected one did not run but was asked for, so only the next
    # one runs, and the third is refused without asking anyone.
    assert carrier.calls == ["FR-7731"] and len(shown) == 2
    texts = tool_texts(result)
    assert texts == ["User rejected the tool call for `track_parcel` with reason: Not now.", IN_TRANSIT, REFUSAL]
    assert result["messages"][-1].content == "OK, in transit."
    assert stop_of(result) is None
    assert (guard_state_of(result).turn.refusals, guard_state_of(result).turn.number) == (1, 1)


@SETUPS
def test_a_refund_rejected_max_calls_times_is_refused_without_asking_the_reviewer_again(
    mode: str, review_first: bool, carrier: Carrier
) -> None:
    # The model asks for the same call forever and the reviewer rejects it every time: after max_calls (2)
    # rejections the guard refuses it without putting it to the reviewer, and the turn ends.
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = agent_with_review(model, carrier, mode=mode, review_first=review_first, policy=Policy())

    result, shown = run_reviewed(agent, lambda call: {"type": "reject", "message": "No."})

    assert shown == [{"name": "track_parcel", "args": ARGS}] * 2 and carrier.calls == []
    rejected = "User rejected the tool call for `track_parcel` with reason: No."
    refusal = (
        "Refused: track_parcel with these exact arguments was already rejected 2 times before it ran (by a "
        "reviewer or a guardrail), and nothing has changed since. Do not ask for it again: try something "
        "different, or give your answer with what you know."
    )
    assert tool_texts(result) == [rejected, rejected, refusal, refusal, refusal]
    assert "__interrupt__" not in result
    assert result["messages"][-1].content == STOPPED and stop_of(result) is not None


async def test_under_ainvoke_a_per_call_review_asks_only_about_calls_the_guard_lets_run(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = agent_with_review(model, carrier, mode="per_call", review_first=True)
    config = thread("t1")

    result = await agent.ainvoke(USER, config)
    shown = 0
    while result.get("__interrupt__"):
        shown += len(result["__interrupt__"])
        answers = {interrupt.id: {"type": "approve"} for interrupt in result["__interrupt__"]}
        result = await agent.ainvoke(Command(resume=answers), config)

    assert (shown, carrier.calls, result["messages"][-1].content) == (2, ["FR-7731", "FR-7731"], STOPPED)


async def test_under_ainvoke_a_per_call_review_after_the_guard_fails_loudly(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = agent_with_review(model, carrier, mode="per_call", review_first=False)

    with pytest.raises(GuardSetupError, match="list RepeatGuardMiddleware after it"):
        await agent.ainvoke(USER, thread("t1"))
    assert carrier.calls == []
