"""The guard digests a tool's result as the model reads it, so a repeat with the same answer is refused.

pydantic-ai sends the model a tool's return value as JSON (datetimes, UUIDs, Decimals, Enums and
dataclasses included) and never a ``ToolReturn``'s ``metadata``. A model stuck on one call, under the
default ``Policy()`` (progress counting, ``max_calls=2``, ``max_refusals=3``): the tool runs twice,
the 3rd call reads a refusal, and the run ends after the 3rd refusal.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest
from pydantic_ai import Agent, Tool
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import TextContent, ToolReturn
from pydantic_ai.usage import UsageLimits
from repeat_hooks_pydantic_ai import RepeatGuard, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling

from repeat_hooks import Policy, StopReason

SCANNED = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
SHIPMENT = uuid.UUID("0f8e4d8a-3c1b-4b7e-9a51-6d2c1f0e9b42")


class Status(Enum):
    IN_TRANSIT = "in transit"


@dataclass(frozen=True)
class Scan:
    hub: str
    at: datetime


SEQ = itertools.count()
"""A number that changes every call (no mask would hide it), for the metadata the model never reads."""

SAME_VALUES: list[Any] = [
    pytest.param(lambda: {"parcel": "FR-7731", "scanned_at": SCANNED}, id="datetime"),
    pytest.param(lambda: {"parcel": "FR-7731", "eta": date(2026, 12, 3)}, id="date"),
    pytest.param(lambda: {"parcel": "FR-7731", "shipment": SHIPMENT}, id="uuid"),
    pytest.param(lambda: {"parcel": "FR-7731", "fee": Decimal("4.90")}, id="decimal"),
    pytest.param(lambda: {"parcel": "FR-7731", "status": Status.IN_TRANSIT}, id="enum"),
    pytest.param(lambda: Scan("Lyon", SCANNED), id="dataclass"),
    pytest.param(
        lambda: ToolReturn("FR-7731: in transit", metadata={"at": datetime.now(timezone.utc), "seq": next(SEQ)}),
        id="ToolReturn-metadata",
    ),
    pytest.param(
        lambda: ToolReturn(
            {"parcel": "FR-7731", "hub": "Lyon"},
            content=[TextContent("Map of FR-7731's route", metadata={"render": next(SEQ)})],
        ),
        id="ToolReturn-content-metadata",
    ),
]


def stuck_on(answer: Callable[[], Any]) -> tuple[Agent[None, str], ScriptedModel, list[Any]]:
    """An agent whose model keeps calling ``track_parcel`` (FR-7731), a tool answering ``answer()`` each time."""
    ran: list[Any] = []

    def track_parcel(parcel_id: str) -> Any:
        """Where the parcel is now."""
        value = answer()  # a new object each run, equal to the last
        ran.append(value)
        return value

    model = ScriptedModel(keep_calling("track_parcel", {"parcel_id": "FR-7731"}))
    agent = Agent(model, tools=[Tool(track_parcel)], capabilities=[RepeatGuard(Policy())])
    return agent, model, ran


@pytest.mark.parametrize("answer", SAME_VALUES)
async def test_the_same_answer_runs_twice_then_is_refused(answer: Callable[[], Any]) -> None:
    agent, model, ran = stuck_on(answer)
    result = await agent.run("Keep checking FR-7731", usage_limits=UsageLimits(request_limit=12))
    assert len(ran) == 2
    third = model.tool_returns(3)  # the 4th request carries the 3rd call's result
    assert len(third) == 1 and third[0].startswith("Refused")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert model.calls == 5  # 2 runs, 3 refusals; the 6th request never reaches the model


async def test_a_new_return_value_is_progress_even_with_the_same_metadata() -> None:
    scans = iter(range(100))
    agent, _, ran = stuck_on(lambda: ToolReturn(f"FR-7731: scan {next(scans)}", metadata={"source": "hub"}))
    with pytest.raises(UsageLimitExceeded):
        await agent.run("Keep checking FR-7731", usage_limits=UsageLimits(request_limit=6))
    assert len(ran) == 6  # every answer was new: nothing refused (pydantic-ai's own limit ends the run)


async def test_new_content_for_the_model_is_progress_even_with_the_same_return_value() -> None:
    """``ToolReturn.content`` reaches the model (as a user message after the tool returns): it counts."""
    pages = iter(range(100))
    agent, model, ran = stuck_on(lambda: ToolReturn("see the page below", content=f"page {next(pages)}"))
    with pytest.raises(UsageLimitExceeded):
        await agent.run("Read the whole manifest", usage_limits=UsageLimits(request_limit=6))
    assert len(ran) == 6
    assert all(not text.startswith("Refused") for n in range(1, 6) for text in model.tool_returns(n))
