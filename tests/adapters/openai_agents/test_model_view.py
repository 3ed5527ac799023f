"""The guard digests what the model reads of a result, not the SDK's wrapper (issue 16, item 2).

Progress is a result the model has not seen yet; a repeat whose result is the same as last time is
refused. So a value that the SDK turns into the same text every time must not count as progress just
because it holds a ``datetime`` or a ``Decimal`` (nor a fresh request id in an MCP result's ``_meta``:
``test_mcp.py``). Every test runs the SDK's real loop under the default
policy (``count="progress"``, ``max_calls=2``): a model that keeps making the same call sees its
tool run twice, then reads a refusal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import pytest
from agents import Agent, Runner, ToolOutputText, function_tool
from pydantic import BaseModel, Field
from repeat_hooks_openai_agents import GuardState, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling

TRACK = {"tracking_number": "FR-7731"}


def _refused(output: Any) -> bool:
    """``True`` when a tool output the model read is the guard's refusal."""
    return isinstance(output, str) and output.startswith("Refused")


class Status(enum.Enum):
    IN_TRANSIT = "in transit"


@dataclasses.dataclass(frozen=True)
class Scan:
    hub: str
    at: dt.datetime


SCANNED_AT = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)

CONSTANT_VALUES: dict[str, Any] = {
    "datetime": SCANNED_AT,
    "date": dt.date(2026, 12, 3),
    "uuid": uuid.UUID("0b8c6a1e-2f8e-4b55-9d0a-6b1f3f7f2c11"),
    "decimal": Decimal("12.50"),
    "enum": Status.IN_TRANSIT,
    "dataclass": Scan("Lyon", SCANNED_AT),
}


async def _runs_of(value: Any) -> tuple[int, ScriptedModel]:
    """How many times a tool returning ``{"parcel": ..., "value": value}`` ran for a model that keeps calling it."""
    ran: list[int] = []

    @function_tool
    def track_parcel(tracking_number: str) -> Any:
        """Where the parcel is now."""
        ran.append(1)
        return {"parcel": tracking_number, "value": value() if callable(value) else value}

    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]))
    await Runner.run(agent, "Keep checking FR-7731", context=GuardState())
    return len(ran), model


@pytest.mark.parametrize("kind", list(CONSTANT_VALUES))
async def test_the_same_value_with_no_plain_json_form_runs_twice(kind: str) -> None:
    runs, model = await _runs_of(CONSTANT_VALUES[kind])

    assert runs == 2
    assert _refused(model.outputs_received(-1)["call_3"])


@pytest.mark.parametrize(
    "volatile",
    [lambda: dt.datetime.now(dt.timezone.utc), uuid.uuid4],
    ids=["checked-at-now", "fresh-request-id"],
)
async def test_a_result_differing_only_by_a_volatile_token_runs_twice(volatile: Any) -> None:
    runs, _ = await _runs_of(volatile)

    assert runs == 2


async def test_structured_tool_outputs_are_compared_as_the_model_reads_them() -> None:
    ran: list[int] = []

    @function_tool
    def read_label(tracking_number: str) -> ToolOutputText:
        """The parcel's label, as text."""
        ran.append(1)
        return ToolOutputText(text=f"{tracking_number}: 2 kg, Lyon")

    model = ScriptedModel(then=keep_calling("read_label", TRACK))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[read_label]))

    await Runner.run(agent, "Read the label", context=GuardState())

    assert len(ran) == 2
    assert model.outputs_received(-1)["call_1"] == [{"type": "input_text", "text": "FR-7731: 2 kg, Lyon"}]
    assert _refused(model.outputs_received(-1)["call_3"])


class Parcel(BaseModel):
    tracking_number: str = Field(serialization_alias="trackingNumber")
    status: str
    checked: int = Field(exclude=True)


async def test_a_field_the_output_type_leaves_out_is_not_progress() -> None:
    ran: list[int] = []

    @function_tool(output_type=Parcel)
    def track_parcel(tracking_number: str) -> Parcel:
        """Where the parcel is now."""
        ran.append(1)
        return Parcel(tracking_number=tracking_number, status="in transit", checked=len(ran))

    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]))

    await Runner.run(agent, "Keep checking", context=GuardState())

    # The SDK sends the output_type's JSON dump: the excluded counter never reaches the model.
    assert model.outputs_received(-1)["call_1"] == '{"trackingNumber":"FR-7731","status":"in transit"}'
    assert len(ran) == 2
    assert _refused(model.outputs_received(-1)["call_3"])
