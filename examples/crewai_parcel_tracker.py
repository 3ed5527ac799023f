"""Stop an agent that repeats itself: the parcel tracker on CrewAI, with repeat-hooks.

Run it with the CrewAI venv's Python: ``.venv-crewai/bin/python examples/crewai_parcel_tracker.py`` (CrewAI pins
openai 2.x, which the main venv's OpenAI Agents SDK rules out).

Ask a parcel-tracking crew to "keep checking until the parcel is delivered" and its agent polls the carrier in a
loop, although the answer cannot change before it replies. The guard (CrewAI tool-call and model-call hooks, attached
to this crew only) lets each turn (each kickoff) call track_parcel twice, refuses the 3rd call with a message the
model reads as the tool's result, and after 3 refusals ends the agent's task with its own final message instead of
another model call. A new kickoff starts a new count.

    .venv-crewai/bin/python examples/crewai_parcel_tracker.py          # offline: a scripted model that keeps checking
    .venv-crewai/bin/python examples/crewai_parcel_tracker.py --live   # OpenAI's gpt-4o-mini (OPENAI_API_KEY)
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from crewai import Agent, Crew, Task
from crewai.tools import tool
from repeat_hooks_crewai import RepeatGuard, stop_of
from repeat_hooks_crewai.state import book_of
from repeat_hooks_crewai.testing import Reply, ScriptedLLM, tool_call, tool_results

from repeat_hooks import Policy

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


@tool("track_parcel")
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return "in transit, last scan: Lyon hub at 06:12"


# --- The model ------------------------------------------------------------------------------------------


def small_model(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Reply:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    question = " ".join(str(m.get("content")) for m in messages if m.get("role") == "user")
    checked = any(m.get("role") == "tool" for m in messages)
    if "keep checking" in question.lower() or not checked:
        return [tool_call("track_parcel", {"tracking_number": "FR-7731"})]
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


def make_crew(live: bool) -> Crew:
    """The parcel desk: one agent and one task (the user's message); OpenAI's model when ``live``."""
    agent = Agent(
        role="parcel tracker",
        goal="Tell the user where their parcel is, with track_parcel. Answer in at most two sentences.",
        backstory="The carrier's support desk.",
        llm="gpt-4o-mini" if live else ScriptedLLM(model="scripted", then=small_model),
        tools=[track_parcel],
        verbose=False,
    )
    task = Task(description="{message}", expected_output="A short answer.", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False)  # CrewAI's tool cache is opt-in: left off


# --- One turn, as the caller sees it --------------------------------------------------------------------


def turn(crew: Crew, text: str) -> None:
    """Run one turn (one kickoff) and say how it ended, and why, from what the caller receives."""
    output = crew.kickoff(inputs={"message": text})
    for result in tool_results(crew.agents[0]):
        if result.startswith("Refused:"):
            print("loop breaker: refused track_parcel")
    stop = stop_of(crew)  # how the guard ended this turn, if it did
    if stop is not None:
        book = book_of(crew)
        responses = book.states["parcel tracker"].turn.responses if book is not None else 0
        print(f"loop breaker: ended the turn ({stop.reason}) after {responses} model calls")
        print(f"agent (stopped: {stop.reason}): {output.raw}")
    else:
        print(f"agent (answered): {output.raw}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use OpenAI's gpt-4o-mini (OPENAI_API_KEY)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'OpenAI gpt-4o-mini' if args.live else 'scripted, offline'}")
    crew = make_crew(args.live)
    with RepeatGuard(Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)).attach(crew):  # seed 004
        print("--- turn 1")
        turn(crew, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
        print("--- turn 2")
        turn(crew, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    main()
