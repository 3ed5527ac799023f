"""Stop an agent that repeats itself: the parcel tracker on Google ADK, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier
in a loop, although the answer cannot change before it replies. The guard (a Runner plugin) lets each
turn call track_parcel twice, refuses the 3rd call with a message the model reads as the tool's
response, and after 3 refusals ends the turn with its own final message instead of another model call.
A new invocation starts a new count. The guard's state lives in the session (here in memory; pass
--db to keep sessions in SQLite or Postgres, shared by every process that serves them).

    python examples/adk_parcel_tracker.py            # offline: a scripted model that keeps checking
    python examples/adk_parcel_tracker.py --live     # Gemini (the default when GOOGLE_API_KEY is set)
    python examples/adk_parcel_tracker.py --db sqlite+aiosqlite:///parcels.db
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.genai import types
from repeat_hooks_google_adk import RepeatGuardPlugin, read_state, stop_of
from repeat_hooks_google_adk.testing import Reply, ScriptedLlm, function_call

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


def track_parcel(tracking_number: str) -> dict[str, Any]:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return {"status": "in transit", "last_scan": "Lyon hub at 06:12"}


# --- The model ------------------------------------------------------------------------------------------


def small_model(model: ScriptedLlm, request: LlmRequest) -> Reply:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    contents = request.contents
    asked = max((i for i, c in enumerate(contents) if c.role == "user" and any(p.text for p in c.parts or [])))
    question = "".join(p.text or "" for p in contents[asked].parts or [])
    checked = any(p.function_response for c in contents[asked + 1 :] for p in c.parts or [])
    if "keep checking" in question.lower() or not checked:
        return [function_call("track_parcel", {"tracking_number": "FR-7731"}, model.new_call_id())]
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


def make_runner(live: bool, sessions: BaseSessionService) -> Runner:
    """The parcel tracker behind a guarded Runner: Gemini when ``live``, else the scripted small model."""
    tracker = LlmAgent(
        name="parcel_tracker",
        instruction="You track parcels with track_parcel. Answer in at most two sentences.",
        model="gemini-2.5-flash" if live else ScriptedLlm(then=small_model),
        tools=[track_parcel],
    )
    guard = RepeatGuardPlugin(match="tool", max_calls=2, max_refusals=3)  # seed 004: per tool, 2 a turn
    return Runner(app=App(name="parcels", root_agent=tracker, plugins=[guard]), session_service=sessions)


# --- One turn, as the caller sees it --------------------------------------------------------------------


async def turn(runner: Runner, session_id: str, text: str) -> None:
    """Run one invocation and say how it ended, and why, from the events the caller receives."""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    answer, last = "", None
    async for event in runner.run_async(user_id="me", session_id=session_id, new_message=message):
        last = event
        for response in event.get_function_responses():
            error = (response.response or {}).get("error", "")
            if str(error).startswith("Refused:"):
                print(f"loop breaker: refused {response.name}")
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(part.text or "" for part in event.content.parts)
    stop = stop_of(last) if last is not None else None  # how the guard ended this invocation, if it did
    if stop is not None:
        session = await runner.session_service.get_session(app_name="parcels", user_id="me", session_id=session_id)
        assert session is not None
        model_calls = read_state(session).turn.responses
        print(f"loop breaker: ended the turn ({stop.reason}) after {model_calls} model calls")
        print(f"agent (stopped: {stop.reason}): {answer}")
    else:
        print(f"agent (answered): {answer}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use Gemini (needs GOOGLE_API_KEY)")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if a key is set")
    parser.add_argument("--db", help="a DatabaseSessionService URL (sqlite+aiosqlite:///..., postgresql+asyncpg://...)")
    args = parser.parse_args()
    live = (args.live or bool(os.environ.get("GOOGLE_API_KEY"))) and not args.offline
    if live and not os.environ.get("GOOGLE_API_KEY"):
        parser.error("--live needs GOOGLE_API_KEY")
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'Gemini (gemini-2.5-flash)' if live else 'scripted, offline'}")

    sessions: BaseSessionService = InMemorySessionService()
    if args.db:
        from google.adk.sessions import DatabaseSessionService

        sessions = DatabaseSessionService(args.db)
    runner = make_runner(live, sessions)
    session = await sessions.create_session(app_name="parcels", user_id="me")
    print("--- turn 1")
    await turn(runner, session.id, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
    print("--- turn 2")
    await turn(runner, session.id, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    asyncio.run(main())
