"""``Policy(warn=True)`` on the SDK's real loop: the last run a repeat rule lets through reaches the model with the
guard's note after its result (the tool output guardrail's ``reject_content``), the next same call is refused as
without it, and the guard records, and ``tool_use_behavior`` gets, the tool's own output."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession, ToolOutputText, ToolsToFinalOutputResult, function_tool
from pydantic import BaseModel, PrivateAttr
from repeat_hooks_openai_agents import GuardState, Policy, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

from repeat_hooks import ToolCall
from repeat_hooks.kit import noted, unnoted

from .conftest import Carrier
from .test_mcp import carrier_server

TRACK = {"tracking_number": "FR-7731"}
READ = "FR-7731: in transit, hub Lyon"
NOTE = (
    "Note: track_parcel has now run 2 times like this with nothing changed in between; the same call again will be "
    "refused. Use this result, try something different, or give your answer with what you know."
)


class Recording(Policy):
    """A policy that also keeps the results the adapter recorded."""

    _recorded: list[Any] = PrivateAttr(default_factory=list)

    def record_tool_result(self, state: GuardState, call: ToolCall, **kw: Any) -> None:
        self._recorded.append(kw.get("result"))
        super().record_tool_result(state, call, **kw)


async def _run(agent: Agent[Any], streamed: bool, **options: Any) -> Any:
    if not streamed:
        return await Runner.run(agent, "Where is FR-7731?", **options)
    result = Runner.run_streamed(agent, "Where is FR-7731?", **options)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
async def test_the_model_reads_the_note_after_the_2nd_result_and_the_3rd_call_is_refused(
    carrier: Carrier, streamed: bool
) -> None:
    model = ScriptedModel(*[[tool_call("track_parcel", TRACK, f"c{n}")] for n in (1, 2, 3)], [message("In Lyon.")])
    policy = Recording(warn=True)
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), policy)

    result = await _run(agent, streamed, context=GuardState())

    assert result.final_output == "In Lyon."
    assert carrier.calls == ["FR-7731"] * 2  # the tool ran twice, the note changed no decision
    assert model.outputs_received(1) == {"c1": READ}
    assert model.outputs_received(2)["c2"] == noted(READ, NOTE) == f"{READ}\n\n{NOTE}"
    assert model.outputs_received(3)["c3"].startswith("Refused: you already called track_parcel")
    assert policy._recorded == [READ, READ]  # the tool's own output, never the note
    # The run's items, hence result.to_input_list() and a session, keep what the model read.
    assert [item["output"] for item in result.to_input_list() if item.get("type") == "function_call_output"] == [
        READ,
        noted(READ, NOTE),
        model.outputs_received(3)["c3"],
    ]
    warned = [r for r in result.tool_output_guardrail_results if r.output.behavior["type"] == "reject_content"]
    assert [r.output.output_info for r in warned] == [NOTE]


async def test_without_warn_nothing_is_added(carrier: Carrier) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]))

    result = await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    assert model.outputs_received(2)["call_2"] == READ
    assert all(r.output.behavior["type"] == "allow" for r in result.tool_output_guardrail_results)


async def test_a_session_keeps_the_output_the_model_read(carrier: Carrier) -> None:
    model = ScriptedModel(*[[tool_call("track_parcel", TRACK, f"c{n}")] for n in (1, 2, 3)], [message("In Lyon.")])
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), warn=True)
    session = SQLiteSession("chat-1")

    await Runner.run(agent, "Where is FR-7731?", context=GuardState(), session=session)

    kept = [item["output"] for item in await session.get_items() if item.get("type") == "function_call_output"]
    assert kept[1] == noted(READ, NOTE) and unnoted(kept[1]) == READ


async def test_counting_per_turn_warns_too(carrier: Carrier) -> None:
    # count="per_turn" needs no outcomes: the output guardrail is there for the note alone.
    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool]), count="per_turn", warn=True)

    await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    assert model.outputs_received(2)["call_2"] == noted(READ, NOTE)
    assert carrier.calls == ["FR-7731"] * 2


async def test_stop_on_first_tool_ends_with_the_tools_own_output(carrier: Carrier) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    agent = guard_agent(
        Agent(name="p", model=model, tools=[carrier.tool], tool_use_behavior="stop_on_first_tool"),
        max_calls=1,
        warn=True,
    )

    result = await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    assert result.final_output == READ  # the note is for the model, which never reads this output
    assert "Note: track_parcel has now run once" in result.new_items[-1].raw_item["output"]


async def test_your_behaviour_gets_the_tools_own_output(carrier: Carrier) -> None:
    seen: list[Sequence[Any]] = []

    def behaviour(context: Any, results: list[Any]) -> Any:
        seen.append([result.output for result in results])
        return ToolsToFinalOutputResult(is_final_output=False)

    model = ScriptedModel(*[[tool_call("track_parcel", TRACK, f"c{n}")] for n in (1, 2)], [message("In Lyon.")])
    agent = guard_agent(Agent(name="p", model=model, tools=[carrier.tool], tool_use_behavior=behaviour), warn=True)

    await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    assert seen == [[READ], [READ]]
    assert model.outputs_received(2)["c2"] == noted(READ, NOTE)


async def test_a_structured_output_gets_the_note_as_one_more_text_part() -> None:
    @function_tool
    def read_label(tracking_number: str) -> ToolOutputText:
        """The parcel's label, as text."""
        return ToolOutputText(text=f"{tracking_number}: 2 kg, Lyon")

    model = ScriptedModel(then=keep_calling("read_label", TRACK))
    agent = guard_agent(Agent(name="p", model=model, tools=[read_label]), warn=True)

    await Runner.run(agent, "Read the label", context=GuardState())

    label, note = model.outputs_received(2)["call_2"]
    assert label == {"type": "input_text", "text": "FR-7731: 2 kg, Lyon"}
    assert note["type"] == "input_text" and note["text"].startswith("Note: read_label has now run 2 times")


class Parcel(BaseModel):
    tracking_number: str
    status: str


async def test_an_output_type_result_reads_as_its_json_with_the_note_after_it() -> None:
    @function_tool(output_type=Parcel)
    def track_parcel(tracking_number: str) -> Parcel:
        """Where the parcel is now."""
        return Parcel(tracking_number=tracking_number, status="in transit")

    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    policy = Recording(warn=True)
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), policy)

    await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    dumped = '{"tracking_number":"FR-7731","status":"in transit"}'
    assert model.outputs_received(1)["call_1"] == dumped
    assert model.outputs_received(2)["call_2"] == noted(dumped, NOTE)
    assert policy._recorded[1] == {"tracking_number": "FR-7731", "status": "in transit"}


async def test_a_failed_call_gets_the_note_after_the_sdks_error_text() -> None:
    @function_tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        raise ConnectionError("carrier down")

    model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
    agent = guard_agent(Agent(name="p", model=model, tools=[track_parcel]), warn=True)

    await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    error = "An error occurred while running the tool. Please try again."
    assert model.outputs_received(2)["call_2"] == noted(error, NOTE)
    assert model.outputs_received(3)["call_3"].startswith("Refused: track_parcel failed the same way 2 times")


async def test_a_local_mcp_servers_tool_gets_the_note(tmp_path: Path) -> None:
    server, log = carrier_server(tmp_path, cache_tools_list=True)
    async with server:
        model = ScriptedModel(then=keep_calling("track_parcel", TRACK))
        agent = guard_agent(Agent(name="p", model=model, mcp_servers=[server]), warn=True)

        await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    # The SDK hands the model an MCP result as its content parts: the note is one more text part.
    read = {"type": "input_text", "text": "FR-7731: in transit"}
    assert model.outputs_received(1)["call_1"] == [read]
    assert model.outputs_received(2)["call_2"] == [read, {"type": "input_text", "text": NOTE}]
    assert log.read_text().split() == ["FR-7731"] * 2
