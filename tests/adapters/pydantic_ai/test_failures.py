"""Tool outcomes: ModelRetry, ToolFailed, exceptions, error results, and malformed arguments."""

from __future__ import annotations

from typing import Any

import pytest
from pai_parcels import Carrier, guarded
from pydantic_ai import ModelRetry, Tool, ToolFailed
from pydantic_ai.messages import ToolReturn
from repeat_hooks_pydantic_ai import RepeatGuard, refusals_of, stop_of
from repeat_hooks_pydantic_ai.testing import steps

from repeat_hooks import Policy, StopReason

ERRORS = Policy(max_calls=None, max_errors_in_a_row=3)
"""No repeat limit here: only errors in a row end the turn."""


class Outage:
    """A ``check_label`` tool that fails the way ``how`` says, counting the calls that reached it."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.calls: list[str] = []

    async def check_label(self, label_id: str) -> str:
        """Validate a shipping label."""
        self.calls.append(label_id)
        if self.how == "retry":
            raise ModelRetry("label service timed out, try again")
        if self.how == "failed":
            raise ToolFailed("label service is down")
        if self.how == "returned":
            return "ERROR: label service is down"
        raise ConnectionError("label service unreachable")

    def tool(self) -> Tool[Any]:
        return Tool(self.check_label, name="check_label", max_retries=10)


def labels(n: int, then: str = "Giving up on the label.") -> Any:
    """A model checking a different label at each step (no repeats), then answering."""
    return steps(*[[("check_label", {"label_id": f"L-{i}"})] for i in range(n)], then)


@pytest.mark.parametrize("how", ["retry", "failed"])
async def test_three_failures_in_a_row_end_the_turn(how: str, carrier: Carrier) -> None:
    outage = Outage(how)
    agent, model = guarded(labels(10), carrier, ERRORS, tools=[outage.tool()])
    result = await agent.run("Check my labels")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert result.output == stop.message
    assert outage.calls == ["L-0", "L-1", "L-2"]
    assert model.calls == 3
    assert "label service" in model.tool_returns(1)[0] or "label service" in str(model.requests[1][-1])


async def test_a_success_resets_the_errors_in_a_row(carrier: Carrier) -> None:
    outage = Outage("failed")
    script = steps(
        [("check_label", {"label_id": "L-0"})],
        [("check_label", {"label_id": "L-1"})],
        [("track_parcel", {"parcel_id": "FR-1"})],
        [("check_label", {"label_id": "L-2"})],
        [("check_label", {"label_id": "L-3"})],
        "Labels are failing; the parcel is in transit.",
    )
    agent, _ = guarded(script, carrier, ERRORS, tools=[outage.tool()])
    result = await agent.run("Check my labels and FR-1")
    assert stop_of(result) is None
    assert result.output == "Labels are failing; the parcel is in transit."
    assert outage.calls == ["L-0", "L-1", "L-2", "L-3"]


async def test_an_error_result_counts_as_a_failure_with_is_failure(carrier: Carrier) -> None:
    outage = Outage("returned")
    guard = RepeatGuard(ERRORS, is_failure=lambda result: str(result).startswith("ERROR"))
    agent, _ = guarded(labels(10), carrier, ERRORS, tools=[outage.tool()], guard=guard)
    result = await agent.run("Check my labels")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert outage.calls == ["L-0", "L-1", "L-2"]


async def test_is_failure_reads_what_the_model_reads_and_one_that_raises_leaves_the_sdks_word(carrier: Carrier) -> None:
    """``is_failure`` gets a ``ToolReturn``'s ``return_value`` (what the model reads), never the ``ToolReturn``;
    an ``is_failure`` that raises leaves the SDK's word (a success stays one; logged)."""
    seen: list[Any] = []

    def failed(view: Any) -> bool:
        seen.append(view)
        return str(view).startswith("ERROR")

    def label(parcel_id: str) -> ToolReturn[str]:
        """Buy a label."""
        return ToolReturn(f"ERROR no label for {parcel_id}", metadata={"raw": 500})

    model_script = steps(*[[("label", {"parcel_id": f"FR-{n}"})] for n in range(10)])
    agent, _ = guarded(model_script, carrier, ERRORS, tools=[Tool(label)], guard=RepeatGuard(ERRORS, is_failure=failed))
    stop = stop_of(await agent.run("Labels"))
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert seen == ["ERROR no label for FR-0", "ERROR no label for FR-1", "ERROR no label for FR-2"]

    def broken(view: Any) -> bool:
        raise ValueError("a bug in the caller's check")

    guard = RepeatGuard(ERRORS, is_failure=broken)
    script = steps(*[[("track_parcel", {"parcel_id": f"FR-{n}"})] for n in range(10)], "All tracked.")
    agent, _ = guarded(script, carrier, guard=guard)
    result = await agent.run("Track")
    assert stop_of(result) is None and result.output == "All tracked."  # ten successes: no "errors in a row"
    assert len(carrier.calls) == 10


async def test_an_exception_reaches_the_caller_unchanged(carrier: Carrier) -> None:
    outage = Outage("raise")
    agent, model = guarded(labels(10), carrier, ERRORS, tools=[outage.tool()])
    with pytest.raises(ConnectionError, match="label service unreachable"):
        await agent.run("Check my labels")
    assert outage.calls == ["L-0"]
    assert model.calls == 1


async def test_failed_repeats_are_not_counted_with_count_failures_false(carrier: Carrier) -> None:
    outage = Outage("failed")
    script = steps(*[[("check_label", {"label_id": "L-0"})]] * 4, "Giving up.")
    policy = Policy(max_calls=2, count_failures=False)
    agent, _ = guarded(script, carrier, policy, tools=[outage.tool()])
    result = await agent.run("Check L-0")
    assert result.output == "Giving up."
    assert outage.calls == ["L-0"] * 4  # a failed call may be retried: none was refused


@pytest.mark.parametrize("arguments", ['{"parcel_id": ', '{"parcel": "FR-1"}', "[1, 2]"])
async def test_malformed_arguments_never_reach_the_tool_and_count_as_errors(arguments: str, carrier: Carrier) -> None:
    script = steps(*[[("track_parcel", arguments)]] * 5, "Sorry, I could not call the tool.")
    agent, model = guarded(script, carrier, Policy(max_errors_in_a_row=2), retries=10)
    result = await agent.run("Where is FR-1?")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert carrier.calls == []
    assert model.calls == 2
    # pydantic-ai told the model what was wrong with its arguments, as it does without the guard.
    assert "track_parcel" in str(model.requests[1][-1])


async def test_a_refused_call_with_malformed_arguments_gets_its_refusal(carrier: Carrier) -> None:
    """The batch decides a call before pydantic-ai validates it: a refused one reads its refusal, not the
    validation error again (so the model is never stopped for refusals it did not see)."""
    script = steps(*[[("track_parcel", '{"parcel": "FR-1"}')]] * 3, "Sorry, I could not call the tool.")
    agent, model = guarded(script, carrier, Policy(max_calls=2), retries=10)
    result = await agent.run("Where is FR-1?")
    assert result.output == "Sorry, I could not call the tool."
    assert carrier.calls == []
    assert "parcel_id" in str(model.requests[1][-1]) and "parcel_id" in str(model.requests[2][-1])  # validation errors
    third = model.tool_returns(3)
    assert len(third) == 1 and third[0].startswith("Refused: track_parcel failed the same way")
    assert [tool for tool, _ in refusals_of(result)] == ["track_parcel"]
