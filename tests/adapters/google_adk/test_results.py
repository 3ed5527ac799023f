"""Results as the model reads them: a tool answering the same value again is no progress, whatever Python
types the value holds (ADK hands the model the function response dict, values as the tool returned them)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.genai import types
from repeat_hooks_google_adk import STOP_METADATA, RepeatGuardPlugin
from repeat_hooks_google_adk.calls import model_view
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks import Policy

from .conftest import ARGS, new_session, run_turn, runner_for


class Status(enum.Enum):
    IN_TRANSIT = "in transit"


@dataclass
class Scan:
    hub: str
    at: datetime


AT = datetime(2026, 11, 30, 8, 15, tzinfo=UTC)
PARCEL_ID = UUID("7d0f3c1e-52a4-4b8e-9a43-0c6f1d2b9e11")

RESULTS: dict[str, Callable[[], Any]] = {
    "datetime": lambda: {"last_scan": AT},
    "date": lambda: {"eta": date(2026, 12, 3)},
    "uuid": lambda: {"parcel_id": PARCEL_ID},
    "decimal": lambda: {"fee_eur": Decimal("12.50")},
    "enum": lambda: {"status": Status.IN_TRANSIT},
    "dataclass": lambda: {"last_scan": Scan("Lyon", AT)},
    "a dataclass alone": lambda: Scan("Lyon", AT),
    "all of them": lambda: {
        "parcel_id": PARCEL_ID,
        "status": Status.IN_TRANSIT,
        "eta": date(2026, 12, 3),
        "fee_eur": Decimal("12.50"),
        "scans": [Scan("Paris", AT), Scan("Lyon", AT)],
    },
}


@pytest.mark.parametrize("kind", list(RESULTS))
async def test_the_same_result_again_is_refused_whatever_it_holds(kind: str) -> None:
    calls: list[str] = []

    def track_parcel(tracking_number: str) -> Any:
        """Where the parcel is now."""
        calls.append(tracking_number)
        return RESULTS[kind]()  # a new object each time, equal to the last

    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel]), RepeatGuardPlugin(Policy()))

    # Without the guard ADK would run it until max_llm_calls (here 12, so a failure ends quickly).
    turn = await run_turn(
        runner, await new_session(runner), "Where is FR-7731?", run_config=RunConfig(max_llm_calls=12)
    )

    assert calls == ["FR-7731"] * 2
    (third,) = model.responses_received(3).values()
    assert third["error"].startswith("Refused: you already called track_parcel")
    assert turn.final.custom_metadata[STOP_METADATA] == "ignored_refusals"


async def test_a_new_result_restarts_the_count() -> None:
    calls: list[str] = []
    answers = iter(["in transit", "out for delivery", "delivered"])

    def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        return {"status": next(answers, "delivered")}

    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel]), RepeatGuardPlugin(Policy()))

    turn = await run_turn(
        runner, await new_session(runner), "Where is FR-7731?", run_config=RunConfig(max_llm_calls=20)
    )

    # Each new status restarts the count; "delivered" twice is no progress: the 5th call is refused.
    assert len(calls) == 4
    assert turn.final.custom_metadata[STOP_METADATA] == "ignored_refusals"


def test_the_view_is_the_function_response_adk_builds() -> None:
    scan = Scan("Lyon", AT)

    assert model_view({"status": "in transit"}) == {"status": "in transit"}
    assert model_view("in transit") == {"result": "in transit"}
    assert model_view(None) == {"result": None}
    assert model_view(scan) == {"result": scan}  # values stay Python values: the core converts them
    assert model_view(types.FunctionResponse(response={"status": "in transit"})) == {"status": "in transit"}
