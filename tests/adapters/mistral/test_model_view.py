"""The guard digests what the model reads of a tool's result, not rc11's wrapper (issue 16, item 2).

Each test runs the SDK's real loop with a scripted model and looks at what a user would notice: how many
times the tool ran, and the tool messages the model read. Under ``Policy()`` (progress, ``max_calls=2``)
a call whose result the model reads the same twice is refused the third time.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mistralai.agents import agents
from pydantic import BaseModel
from repeat_hooks_mistral import RepeatGuardHook
from repeat_hooks_mistral.calls import model_view
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages

FR = {"tracking_number": "FR-7731"}


class Status(enum.Enum):
    IN_TRANSIT = "in transit"


@dataclasses.dataclass
class Scan:
    hub: str
    at: datetime.datetime


class ScanModel(BaseModel):
    """A pydantic model: rc11 dumps it as JSON (``model_dump(mode="json")``) for the model."""

    status: str
    checked_at: datetime.datetime
    request_id: uuid.UUID


RUNS: list[str] = []
RETURNS: list[Callable[[], Any]] = [dict]


@agents.tool
def scan_parcel(tracking_number: str) -> Any:
    """The carrier's latest scan of a parcel."""
    RUNS.append(tracking_number)
    return RETURNS[0]()


@pytest.fixture
def returning() -> Iterator[Callable[[Callable[[], Any]], None]]:
    """Sets what ``scan_parcel`` returns (a fresh call of the factory each run); resets its runs."""

    def set_return(factory: Callable[[], Any]) -> None:
        RETURNS[0] = factory

    RUNS.clear()
    yield set_return
    RUNS.clear()
    RETURNS[0] = dict


class DefaultGuard(RepeatGuardHook):
    """``Policy()``, the default."""


async def scan(agent_for: Any, *replies: Any) -> list[str]:
    """Run one turn whose model gives ``replies`` (the last one again and again); the tool messages it read."""
    model = ScriptedModel.replies(*replies)
    agent = agent_for(model, DefaultGuard(), tools=[scan_parcel], max_iterations=12)
    async with await agent.create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")
    return tool_messages(model.requests[-1])


# -- what the guard digests is what the model read ----------------------------------------------------------


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every view of a tool result the guard hands the core (``post_tool_call``'s ``result=``)."""
    seen: list[Any] = []

    def spy(result: Any) -> Any:
        seen.append(model_view(result))
        return seen[-1]

    monkeypatch.setattr("repeat_hooks_mistral.guard.model_view", spy)
    return seen


def broken() -> Any:
    raise RuntimeError("carrier unreachable")


@pytest.mark.parametrize(
    "factory",
    [
        lambda: {"status": "in transit", "hub": "Lyon"},
        lambda: "FR-7731: in transit",
        lambda: 3,
        lambda: [1, "two"],
        lambda: None,
        lambda: ScanModel(status="in transit", checked_at=datetime.datetime(2026, 1, 5), request_id=uuid.UUID(int=7)),
        lambda: agents.ToolResult(value={"status": "in transit"}, annotations={"request_id": str(uuid.uuid4())}),
        broken,
    ],
    ids=["dict", "str", "int", "list", "none", "pydantic", "tool_result_annotations", "raises"],
)
async def test_the_guard_digests_the_tool_message_the_model_read(
    returning: Callable[[Callable[[], Any]], None], views: list[Any], agent_for: Any, factory: Callable[[], Any]
) -> None:
    returning(factory)
    [message] = await scan(agent_for, ToolUse("scan_parcel", FR), "Done.")

    [view] = views
    assert view == message or json.loads(message) == view, "the message, or the value it is the JSON text of"
    if factory is broken:
        assert view["result"]["error"] == {
            "name": "capability_execution_failed",
            "message": "Capability callable failed: carrier unreachable",
            "details": None,
        }


# -- values with and without a JSON form: the same answer runs twice, the 3rd call is refused -------------

SAME_ANSWER: dict[str, tuple[Callable[[], Any], bool]] = {
    # rc11 fails these: "not a valid JSON value", echoing the offending value (fresh for .now(), uuid4())
    "datetime": (lambda: {"status": "in transit", "at": datetime.datetime(2026, 1, 5, 6, 12)}, False),
    "date": (lambda: {"status": "in transit", "due": datetime.date(2026, 1, 7)}, False),
    "uuid": (lambda: {"status": "in transit", "scan_id": uuid.UUID(int=42)}, False),
    "decimal": (lambda: {"status": "in transit", "fee": decimal.Decimal("4.90")}, False),
    "enum": (lambda: {"status": Status.IN_TRANSIT}, False),
    "dataclass": (lambda: Scan(hub="Lyon", at=datetime.datetime(2026, 1, 5, 6, 12)), False),
    "datetime_now": (lambda: {"status": "in transit", "at": datetime.datetime.now()}, False),
    "uuid4": (lambda: {"status": "in transit", "scan_id": uuid.uuid4()}, False),
    "dataclass_now": (lambda: Scan(hub="Lyon", at=datetime.datetime.now()), False),
    # rc11 writes these as JSON; the core masks the fresh ISO date-time and UUID of the last one
    "pydantic_model": (
        lambda: ScanModel(status="in transit", checked_at=datetime.datetime(2026, 1, 5), request_id=uuid.UUID(int=7)),
        True,
    ),
    "tool_result_fresh_annotations": (
        lambda: agents.ToolResult(value={"status": "in transit"}, annotations={"request_id": str(uuid.uuid4())}),
        True,
    ),
    "pydantic_model_fresh_time_and_id": (
        lambda: ScanModel(status="in transit", checked_at=datetime.datetime.now(), request_id=uuid.uuid4()),
        True,
    ),
}


@pytest.mark.parametrize(("factory", "json_able"), SAME_ANSWER.values(), ids=SAME_ANSWER.keys())
async def test_the_same_answer_runs_twice_whatever_its_types(
    returning: Callable[[Callable[[], Any]], None], agent_for: Any, factory: Callable[[], Any], json_able: bool
) -> None:
    """rc11 turns a value with no JSON form into a failure the model reads ("not a valid JSON value"), the
    same failure every time; a ``ToolResult``'s annotations never reach the model (nor the guard)."""
    returning(factory)
    messages = await scan(agent_for, ToolUse("scan_parcel", FR))

    assert RUNS == ["FR-7731", "FR-7731"]
    assert [("not a valid JSON value" in message) for message in messages[:2]] == [not json_able] * 2
    assert messages[2].startswith("Refused:")
