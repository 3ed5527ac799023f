"""Parallel calls of one response, concurrent runs of one agent, structured output."""

from __future__ import annotations

import asyncio

import pytest
from pai_parcels import SEED_004, Carrier, guarded, status
from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, Tool
from repeat_hooks_pydantic_ai import RepeatGuard, RepeatGuardStopped, refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling, steps

from repeat_hooks import Policy, StopReason


class Delivery(BaseModel):
    parcel_id: str
    eta: str


@pytest.mark.parametrize("parallel", [3, 5])
async def test_parallel_identical_calls_exactly_the_excess_is_refused(parallel: int, carrier: Carrier) -> None:
    calls = [("track_parcel", {"parcel_id": "FR-7731"})] * parallel
    agent, model = guarded(steps(calls, "FR-7731 is in Lyon."), carrier, Policy(max_calls=2, max_refusals=None))
    result = await agent.run("Where is FR-7731?")
    assert result.output == "FR-7731 is in Lyon."
    assert carrier.calls == ["FR-7731", "FR-7731"]  # exactly max_calls ran
    returns = model.tool_returns(1)
    assert len(returns) == parallel
    assert returns.count(status("FR-7731")) == 2
    refusals = [text for text in returns if text != status("FR-7731")]
    assert len(refusals) == parallel - 2 and all(text.startswith("Refused") for text in refusals)


@pytest.mark.parametrize("seconds", [0.0, 0.05])
async def test_one_response_is_decided_as_one_batch_whatever_the_tools_timing(seconds: float) -> None:
    """A, B, C, A, A in one response, with instant or slow tools: the 3rd A is refused either way (no
    result of the batch restarts another call's count, though B and C may change state)."""
    ran: list[str] = []

    def tool(name: str) -> Tool[None]:
        async def run(parcel_id: str) -> str:
            if seconds:  # an instant tool never yields: it ends before the next call of the batch starts
                await asyncio.sleep(seconds)
            ran.append(name)
            return f"{name}: {parcel_id} ok"

        return Tool(run, name=name)

    a, b, c = (
        ("track_parcel", {"parcel_id": "FR-1"}),
        ("parcel_history", {"parcel_id": "FR-1"}),
        ("carrier_status", {"parcel_id": "FR-1"}),
    )
    model = ScriptedModel(steps([a, b, c, a, a], "Done."))
    agent = Agent(
        model,
        tools=[tool("track_parcel"), tool("parcel_history"), tool("carrier_status")],
        capabilities=[RepeatGuard()],
    )
    result = await agent.run("Check everything on FR-1")
    assert result.output == "Done."
    assert sorted(ran) == ["carrier_status", "parcel_history", "track_parcel", "track_parcel"]
    assert [tool for tool, _ in refusals_of(result)] == ["track_parcel"]
    assert sum(text.startswith("Refused") for text in model.tool_returns(1)) == 1


async def test_parallel_calls_of_different_parcels_all_run(carrier: Carrier) -> None:
    calls = [("track_parcel", {"parcel_id": f"FR-{n}"}) for n in range(6)]
    agent, _ = guarded(steps(calls, "All in transit."), carrier, Policy(max_calls=1))
    result = await agent.run("Where are my six parcels?")
    assert result.output == "All in transit."
    assert sorted(carrier.calls) == [f"FR-{n}" for n in range(6)]


async def test_eight_concurrent_runs_of_one_agent_keep_separate_counts() -> None:
    carrier = Carrier()
    stuck = [f"P-{n}" for n in range(8)]

    # One agent, one RepeatGuard; each run is stuck on its own parcel (its own scripted model).
    model = ScriptedModel(lambda step: [])
    agent = Agent(model, tools=[carrier.tool], capabilities=[RepeatGuard(SEED_004)])

    async def one(parcel: str) -> str:
        run_model = ScriptedModel(keep_calling("track_parcel", {"parcel_id": parcel}))
        result = await agent.run(f"Keep checking {parcel}", model=run_model)
        stop = stop_of(result)
        assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
        assert run_model.calls == 5
        return result.output

    outputs = await asyncio.gather(*(one(parcel) for parcel in stuck))
    assert len(set(outputs)) == 1
    # Every run let its own parcel through exactly twice: no run's counts leaked into another's.
    assert sorted(carrier.calls) == sorted(stuck * 2)
    assert model.calls == 0


async def test_structured_output_raises_with_the_stop_and_the_messages(carrier: Carrier) -> None:
    agent, model = guarded(keep_calling("track_parcel", {"parcel_id": "FR-7731"}), carrier, output_type=Delivery)
    with pytest.raises(RepeatGuardStopped) as raised:
        await agent.run("Keep checking FR-7731")
    error = raised.value
    assert error.stop.reason is StopReason.IGNORED_REFUSALS
    assert stop_of(error) == error.stop
    assert error.stop.message in str(error)
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert model.calls == 5
    # The messages so far continue the conversation: the next run is a new turn.
    follow_up = ScriptedModel(steps('{"parcel_id": "FR-7731", "eta": "tomorrow"}'))
    later = await agent.run("Just tell me the ETA", message_history=error.messages, model=follow_up)
    assert later.output == Delivery(parcel_id="FR-7731", eta="tomorrow")
    sent = follow_up.requests[0]
    # The history went to the model (the new prompt joins the trailing request of tool returns).
    assert sent[: len(error.messages) - 1] == error.messages[:-1]
    assert "Just tell me the ETA" in str(sent[-1])


async def test_a_union_with_str_gets_the_stop_message_as_output(carrier: Carrier) -> None:
    agent, _ = guarded(keep_calling("track_parcel", {"parcel_id": "FR-7731"}), carrier, output_type=[Delivery, str])
    result = await agent.run("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None
    assert result.output == stop.message


async def test_a_run_level_guard_replaces_the_agents(carrier: Carrier) -> None:
    agent, model = guarded(keep_calling("track_parcel", {"parcel_id": "FR-7731"}), carrier)
    result = await agent.run("Keep checking", capabilities=[RepeatGuard(Policy(max_calls=1, max_refusals=0))])
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.REPEATED_CALL
    assert carrier.calls == ["FR-7731"]
    assert model.calls == 2


async def test_an_approved_call_runs_in_the_resumed_run(carrier: Carrier) -> None:
    """More approval rounds: ``test_resumes.py``."""
    refunded: list[str] = []
    model = ScriptedModel(steps([("refund", {"order": "A-1"})], "Refunded."))
    agent = Agent(model, output_type=[str, DeferredToolRequests], capabilities=[RepeatGuard(Policy(max_calls=1))])

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        refunded.append(order)
        return f"{order} refunded"

    first = await agent.run("Refund A-1")
    assert isinstance(first.output, DeferredToolRequests) and refunded == []
    approvals = DeferredToolResults(approvals={c.tool_call_id: True for c in first.output.approvals})
    resumed = await agent.run(message_history=first.all_messages(), deferred_tool_results=approvals)
    assert resumed.output == "Refunded."
    assert refunded == ["A-1"] and refusals_of(resumed) == []
