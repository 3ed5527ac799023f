"""``Policy(warn=True)``: the result of the last call a repeat rule lets through reaches the model with the guard's
note after it, through rc11's real loop (``post_tool_call`` returns the result with the note as a text block)."""

from __future__ import annotations

import json
from typing import Any

from mistralai.agents import agents
from mistralai.vibe.harness.core import protocol
from repeat_hooks_mistral import RepeatGuardHook, read_state, stop_of
from repeat_hooks_mistral.calls import noted, rendered
from repeat_hooks_mistral.settings import hook_points
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages

from repeat_hooks import Policy

FR = {"tracking_number": "FR-7731"}
RESULT = '{"last_scan": "Lyon hub, 06:12", "status": "in transit", "tracking_number": "FR-7731"}'
"""What the model reads of ``track_parcel``'s result (rc11 writes the dict as JSON)."""
NOTE = (
    "Note: track_parcel has now run 2 times like this with nothing changed in between; the same call again will "
    "be refused. Use this result, try something different, or give your answer with what you know."
)


class WarningGuard(RepeatGuardHook):
    policy = Policy(warn=True)


class QuietGuard(RepeatGuardHook):
    policy = Policy()


class PerTurnWarningGuard(RepeatGuardHook):
    policy = Policy(count="per_turn", warn=True)


async def test_the_model_reads_the_note_after_the_result_before_the_call_is_refused(
    carrier: Any, agent_for: Any
) -> None:
    """What a user notices: the 2nd same call runs and the model reads its result, then the note; the 3rd call is
    refused as without the note, and the tool ran twice."""
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "FR-7731 is in transit.")
    async with await agent_for(model, WarningGuard()).create_session() as session:
        result = await run_turn(session, "Where is FR-7731?")
        stop = await stop_of(session, guard=WarningGuard)
        state = await read_state(session, guard=WarningGuard)

    first, second, third = tool_messages(model.requests[-1])
    assert first == RESULT, "the 1st result as the tool returned it"
    assert second == f"{RESULT}\n{NOTE}", "the 2nd: the result, then the note (rc11 joins the blocks by newlines)"
    assert third.startswith("Refused: ") and "track_parcel" in third
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert result.text == "FR-7731 is in transit." and stop is None
    assert state is not None and state.turn.refusals == 1


async def test_the_note_changes_no_decision(carrier: Any, agent_for: Any) -> None:
    """The same script without ``warn``: the same runs and the same refusal, and no note."""
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "FR-7731 is in transit.")
    async with await agent_for(model, QuietGuard()).create_session() as session:
        await run_turn(session, "Where is FR-7731?")

    first, second, third = tool_messages(model.requests[-1])
    assert first == second == RESULT
    assert third.startswith("Refused: ") and "track_parcel" in third
    assert carrier.calls == ["FR-7731", "FR-7731"]


async def test_a_failed_call_keeps_rc11_s_own_error_text_before_the_note(carrier: Any, agent_for: Any) -> None:
    """A tool that raises has no content blocks: rc11 writes the model its own error JSON. With the note, the model
    reads that same text, then the note (``calls.rendered`` writes what rc11 writes), never the note alone."""
    carrier.fail = True
    quiet = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 2, "The carrier is down.")
    async with await agent_for(quiet, QuietGuard()).create_session() as session:
        await run_turn(session, "Where is FR-7731?")
    warned = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "The carrier is down.")
    async with await agent_for(warned, WarningGuard()).create_session() as session:
        await run_turn(session, "Where is FR-7731?")

    error = tool_messages(quiet.requests[-1])[1]
    assert json.loads(error)["result"]["error"]["message"].endswith("carrier unreachable")
    first, second, third = tool_messages(warned.requests[-1])
    assert first == error and second == f"{error}\n{NOTE}"
    assert third.startswith("Refused: ") and "track_parcel" in third
    assert len(carrier.calls) == 4


async def test_with_count_per_turn_the_note_still_comes(carrier: Any, agent_for: Any) -> None:
    """``count="per_turn"`` records no outcome, but the note goes with a result: the class offers rc11
    ``post_tool_call`` for ``warn=True`` all the same."""
    assert not hook_points(Policy(count="per_turn"))["post_tool_call"]
    assert hook_points(Policy(count="per_turn", warn=True))["post_tool_call"]
    assert PerTurnWarningGuard.post_tool_call is not agents.Hook.post_tool_call
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "FR-7731 is in transit.")
    async with await agent_for(model, PerTurnWarningGuard()).create_session() as session:
        await run_turn(session, "Where is FR-7731?")

    _, second, third = tool_messages(model.requests[-1])
    assert second == f"{RESULT}\n{NOTE}"
    assert third.startswith("Refused: ") and "track_parcel" in third
    assert carrier.calls == ["FR-7731", "FR-7731"]


async def test_a_program_in_run_typescript_reads_the_same_values(carrier: Any, agent_for: Any) -> None:
    """A call made inside ``run_typescript`` goes back to the program, which reads an ``@agents.tool``'s
    ``structured_content``: the note (a content block) changes nothing it reads, and the 3rd call is still skipped."""
    code = (
        "const out = [];\n"
        "for (let i = 0; i < 3; i++) {\n"
        '  try { out.push(await tools.client.track_parcel({tracking_number: "FR-7731"})); }\n'
        '  catch (e) { out.push("ERR " + String(e)); }\n'
        "}\n"
        "return out;"
    )
    model = ScriptedModel.replies(ToolUse("run_typescript", {"code": code}, call_id="ts_1"), "In transit.")
    builtins = agents.Builtins(skills=False, subagents=False, background_processes=False)  # run_typescript on
    async with await agent_for(model, WarningGuard(), builtins=builtins).create_session() as session:
        await run_turn(session, "Check FR-7731 three times.")

    outputs = json.loads(tool_messages(model.requests[-1])[0])
    assert outputs[0] == outputs[1] == json.loads(RESULT)
    assert outputs[2] == "ERR tool_skipped: Tool execution was skipped by Runtime policy."
    assert len(carrier.calls) == 2


def test_a_result_with_no_blocks_gets_rc11_s_own_text_first() -> None:
    """``rendered``: what rc11 writes for a result with no content blocks (held to rc11 by the test above for a
    failure; a success's ``structured_content``: a string as is, else compact JSON); ``noted`` puts it first."""
    error = protocol.ProtocolError(code="x_y", message='bad "é"', retryable=False, details={"k": 1})
    failure = protocol.ToolFailureResult(error=error, structured_content={"o": 1})
    assert rendered(failure) == (
        '{"result":{"type":"error","error":{"name":"x_y","message":"bad \\"é\\"","details":{"k":1}},"output":{"o":1}}}'
    )
    assert rendered(protocol.ToolSuccessResult(structured_content={"b": "é", "a": 1})) == '{"b":"é","a":1}'
    assert rendered(protocol.ToolSuccessResult(structured_content="plain")) == "plain"
    assert rendered(protocol.ToolSuccessResult()) == ""
    assert [block.text for block in noted(failure, "N").content if isinstance(block, protocol.TextContentBlock)] == [
        rendered(failure),
        "N",
    ]
    assert noted(protocol.ToolSuccessResult(), "N").content == [protocol.TextContentBlock(text="N")]
    shown = protocol.ToolSuccessResult(content=[protocol.TextContentBlock(text="x")], structured_content={"a": 1})
    again = noted(shown, "N")
    assert [block.text for block in again.content if isinstance(block, protocol.TextContentBlock)] == ["x", "N"]
    assert again.structured_content == {"a": 1} and shown.content == [protocol.TextContentBlock(text="x")]
