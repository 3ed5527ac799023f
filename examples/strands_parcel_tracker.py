"""Stop an agent that repeats itself: the parcel tracker on Strands Agents, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier
in a loop, although the answer cannot change before it replies. The guard (a Strands hook provider) lets
each turn call track_parcel twice, refuses the 3rd call with a message the model reads as the tool's
result, and after 3 refusals ends the turn with its own final message instead of another model call.
A new turn starts a new count. The guard's state lives in the agent's own ``agent.state``; pass
--sessions DIR to keep the conversation (and the counts) in a Strands FileSessionManager directory.

    python examples/strands_parcel_tracker.py               # offline: a scripted model that keeps checking
    python examples/strands_parcel_tracker.py --live        # Strands' default model (Amazon Bedrock: AWS credentials)
    python examples/strands_parcel_tracker.py --sessions ./sessions
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from repeat_hooks_strands import RepeatGuardHooks, read_state, stop_of
from repeat_hooks_strands.testing import Reply, ScriptedModel, tool_use
from strands import Agent, tool
from strands.session import FileSessionManager
from strands.types.content import Messages

from repeat_hooks import Policy

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


@tool
def track_parcel(tracking_number: str) -> dict[str, Any]:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return {"status": "in transit", "last_scan": "Lyon hub at 06:12"}


# --- The model ------------------------------------------------------------------------------------------


def small_model(model: ScriptedModel, messages: Messages) -> Reply:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user" and any("text" in b for b in m["content"]))
    question = "".join(block.get("text", "") for block in messages[asked]["content"])
    checked = any("toolResult" in block for m in messages[asked + 1 :] for block in m["content"])
    if "keep checking" in question.lower() or not checked:
        return [tool_use("track_parcel", {"tracking_number": "FR-7731"})]
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


def make_agent(live: bool, sessions: str | None) -> Agent:
    """The parcel tracker, guarded: Strands' default model when ``live``, else the scripted small model."""
    guard = RepeatGuardHooks(Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3))  # seed 004
    return Agent(
        model=None if live else ScriptedModel(then=small_model),
        system_prompt="You track parcels with track_parcel. Answer in at most two sentences.",
        tools=[track_parcel],
        hooks=[guard],
        session_manager=FileSessionManager(session_id="parcels", storage_dir=sessions) if sessions else None,
        callback_handler=None,
    )


# --- One turn, as the caller sees it --------------------------------------------------------------------


def turn(agent: Agent, text: str) -> None:
    """Run one turn and say how it ended, and why, from what the caller receives."""
    start = len(agent.messages)
    result = agent(text)
    for message in agent.messages[start:]:
        for block in message["content"]:
            tool_result = block.get("toolResult")
            if tool_result is not None and tool_result["content"][0].get("text", "").startswith("Refused:"):
                print("loop breaker: refused track_parcel")
    answer = str(result).strip()
    stop = stop_of(result)  # how the guard ended this turn, if it did
    if stop is not None:
        model_calls = read_state(agent).turn.responses
        print(f"loop breaker: ended the turn ({stop.reason}) after {model_calls} model calls")
        print(f"agent (stopped: {stop.reason}): {answer}")
    else:
        print(f"agent (answered): {answer}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use Strands' default model (Amazon Bedrock)")
    parser.add_argument("--sessions", help="a FileSessionManager directory to keep the conversation in")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'Strands default (Amazon Bedrock)' if args.live else 'scripted, offline'}")
    agent = make_agent(args.live, args.sessions)
    print("--- turn 1")
    turn(agent, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
    print("--- turn 2")
    turn(agent, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    main()
