"""Results as the model reads them: the same answer is no progress, whatever Python type carried it.

A tool that keeps answering the same value (holding a ``datetime``, ``date``, ``UUID``, ``Decimal``,
``Enum``, a dataclass) or the same content blocks (each stamped by LangChain with a fresh ``id``) runs
exactly twice under the default ``Policy()``; the 3rd identical call is refused.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.messages.content import create_text_block
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from repeat_hooks_langchain import RepeatGuardMiddleware, guard_state_of, stop_of
from repeat_hooks_langchain.calls import model_view
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, keep_calling

from repeat_hooks import Policy, StopReason

ARGS = {"tracking_number": "FR-7731"}
USER = {"messages": [("user", "Keep checking FR-7731")]}
# A recursion limit well above the 11 steps a guarded turn takes: a guard that never refuses fails fast.
CONFIG: Any = {"configurable": {"thread_id": "t1"}, "recursion_limit": 40}
REFUSED = "Refused: you already called track_parcel with these exact arguments 2 times"


class Status(enum.Enum):
    IN_TRANSIT = "in transit"


@dataclass
class Hub:
    name: str
    code: int


VALUES: dict[str, Any] = {
    "datetime": datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.timezone.utc),
    "date": datetime.date(2026, 12, 3),
    "uuid": uuid.UUID("6f1c2a34-9d1e-4c55-8f3a-0b7e2d4c9a10"),
    "decimal": decimal.Decimal("12.50"),
    "enum": Status.IN_TRANSIT,
    "dataclass": Hub("Lyon", 69),
}


class Counted:
    """How many times the tool really ran."""

    def __init__(self) -> None:
        self.runs = 0


def run_loop(tool_: BaseTool) -> tuple[dict[str, Any], ScriptedChatModel]:
    """A model that keeps asking for ``track_parcel(FR-7731)`` under ``Policy()``; the turn's result."""
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    agent = create_agent(
        model, tools=[tool_], middleware=[RepeatGuardMiddleware(Policy())], checkpointer=InMemorySaver()
    )
    return agent.invoke(USER, CONFIG), model


def assert_ran_twice_then_refused(runs: Counted, result: dict[str, Any], model: ScriptedChatModel) -> None:
    assert runs.runs == 2
    assert model.tool_results(1) == model.tool_results(2)
    assert model.tool_results(3)[0].startswith(REFUSED)
    assert model.calls == 5  # 3 refusals end the turn (the default max_refusals)
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result["messages"][-1].content == stop.message


@pytest.mark.parametrize("kind", [*VALUES, "all"])
def test_the_same_value_of_any_type_runs_twice(kind: str) -> None:
    runs = Counted()
    value = VALUES if kind == "all" else {"status": "in transit", kind: VALUES[kind]}

    @tool
    def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        runs.runs += 1
        return dict(value)  # a new dict each run, equal to the last

    result, model = run_loop(track_parcel)

    assert_ran_twice_then_refused(runs, result, model)


def test_the_same_content_blocks_with_a_fresh_artifact_run_twice() -> None:
    # How langchain-mcp-adapters builds tools: content blocks (each with a fresh "lc_<uuid>" id) and an
    # artifact the model never reads, here carrying a fresh timestamp and request id.
    runs = Counted()

    @tool(response_format="content_and_artifact")
    def track_parcel(tracking_number: str) -> tuple[list[Any], dict[str, Any]]:
        """Where the parcel is now."""
        runs.runs += 1
        blocks = [create_text_block(text=f"{tracking_number}: in transit"), create_text_block(text="hub Lyon")]
        return blocks, {"fetched_at": datetime.datetime.now(), "request_id": uuid.uuid4()}

    result, model = run_loop(track_parcel)

    assert_ran_twice_then_refused(runs, result, model)
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status != "error"]
    assert answers[0].content != answers[1].content and answers[0].artifact != answers[1].artifact
    assert model.tool_results(1) == ["FR-7731: in transithub Lyon"]


def test_content_blocks_returned_as_the_value_run_twice() -> None:
    runs = Counted()

    @tool
    def track_parcel(tracking_number: str) -> list[Any]:
        """Where the parcel is now."""
        runs.runs += 1
        return [create_text_block(text=f"{tracking_number}: in transit")]

    result, model = run_loop(track_parcel)

    assert_ran_twice_then_refused(runs, result, model)


def test_new_content_is_progress() -> None:
    # Control: the text the model reads changes each run (a new scan), so every run is allowed.
    runs = Counted()

    @tool(response_format="content_and_artifact")
    def track_parcel(tracking_number: str) -> tuple[list[Any], None]:
        """Where the parcel is now."""
        runs.runs += 1
        return [create_text_block(text=f"{tracking_number}: scan {runs.runs} of 9")], None

    model = ScriptedChatModel(replies=[keep_calling("track_parcel", ARGS)] * 4 + [answer("Still moving.")])
    agent = create_agent(
        model, tools=[track_parcel], middleware=[RepeatGuardMiddleware(Policy())], checkpointer=InMemorySaver()
    )
    result = agent.invoke(USER, CONFIG)

    assert runs.runs == 4
    assert result["messages"][-1].content == "Still moving."
    assert stop_of(result) is None and guard_state_of(result).turn.refusals == 0


def test_model_view_leaves_out_block_ids_and_the_artifact() -> None:
    blocks = [create_text_block(text="a"), {"type": "image", "url": "https://x/y.png", "id": "lc_1"}, "plain"]
    message = ToolMessage(content=blocks, tool_call_id="c1", artifact={"request_id": "r1"})

    assert model_view(message) == [{"type": "text", "text": "a"}, {"type": "image", "url": "https://x/y.png"}, "plain"]
    assert model_view(ToolMessage(content="in transit", tool_call_id="c1")) == "in transit"
    # LangChain writes a value JSON cannot as its str(): that text is what the model reads.
    assert (
        model_view(ToolMessage(content={"at": VALUES["date"]}, tool_call_id="c1"))
        == "{'at': datetime.date(2026, 12, 3)}"
    )
