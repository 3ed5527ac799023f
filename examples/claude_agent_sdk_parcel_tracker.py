"""Stop an agent that repeats itself: the parcel tracker on the Claude Agent SDK, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier in a
loop, although the answer cannot change before it replies. The guard (hooks, and a transport that shows them
each model response) lets each turn call track_parcel twice, refuses the 3rd call with a message the model
reads as the tool's result, and after 3 refusals ends the turn at the next call, with its own message as
the result's text. A new turn (here the same session, resumed) starts a new count.

The agent loop is Claude Code's, the real CLI the SDK bundles. Offline (the default), its model is a scripted
fake Messages API on 127.0.0.1 that this script starts, and the CLI talks to nothing else.

    python examples/claude_agent_sdk_parcel_tracker.py           # offline: a scripted model that keeps checking
    python examples/claude_agent_sdk_parcel_tracker.py --live    # Claude (the default when ANTHROPIC_API_KEY is set)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ResultMessage,
    ToolResultBlock,
    UserMessage,
    create_sdk_mcp_server,
    tool,
)
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, read_state, result_text, stop_of
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, Reply, messages_text, offline_options, tool_use

TOOL = "mcp__parcels__track_parcel"

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


@tool("track_parcel", "The carrier's latest scan of a parcel.", {"tracking_number": str})
async def track_parcel(arguments: dict[str, Any]) -> dict[str, Any]:
    print(f"carrier: tracked {arguments['tracking_number']}")
    TRACKED.append(arguments["tracking_number"])
    return {"content": [{"type": "text", "text": "FR-7731: in transit, last scan Lyon hub at 06:12"}]}


# --- The model, offline ------------------------------------------------------------------------------


def small_model(request: dict[str, Any]) -> Reply:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    messages = request["messages"]
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user" and "FR-7731" in messages_text(m))
    checked = any(m["role"] == "assistant" for m in messages[asked:])
    if "keep checking" in messages_text(messages[asked]).lower() or not checked:
        return [tool_use(TOOL, {"tracking_number": "FR-7731"})]
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


@contextlib.contextmanager
def claude_options(live: bool) -> Iterator[ClaudeAgentOptions]:
    """The agent's options: Claude itself when ``live``, else the real CLI against the scripted model."""
    agent: dict[str, Any] = {
        "system_prompt": "You track parcels with track_parcel. Answer in at most two sentences.",
        "mcp_servers": {"parcels": create_sdk_mcp_server("parcels", tools=[track_parcel])},
        "allowed_tools": [TOOL],
        "tools": [],  # none of Claude Code's own tools: only the carrier
        "permission_mode": "dontAsk",
        "setting_sources": [],
    }
    with tempfile.TemporaryDirectory(prefix="parcels-") as home:
        if live:
            yield ClaudeAgentOptions(cwd=home, **agent)
        else:
            with FakeMessagesAPI(small_model) as api:
                yield offline_options(api, home, **agent)


# --- One turn, as the caller sees it --------------------------------------------------------------------


async def turn(guard: RepeatGuardHooks, options: ClaudeAgentOptions, text: str) -> str:
    """Run one turn and say how it ended, and why, from the messages the caller receives; the session id."""
    result: ResultMessage | None = None
    async for message in guard.query(prompt=text, options=options):
        if isinstance(message, UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, ToolResultBlock) and result_text(block.content).startswith("Refused:"):
                    print("loop breaker: refused track_parcel")
        elif isinstance(message, ResultMessage):
            result = message
    assert result is not None
    stop = await stop_of(result, guard=guard)  # how the guard ended this turn, if it did
    if stop is not None:
        state = await read_state(result, guard=guard)
        response = state.turn.responses + 1 if state is not None else 0  # the responses let through, then this one
        print(f"loop breaker: ended the turn ({stop.reason}) at model response {response}, before its call ran")
        print(f"agent (stopped: {stop.reason}): {result.result}")
    else:
        print(f"agent (answered): {result.result}")
    return result.session_id


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use Claude (needs ANTHROPIC_API_KEY)")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if a key is set")
    args = parser.parse_args()
    live = (args.live or bool(os.environ.get("ANTHROPIC_API_KEY"))) and not args.offline
    if live and not os.environ.get("ANTHROPIC_API_KEY"):
        parser.error("--live needs ANTHROPIC_API_KEY")
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'Claude (the CLI default)' if live else 'scripted, offline'}")

    guard = RepeatGuardHooks(match="tool", count="per_turn", max_calls=2, max_refusals=3)  # seed 004
    with claude_options(live) as options:
        print("--- turn 1")
        session = await turn(guard, options, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
        print("--- turn 2 (the same session, resumed)")
        options.resume = session
        await turn(guard, options, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    asyncio.run(main())
