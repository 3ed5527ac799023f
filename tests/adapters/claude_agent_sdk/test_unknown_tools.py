"""A tool the agent does not have, on the real CLI: Claude Code answers the call itself ("No such tool available"),
with no ``PreToolUse`` and no ``PostToolUseFailure``; only ``PostToolBatch`` shows it, and there the guard counts it as
a failed call of that name (langchain#37961: a model that kept calling a tool it lacked, about $26 in one turn)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cas_parcels import TRACK, TRACKED, allowed, call, carrier, converse, keep_calling, scripted
from claude_agent_sdk import (
    AgentDefinition,
    ClaudeSDKClient,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    ResultMessage,
    TaskStartedMessage,
)
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, stop_of
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, Reply, offline_options, steps, tool_use

from repeat_hooks import StopReason

HEX = "mcp__parcels__hex"
"""A tool of the parcels server's name that it does not have."""
CEILING = 12
"""``max_turns`` of the queries of a model that keeps calling: a guard that fails to stop it fails a test rather than
hanging it."""
NO_SUCH_TOOL = f"<tool_use_error>Error: No such tool available: {HEX}</tool_use_error>"
"""What Claude Code 2.1.332 hands the model for a call of it."""
REFUSED = f"Refused: {HEX} failed the same way 2 times"
"""How the guard's refusal of the 3rd such call starts."""
NOTE = "PostToolBatch hook additional context: "
"""How Claude Code frames a ``PostToolBatch`` hook's note in the tool result the model reads."""


TOKENS_LEFT = re.compile(r"\s*<system-reminder>\n<total_tokens>\d+ tokens left</total_tokens>\n</system-reminder>$")


def read(request: dict[str, Any]) -> str:
    """All the model read in the tool results of a request's last message, Claude Code's framing included (but for
    its closing reminder of the tokens left)."""
    blocks = request["messages"][-1]["content"]
    text = "\n".join(
        block["content"] if isinstance(block["content"], str) else "".join(part["text"] for part in block["content"])
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )
    return TOKENS_LEFT.sub("", text)


async def test_claude_code_answers_a_tool_it_lacks_itself_firing_no_tool_hook(tmp_path: Path) -> None:
    """Without the guard: the model calls hex 3 times and reads Claude Code's error each time; nothing stops it.
    PreToolUse (matcher None or "*") and PostToolUseFailure never fire for it; PostToolBatch does, with its error."""
    fired: list[tuple[str, dict[str, Any]]] = []

    def record(name: str) -> Any:
        async def hook(event: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
            fired.append((name, dict(event)))
            return {}

        return hook

    names = ["PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PostToolBatch"]
    hooks = {name: [HookMatcher(hooks=[record(name)]), HookMatcher("*", [record(name)])] for name in names}
    parcels = carrier()
    model = scripted({"Convert 255 to hex": [call("hex", {"query": "255"})] * 3})
    with FakeMessagesAPI(model) as api:
        options = offline_options(
            api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed(), hooks=hooks
        )
        async with ClaudeSDKClient(options) as client:
            await client.query("Convert 255 to hex")
            results = [message async for message in client.receive_response() if isinstance(message, ResultMessage)]
    assert [read(request) for request in api.model_requests()[1:]] == [NO_SUCH_TOOL] * 3  # the model's view
    assert results[0].result == "done" and results[0].terminal_reason == "completed"
    assert [name for name, _ in fired] == ["PostToolBatch"] * 6  # each batch once per matcher
    calls = {
        c["tool_use_id"]: (c["tool_name"], c["tool_input"], c["tool_response"])
        for _, e in fired
        for c in e["tool_calls"]
    }
    assert list(calls.values()) == [(HEX, {"query": "255"}, NO_SUCH_TOOL)] * 3


async def test_a_model_that_keeps_calling_a_tool_it_lacks_is_refused_then_stopped(tmp_path: Path) -> None:
    """Two failures, then the same call is refused: the model reads the refusal after Claude Code's error; the 3rd
    refusal ends the turn, with no 6th model call."""
    parcels = carrier()
    guard = RepeatGuardHooks()
    with FakeMessagesAPI(keep_calling(HEX, {"query": "255"})) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Convert 255 to hex"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
            max_turns=CEILING,
        )
    requests = api.model_requests()
    assert len(requests) == 5
    texts = [read(request) for request in requests[1:]]
    assert texts[:2] == [NO_SUCH_TOOL] * 2
    for text in texts[2:]:  # Claude Code's error, then the guard's refusal
        assert text.startswith(NO_SUCH_TOOL + "\n\n<system-reminder>\n" + NOTE + REFUSED)
    stop = await stop_of(turn.result, guard=guard)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert turn.result.result == stop.message and turn.result.terminal_reason == "hook_stopped"
    assert turn.seen == [NO_SUCH_TOOL] * 5  # the caller's stream holds Claude Code's errors only
    assert parcels.runs == {}


async def test_failures_of_a_tool_it_lacks_count_in_a_row(tmp_path: Path) -> None:
    """max_errors_in_a_row=2: two failed calls of hex end the turn at the second response's PostToolBatch, before a
    third model call (as for any failures: the guard records a response once its calls have all resolved)."""
    parcels, guard = carrier(), RepeatGuardHooks(max_errors_in_a_row=2)
    with FakeMessagesAPI(keep_calling(HEX, {"query": "255"})) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Convert 255 to hex"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
            max_turns=CEILING,
        )
    assert len(api.model_requests()) == 2
    stop = await stop_of(turn.result, guard=guard)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert turn.result.terminal_reason == "hook_stopped" and turn.seen == [NO_SUCH_TOOL] * 2
    assert turn.result.result == stop.message


async def test_a_response_with_a_tool_it_has_and_one_it_lacks_counts_each_once(tmp_path: Path) -> None:
    """Two responses each call track_parcel and hex: track_parcel runs both times (the guard's PostToolBatch counts
    only the call no PreToolUse saw), nothing is refused, and the model's answer ends the turn."""
    parcels = carrier()
    both = [*call("track_parcel"), tool_use(HEX, {"query": "255"})]
    guard = RepeatGuardHooks()
    with FakeMessagesAPI(scripted({"Track FR-7731 in hex": [both, both]})) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Track FR-7731 in hex"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed(),
        )
    assert parcels.count("track_parcel") == 2
    assert sorted(turn.seen) == sorted([TRACKED, NO_SUCH_TOOL] * 2)
    assert not any("Refused" in read(request) for request in api.model_requests())
    assert turn.result.result == "done" and await stop_of(turn.result, guard=guard) is None


HEXER = "HEXER SUB-AGENT: convert."
"""The sub-agent's system prompt, by which the fake model tells its requests apart."""


def parent_then_hexer(request: dict[str, Any]) -> Reply:
    """The parent starts one sub-agent in the foreground, then answers; the sub-agent calls hex forever."""
    if HEXER in json.dumps(request.get("system")):
        return [tool_use(HEX, {"query": "255"})]
    if steps(request, "Convert 255 to hex") == 0:
        return [tool_use("Agent", {"description": "hex", "prompt": "Convert 255", "subagent_type": "hexer"})]
    return "done"


async def test_a_sub_agent_that_keeps_calling_a_tool_it_lacks_is_stopped_alone(tmp_path: Path) -> None:
    """The sub-agent's calls of hex count in its own state: it is stopped after 2 failures and 3 refused responses,
    and its parent's turn goes on to its answer."""
    parcels, guard = carrier(), RepeatGuardHooks()
    with FakeMessagesAPI(parent_then_hexer) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Convert 255 to hex"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=[*allowed(), "Agent"],
            tools=["Agent"],
            env={"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"},
            agents={  # maxTurns: a guard that fails to stop it fails this test rather than hanging it
                "hexer": AgentDefinition(description="Converts.", prompt=HEXER, tools=[TRACK], maxTurns=10)
            },
        )
    hexer = [request for request in api.model_requests() if HEXER in json.dumps(request.get("system"))]
    assert len(hexer) == 5  # 2 failures, 3 refused responses, no 6th call
    (started,) = [message for message in turn.messages if isinstance(message, TaskStartedMessage)]
    stop = await stop_of(turn.result, guard=guard, agent_id=started.task_id)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert turn.result.result == "done" and await stop_of(turn.result, guard=guard) is None  # the parent goes on
