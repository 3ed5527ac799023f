"""``Policy(warn=True)``: the return of the last call a repeat rule lets through reaches the model with the guard's
note after it (``before_model_request`` rewrites it in the request being sent and in the history), through
pydantic-ai's real agent graph; the note changes no decision, and a resumed turn counts the tool's own result."""

from __future__ import annotations

from typing import Any

import pytest
from pai_parcels import Carrier, guarded, status
from pydantic_ai import Agent, BinaryContent, Tool, ToolFailed
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart
from repeat_hooks_pydantic_ai import RepeatGuard, refusals_of, stop_of
from repeat_hooks_pydantic_ai.state import NOTE_KEY, noted_part, unnoted_part
from repeat_hooks_pydantic_ai.testing import ScriptedModel, pause, steps

from repeat_hooks import MemoryStore, Policy

PARCEL = {"parcel_id": "FR-7731"}
TRACK = [("track_parcel", PARCEL)]
NOTE = (
    "Note: track_parcel has now run 2 times like this with nothing changed in between; the same call again will "
    "be refused. Use this result, try something different, or give your answer with what you know."
)
WARN = Policy(warn=True)


def three_calls() -> Any:
    return steps(TRACK, TRACK, TRACK, "FR-7731 is in transit.")


def returns_of(messages: Any) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


async def test_the_model_reads_the_note_after_the_result_before_the_call_is_refused() -> None:
    """What a user notices: the 2nd same call runs and the model reads its result, then the note; the 3rd is
    refused as without the note, and the tool ran twice. The history keeps the note (in the return's content, and
    in its metadata, never sent to the model)."""
    carrier = Carrier()
    agent, model = guarded(three_calls(), carrier, WARN)

    result = await agent.run("Where is FR-7731?")

    assert model.tool_returns(1) == [status("FR-7731")], "the 1st result as the tool returned it"
    assert model.tool_returns(2) == [f"{status('FR-7731')}\n\n{NOTE}"], "the 2nd: the result, then the note"
    (refused,) = model.tool_returns(3)
    assert refused.startswith("Refused: ") and "track_parcel" in refused
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert result.output == "FR-7731 is in transit." and stop_of(result) is None
    assert len(refusals_of(result)) == 1
    second = returns_of(result.all_messages())[1]
    assert second.content == f"{status('FR-7731')}\n\n{NOTE}" and second.metadata == {NOTE_KEY: {"note": NOTE}}


async def test_the_note_changes_no_decision() -> None:
    """The same script without ``warn``: the same runs, the same refusal, and no note."""
    carrier = Carrier()
    agent, model = guarded(three_calls(), carrier, Policy())

    result = await agent.run("Where is FR-7731?")

    assert model.tool_returns(2) == [status("FR-7731")]
    assert model.tool_returns(3)[0].startswith("Refused: ")
    assert carrier.calls == ["FR-7731", "FR-7731"] and result.output == "FR-7731 is in transit."


def value_tool(value: Any, calls: list[int]) -> Tool[None]:
    async def track_parcel(parcel_id: str) -> Any:
        """Where the parcel is now."""
        calls.append(1)
        return value

    return Tool(track_parcel)


@pytest.mark.parametrize(
    "value", [{"status": "in transit", "hub": "Lyon"}, 42, None, [1, "two"]], ids=["dict", "int", "none", "list"]
)
async def test_a_turn_resumed_from_a_saved_history_counts_the_tool_s_own_result(value: Any) -> None:
    """A value return is noted as its text (a list, the note as its last item); broken off after the note, the
    history saved as JSON and the turn resumed with ``message_history=``, the turn's counts are rebuilt from the
    tool's own result (``unnoted_part``), so the 3rd call is refused as in one run."""
    calls: list[int] = []
    model = ScriptedModel(three_calls())
    agent: Agent[None, Any] = Agent(model, tools=[value_tool(value, calls)], capabilities=[RepeatGuard(WARN)])

    paused = await pause(agent, "Where is FR-7731?", [], 3)  # broken off before the 3rd call runs
    assert isinstance(paused, list)
    saved = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(paused))
    result = await agent.run(message_history=saved)

    second = returns_of(result.all_messages())[1]
    assert NOTE in second.model_response_str() and not second.model_response_str().startswith("Note")
    assert unnoted_part(second).content == returns_of(result.all_messages())[0].content
    assert model.tool_returns(3)[0].startswith("Refused: ")
    assert len(calls) == 2 and result.output == "FR-7731 is in transit."


async def test_a_failed_call_reaches_the_model_with_the_note_after_its_error() -> None:
    """A tool failing the same way: the 2nd failure's text, then the note; the 3rd call is refused."""
    calls: list[int] = []

    async def track_parcel(parcel_id: str) -> str:
        """Where the parcel is now."""
        calls.append(1)
        raise ToolFailed("the carrier is down")

    model = ScriptedModel(three_calls())
    agent: Agent[None, Any] = Agent(model, tools=[Tool(track_parcel)], capabilities=[RepeatGuard(WARN)])

    result = await agent.run("Where is FR-7731?")

    first, second = returns_of(result.all_messages())[:2]
    assert first.outcome == second.outcome == "failed"
    assert second.content == f"the carrier is down\n\n{NOTE}"
    assert NOTE.replace("Note: ", "") in second.model_response_str()  # as the model reads a failure: {"error": ...}
    assert model.tool_returns(3)[0].startswith("Refused: ")
    assert len(calls) == 2


@pytest.mark.parametrize("policy", [Policy(warn=True, count="per_turn")], ids=["per_turn"])
async def test_with_a_store_and_count_per_turn_the_note_still_comes(policy: Policy) -> None:
    """The counts in a store, every same call counted: the note comes after the 2nd result all the same."""
    carrier = Carrier()
    agent, model = guarded(three_calls(), carrier, guard=RepeatGuard(policy, store=MemoryStore()))

    await agent.run("Where is FR-7731?", conversation_id="c-1")

    assert model.tool_returns(2) == [f"{status('FR-7731')}\n\n{NOTE}"]
    assert model.tool_returns(3)[0].startswith("Refused: ")
    assert carrier.calls == ["FR-7731", "FR-7731"]


def part(content: Any, metadata: Any = None) -> ToolReturnPart:
    return ToolReturnPart("track_parcel", content, "call_1", metadata=metadata)


@pytest.mark.parametrize(
    "content",
    ["in transit", ["a", {"b": 1}], {"b": 1}, 7, None, BinaryContent(b"x", media_type="image/png")],
    ids=["text", "list", "dict", "int", "none", "file"],
)
def test_a_noted_return_gives_the_tool_s_own_back(content: Any) -> None:
    """``noted_part`` puts the note after the content as the model reads it; ``unnoted_part`` undoes it exactly,
    the return's metadata as it was."""
    own = part(content, {"mine": 1})
    noted = noted_part(own, NOTE)
    assert noted.model_response_str().endswith(NOTE) or noted.content[-1] == NOTE
    assert noted.metadata["mine"] == 1 and noted.metadata[NOTE_KEY]["note"] == NOTE
    back = unnoted_part(noted)
    assert (back.content, back.metadata) == (content, {"mine": 1})
    assert unnoted_part(own) is own, "a return with no note is left as it is"


def test_a_return_whose_metadata_is_not_a_dict_keeps_it() -> None:
    """The user's own metadata object stays; a text return still gives the tool's own back."""
    marker = object()
    noted = noted_part(part("in transit", marker), NOTE)
    assert noted.metadata is marker and noted.content == f"in transit\n\n{NOTE}"
    assert unnoted_part(noted).content == "in transit"
