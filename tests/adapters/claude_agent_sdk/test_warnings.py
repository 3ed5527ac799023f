"""``Policy(warn=True)`` on the real CLI: the last run a repeat rule lets through reaches the model with the guard's
note right after its result (``PostToolUse``'s ``additionalContext``, which Claude Code appends to that very tool
result), and nothing the guard decides or records changes; and ``max_same_answers``, which this SDK cannot feed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cas_parcels import REFUSAL, SEED_004, TRACK, TRACKED, allowed, call, carrier, converse, keep_calling, scripted
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, read_state, stop_of
from repeat_hooks_claude_agent_sdk.guard import NO_ANSWERS
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI

from repeat_hooks import GuardSetupError, GuardState

WARNING = (
    f"Note: {TRACK} has now run 2 times like this with nothing changed in between; the same call again will be "
    "refused. Use this result, try something different, or give your answer with what you know."
)
"""The guard's note after the 2nd same result (``Policy(warn=True)``, the default ``max_calls=2``), word for word."""
FRAMED = f"<system-reminder>\nPostToolUse:{TRACK} hook additional context: {WARNING}\n</system-reminder>"
"""How Claude Code 2.1.332 hands the model a ``PostToolUse`` hook's note: in the call's own result, after its text."""
HEX = "mcp__parcels__hex"


def read(request: dict[str, Any]) -> list[list[str]]:
    """The text blocks of each tool result in a request's last message: what the model read of its last calls."""
    return [
        [block["content"]] if isinstance(block["content"], str) else [part["text"] for part in block["content"]]
        for block in request["messages"][-1]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


async def three_tracks(tmp_path: Path, guard: RepeatGuardHooks) -> tuple[Any, Any, FakeMessagesAPI]:
    parcels = carrier()
    with FakeMessagesAPI(scripted({"Where is FR-7731?": [call("track_parcel")] * 3})) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Where is FR-7731?"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
        )
    return parcels, turn, api


async def test_the_model_reads_the_warning_after_the_2nd_result_and_the_3rd_call_is_refused(tmp_path: Path) -> None:
    """What a user notices: the model's request after the 2nd run holds the note right after that result; the 3rd
    call is refused as without the note; the tool ran twice; the model's answer ends the turn."""
    parcels, turn, api = await three_tracks(tmp_path, guard := RepeatGuardHooks(warn=True))
    requests = api.model_requests()
    assert len(requests) == 4
    first, second, third = (read(request) for request in requests[1:])
    assert first[0][0].strip() == TRACKED and not any("Note:" in text for text in first[0])  # 1 run of 2: no note
    assert second[0][:2] == [TRACKED + "\n", FRAMED + "\n"]  # the result, then the note
    assert third[0][0].startswith(f"PreToolUse:{TRACK} hook error: Refused:") and "Note:" not in str(third)
    assert parcels.count("track_parcel") == 2
    assert turn.result.result == "done" and await stop_of(turn.result, guard=guard) is None
    assert turn.seen == [TRACKED, TRACKED, turn.seen[2]] and turn.seen[2].startswith("Refused")  # the stream: no note


async def test_the_warning_changes_nothing_the_guard_records(tmp_path: Path) -> None:
    """The same turn with and without warn=True: the same counts, marks, refusals and model calls in the state."""
    states: list[GuardState] = []
    for warn, home in ((False, tmp_path / "off"), (True, tmp_path / "on")):
        guard = RepeatGuardHooks(warn=warn)
        _, turn, _ = await three_tracks(home, guard)
        state = await read_state(turn.result, guard=guard)
        assert state is not None
        states.append(state)
    off, on = (state.turn for state in states)
    assert (on.counts, on.marks, on.refusals, on.model_calls, on.errors_in_a_row) == (
        off.counts,
        off.marks,
        off.refusals,
        off.model_calls,
        off.errors_in_a_row,
    )


async def test_no_warning_after_a_result_that_changed(tmp_path: Path) -> None:
    """place_order answers a new order number each run: each result is progress, so no note comes, and the three
    calls run (the note is asked of the state with the result recorded, not of the call's count alone)."""
    parcels = carrier()
    order = call("place_order", {"tracking_number": "box"})
    with FakeMessagesAPI(scripted({"Order boxes": [order] * 3})) as api:
        await converse(
            RepeatGuardHooks(warn=True),
            api,
            tmp_path,
            ["Order boxes"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
        )
    assert parcels.count("place_order") == 3
    assert not any("Note:" in str(read(request)) for request in api.model_requests())


async def test_a_tool_it_lacks_is_warned_in_its_batchs_note(tmp_path: Path) -> None:
    """A call of a tool the agent lacks has no PostToolUse: its warning comes with the PostToolBatch note, after
    Claude Code's error (the batch's last tool result, its own when it is the response's only call)."""
    parcels = carrier()
    with FakeMessagesAPI(scripted({"Convert 255 to hex": [call("hex", {"query": "255"})] * 3})) as api:
        await converse(
            RepeatGuardHooks(warn=True),
            api,
            tmp_path,
            ["Convert 255 to hex"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
        )
    texts = ["".join(read(request)[0]) for request in api.model_requests()[1:]]
    error = f"<tool_use_error>Error: No such tool available: {HEX}</tool_use_error>"
    assert texts[0].startswith(error) and "Note:" not in texts[0]
    assert texts[1].startswith(f"{error}\n\n<system-reminder>\nPostToolBatch hook additional context: Note: {HEX} ")
    assert "the same call again will be refused" in texts[1]
    assert "Refused:" in texts[2] and "Note:" not in texts[2]


async def test_the_seed_004_story_with_warnings_keeps_its_stop(tmp_path: Path) -> None:
    """warn=True changes no decision: seed 004 (per turn, by tool) still runs the tool twice, refuses the 3rd call,
    and ends the turn at the 3rd refusal; the note comes once, after the 2nd result."""
    parcels = carrier()
    guard = RepeatGuardHooks(warn=True, **SEED_004)
    with FakeMessagesAPI(keep_calling()) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Keep checking FR-7731"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
            max_turns=12,
        )
    assert parcels.count("track_parcel") == 2
    notes = [request for request in api.model_requests() if "hook additional context: Note:" in str(read(request))]
    assert len(notes) == 1
    assert turn.seen[:2] == [TRACKED] * 2 and turn.seen[2:] == [REFUSAL] * 3  # no note in the stream
    stop = await stop_of(turn.result, guard=guard)
    assert stop is not None and turn.result.result == stop.message


def test_max_same_answers_cannot_be_fed_and_says_why() -> None:
    with pytest.raises(GuardSetupError, match=r"max_same_answers=\.\.\.\) could never trip") as raised:
        RepeatGuardHooks(max_same_answers=3)
    assert NO_ANSWERS in str(raised.value)
    assert "claude_agent_sdk/client.py receive_response" in str(raised.value)
