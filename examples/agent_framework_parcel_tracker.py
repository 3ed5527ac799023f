"""Stop an agent that repeats itself: the parcel tracker on Microsoft Agent Framework, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier in a loop,
although the answer cannot change before it replies. The guard (one agent middleware, which brings its chat and
function middleware into each run) lets each turn call track_parcel twice, refuses the 3rd call with a message the
model reads as the function's result, and after 3 refusals ends the run with its own final message instead of
another model call. A new run starts a new count. The guard's state lives in the run's ``AgentSession.state``; pass
--session FILE to keep the conversation (and the counts) as ``session.to_dict()`` JSON in a file.

    python examples/agent_framework_parcel_tracker.py                 # offline: a scripted model that keeps checking
    python examples/agent_framework_parcel_tracker.py --live          # OpenAI (agent-framework-openai, OPENAI_API_KEY)
    python examples/agent_framework_parcel_tracker.py --session ./parcels.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_framework import Agent, AgentSession, Message, tool
from repeat_hooks_agent_framework import RepeatGuardMiddleware, read_state, stop_of
from repeat_hooks_agent_framework.testing import Reply, ScriptedClient, function_call, tool_results

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


def small_model(client: ScriptedClient, messages: Sequence[Message]) -> Reply:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    asked = max(i for i, m in enumerate(messages) if m.role == "user")
    checked = any(c.type == "function_result" for m in messages[asked + 1 :] for c in m.contents)
    if "keep checking" in messages[asked].text.lower() or not checked:
        return [function_call("track_parcel", {"tracking_number": "FR-7731"})]
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


def make_agent(live: bool) -> Agent[Any]:
    """The parcel tracker, guarded: OpenAI when ``live``, else the scripted small model."""
    if live:
        from agent_framework.openai import OpenAIChatClient

        client: Any = OpenAIChatClient()
    else:
        client = ScriptedClient(then=small_model)
    guard = RepeatGuardMiddleware(Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3))  # seed 004
    return Agent(
        client=client,
        name="parcel_tracker",
        instructions="You track parcels with track_parcel. Answer in at most two sentences.",
        tools=[track_parcel],
        middleware=[guard],
    )


# --- One turn, as the caller sees it --------------------------------------------------------------------


async def turn(agent: Agent[Any], session: AgentSession, text: str) -> None:
    """Run one turn and say how it ended, and why, from what the caller receives."""
    response = await agent.run(text, session=session)
    for result in tool_results(response):
        if result.startswith("Refused:"):
            print("loop breaker: refused track_parcel")
    stop = stop_of(response)  # how the guard ended this run, if it did
    if stop is not None:
        model_calls = read_state(session).turn.responses
        print(f"loop breaker: ended the turn ({stop.reason}) after {model_calls} model calls")
        print(f"agent (stopped: {stop.reason}): {response.text}")
    else:
        print(f"agent (answered): {response.text}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use OpenAI (agent-framework-openai, OPENAI_API_KEY)")
    parser.add_argument("--session", type=Path, help="a JSON file to keep the conversation in (session.to_dict())")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'OpenAI' if args.live else 'scripted, offline'}")
    agent = make_agent(args.live)
    saved = args.session is not None and args.session.exists()
    session = AgentSession.from_dict(json.loads(args.session.read_text())) if saved else agent.create_session()
    print("--- turn 1")
    await turn(agent, session, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
    print("--- turn 2")
    await turn(agent, session, "Check FR-7731 once more.")
    if args.session is not None:
        args.session.write_text(json.dumps(session.to_dict()))
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    asyncio.run(main())
