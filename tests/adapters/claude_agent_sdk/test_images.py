"""An MCP tool whose result is an image, on the real CLI (issue 27 item 3: "the same PNG ran 12 of 12 times").

Claude Code 2.1.332 saves each image an MCP tool returns to a new file of the session's ``tool-results`` folder and
adds a text block naming it right after the image, in ``PostToolUse``'s ``tool_response`` and in what the model
reads: ``[Image: source: <CLAUDE_CONFIG_DIR>/projects/<project>/<session>/tool-results/mcp-<server>-blob-<epoch
ms>-<random>.png]`` (``[Image source: ...]`` when it cannot read the image's size; ``, original WxH, displayed at
wxh. ...`` before the ``]`` when it scaled the image down). The file's name is new at every run, so the same picture
looked like a new result each time and the same call was never refused. ``calls.result_view`` leaves that note out
(the image itself, base64, is compared as any value)."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import cas_shots
from cas_parcels import converse, scripted
from cas_shots import IMAGE, PAGE, SNAPSHOT, shots
from claude_agent_sdk import ClaudeSDKClient, HookContext, HookInput, HookJSONOutput, HookMatcher
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, stop_of
from repeat_hooks_claude_agent_sdk.calls import result_view
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, offline_options, tool_use

from repeat_hooks import StopReason

PROMPT = "Show me the home page"
SIX = scripted({PROMPT: [[tool_use(SNAPSHOT, PAGE)]] * 6})
"""The model: the same call in 6 responses in a row, then its answer."""
REFUSAL = (
    "Refused: you already called mcp__shots__snapshot with these exact arguments 2 times, and nothing has changed "
    "since that could change its result. Do not call it again: use the earlier result, change something first, try "
    "different arguments, or give your answer with what you know."
)
"""The default policy's refusal of the 3rd call, word for word."""


def note_of(home: Path, session_id: str) -> re.Pattern[str]:
    """The note Claude Code writes after the image of a run of ``snapshot`` in session ``session_id`` (under
    ``offline_options``' ``home``), word for word: the file's name holds the epoch in ms and 6 random base-36
    characters (``Math.random().toString(36).slice(2, 8)``)."""
    folder = re.escape(str(home / "claude" / "projects")) + "/[^/]+/" + re.escape(session_id) + "/tool-results/"
    return re.compile(r"\[Image: source: (" + folder + r"mcp-shots-blob-(\d{13})-([0-9a-z]{1,6})\.png)\]")


def spy(seen: list[dict[str, Any]]) -> dict[str, Any]:
    """``hooks=`` that keep every ``PostToolUse`` event in ``seen``."""

    async def hook(event: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        seen.append(dict(event))
        return {}

    return {"PostToolUse": [HookMatcher(hooks=[hook])]}


def read(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The content of the tool result the model reads in ``request`` (its last message's one result)."""
    (block,) = [b for b in request["messages"][-1]["content"] if b.get("type") == "tool_result"]
    content = block["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


async def test_claude_code_notes_a_new_file_after_each_image(tmp_path: Path) -> None:
    """Without the guard: two runs of the same call, the same PNG; Claude Code's ``tool_response`` is the image block
    (the PNG's base64 as the tool gave it) then the note of a new file (the PNG itself), and the model reads the
    same. ``result_view`` leaves the note out, so the two results are the same."""
    box, seen = shots(), []
    model = scripted({PROMPT: [[tool_use(SNAPSHOT, PAGE)]] * 2})
    start = time.time() * 1000
    with FakeMessagesAPI(model) as api:
        options = offline_options(
            api, tmp_path, mcp_servers={"shots": box.server}, allowed_tools=[SNAPSHOT], hooks=spy(seen)
        )
        async with ClaudeSDKClient(options) as client:
            await client.query(PROMPT)
            [message async for message in client.receive_response()]
    end = time.time() * 1000
    assert box.runs == ["home", "home"]
    notes = []
    for event, request in zip(seen, api.model_requests()[1:], strict=True):
        image, framing = event["tool_response"]
        assert image == IMAGE
        assert set(framing) == {"type", "text"} and framing["type"] == "text"
        found = note_of(tmp_path, event["session_id"]).fullmatch(framing["text"])
        assert found is not None
        assert start <= int(found[2]) <= end  # Date.now() of the run
        assert Path(found[1]).read_bytes() == cas_shots.png()
        model_read = read(request)
        assert model_read[0] == IMAGE and model_read[1]["text"].rstrip("\n") == found[0]
        assert result_view(event["tool_response"]) == [IMAGE]
        notes.append(found[0])
    assert notes[0] != notes[1]


async def test_a_model_that_keeps_getting_the_same_image_is_refused_at_its_third_call(tmp_path: Path) -> None:
    """The same call in 6 responses, the default policy: the tool runs twice, the model reads a refusal at its 3rd
    call, and the 3rd refusal ends the turn (no 6th model call)."""
    box, guard = shots(), RepeatGuardHooks()
    with FakeMessagesAPI(SIX) as api:
        (turn,) = await converse(
            guard, api, tmp_path, [PROMPT], mcp_servers={"shots": box.server}, allowed_tools=[SNAPSHOT], max_turns=12
        )
    assert box.runs == ["home", "home"]
    requests = api.model_requests()
    assert len(requests) == 5
    assert [read(request)[0] for request in requests[1:3]] == [IMAGE, IMAGE]
    for request in requests[3:]:  # Claude Code's framing of a refusal, then the refusal
        assert read(request)[0]["text"].startswith(f"PreToolUse:{SNAPSHOT} hook error: {REFUSAL}")
    assert turn.seen[2:] == [REFUSAL] * 3
    stop = await stop_of(turn.result, guard=guard)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert turn.result.result == stop.message


async def test_a_stdio_servers_same_image_is_refused_at_its_third_call(tmp_path: Path) -> None:
    """The same over stdio (a FastMCP server in a child process): Claude Code writes the same note; 2 runs."""
    log = tmp_path / "shots.log"
    log.touch()
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [cas_shots.__file__],
        "env": {"SHOTS_LOG": str(log), "PATH": os.environ.get("PATH", "")},
    }
    guard, seen = RepeatGuardHooks(), []
    with FakeMessagesAPI(SIX) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            [PROMPT],
            mcp_servers={"shots": server},
            allowed_tools=[SNAPSHOT],
            max_turns=12,
            hooks=spy(seen),
        )
    assert log.read_text().splitlines() == ["home", "home"]
    for event in seen:
        image, framing = event["tool_response"]
        assert image == IMAGE and note_of(tmp_path, event["session_id"]).fullmatch(framing["text"])
    assert len(api.model_requests()) == 5
    assert turn.seen[2:] == [REFUSAL] * 3


SAVED = "/home/ada/.claude/projects/-home-ada-shop/0a85f4be-a9fd-4f86-b662-5331c1539453/tool-results"
"""A session's ``tool-results`` folder, as Claude Code names it."""


def test_the_view_leaves_out_each_note_claude_code_writes_word_for_word() -> None:
    """Claude Code 2.1.332's notes, as it wrote them here (the folder renamed): of a saved image; of one it scaled
    down (the scale kept, as Claude Code writes it for an image it did not save); of one whose size it could not read
    (after its own error text, which stays)."""
    windows = "C:\\Users\\ada\\.claude\\projects\\C--shop\\0a85f4be-a9fd-4f86-b662-5331c1539453\\tool-results"
    scale = "original 4000x8, displayed at 2000x4. Multiply coordinates by 2.00 to map to original image."
    samples = [
        (f"[Image: source: {SAVED}/mcp-shots-blob-1796198448029-xj3kw1.png]", None),
        (f"[Image: source: {SAVED}/mcp-my-shots_v2-blob-1796198654239-9eipow.gif]", None),
        (f"[Image source: {SAVED}/mcp-my-shots_v2-blob-1796198654215-dguvwb.png]", None),
        (f"[Image: source: {SAVED}/mcp-my-shots_v2-blob-1796198654158-e3jhxz.png, {scale}]", f"[Image: {scale}]"),
        (f"[Image: source: {windows}\\mcp-shots-blob-1796198448029-xj3kw1.png]", None),  # the same on Windows
    ]
    for text, kept in samples:
        view = result_view([IMAGE, {"type": "text", "text": text}])
        assert view == ([IMAGE] if kept is None else [IMAGE, kept]), text
    unread = (
        "[Image could not be processed: Unable to resize image \u2014 image processing is unavailable and dimensions "
        "could not be read from the file header. Please convert the image to PNG, JPEG, GIF, or WebP.]"
    )
    bad = [{"type": "text", "text": unread}, {"type": "text", "text": f"[Image source: {SAVED}/mcp-s-blob-1-abc.png]"}]
    assert result_view(bad) == [unread, bad[1]["text"]]  # not Claude Code's name (1 digit, not 13): kept
    bad[1]["text"] = f"[Image source: {SAVED}/mcp-s-blob-1796198654215-dguvwb.png]"
    assert result_view({"content": bad, "isError": False}) == {"content": [unread], "isError": False}


def test_the_view_keeps_a_tools_own_text_about_an_image() -> None:
    """Only the whole note, with the file's name as Claude Code makes it, is left out: a tool's own words are kept."""
    own = [
        "[Image: source: /srv/shots/home.png]",  # the tool's own file
        f"Saved to {SAVED}/mcp-shots-blob-1796198448029-xj3kw1.png",  # not the note
        f"[Image: source: {SAVED}/mcp-shots-blob-1796198448029-xj3kw1.png] and more",
        f"[Image: source: {SAVED}/mcp-shots-blob-1796198448029-xj3kw1.png, taken at noon]",
        "[Image: source: /tmp/mcp-shots-blob-1796198448029-xj3kw1.png]",  # not in a tool-results folder
    ]
    for text in own:
        assert result_view([{"type": "text", "text": text}]) == [text], text
