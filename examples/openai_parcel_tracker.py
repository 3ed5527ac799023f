"""Stop an agent that repeats itself: the parcel tracker on the OpenAI Agents SDK, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier
in a loop, although the answer cannot change before it replies. The guard lets each turn call
track_parcel twice, refuses the 3rd call with a message the model reads as the tool's output, and
after 3 refusals ends the turn with its own message instead of another model call. A new turn starts
a new count.

    python examples/openai_parcel_tracker.py            # offline: a scripted model that keeps checking
    python examples/openai_parcel_tracker.py --live     # OpenAI's API (the default when OPENAI_API_KEY is set)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

from agents import Agent, AgentHooks, Runner, function_tool, set_tracing_disabled
from repeat_hooks_openai_agents import GuardState, guard_agent, stop_items, stop_of
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


@function_tool
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return f"{tracking_number}: in transit, last scan Lyon hub at 06:12"


# --- The model ------------------------------------------------------------------------------------------


def small_model(n: int, model: ScriptedModel) -> list[Any]:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    items = model.requests[-1].input
    last_user = next((i for i in reversed(items) if isinstance(i, dict) and i.get("role") == "user"), {})
    checked = any(
        isinstance(i, dict) and i.get("type") == "function_call_output" for i in items[items.index(last_user) :]
    )
    if "keep checking" in str(last_user.get("content", "")).lower() or not checked:
        return [tool_call("track_parcel", {"tracking_number": "FR-7731"}, model.new_call_id())]
    return [message("Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered.")]


def make_tracker(live: bool) -> Agent[GuardState]:
    """The guarded parcel tracker: OpenAI's model when ``live``, else the scripted small model."""
    tracker = Agent[GuardState](
        name="parcel-tracker",
        instructions="You track parcels with track_parcel. Answer in at most two sentences.",
        model="gpt-4.1-mini" if live else ScriptedModel(then=small_model),
        tools=[track_parcel],
        hooks=SHOW,
    )
    # Seed 004: per tool, 2 calls a turn; the 3rd is refused; after 3 refusals the turn ends.
    return guard_agent(tracker, match="tool", count="per_turn", max_calls=2, max_refusals=3)


# --- Showing what happened -------------------------------------------------------------------------------


class ShowRefusals(AgentHooks[GuardState]):
    """Agent hooks of your own (the guard calls them after its own work): print the guard's new refusals."""

    def __init__(self) -> None:
        self.shown = 0

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        """Fires before each model call: prints the refusals made since the last one."""
        self.show(context.context)

    def show(self, state: GuardState) -> None:
        """Prints the refusal events not shown yet."""
        for event in state.events[self.shown :]:
            if event.kind == "refusal":
                print(f"loop breaker: refused {event.tool}, call {event.count:g} of this turn")
        self.shown = len(state.events)


SHOW = ShowRefusals()


async def turn(agent: Agent[GuardState], state: GuardState, conversation: list[Any], text: str) -> None:
    """Run one turn and say how it ended, and why."""
    result = await Runner.run(agent, [*conversation, {"role": "user", "content": text}], context=state)
    SHOW.show(state)  # the last refusals, made after the last model call
    # The SDK's history ends with the last refusal; stop_items adds what the user was told, for the next turn.
    conversation[:] = [*result.to_input_list(), *stop_items(result)]
    stop = stop_of(result)  # the guard's Stop when it ended this run (final_output is then its message)
    if stop is not None:
        print(f"loop breaker: ended the turn ({stop.reason}) after {state.turn.model_calls} model calls")
        print(f"agent (stopped: {stop.reason}): {result.final_output}")
    else:
        print(f"agent (answered): {result.final_output}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use OpenAI's API (needs OPENAI_API_KEY)")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if a key is set")
    args = parser.parse_args()
    live = (args.live or bool(os.environ.get("OPENAI_API_KEY"))) and not args.offline
    if live and not os.environ.get("OPENAI_API_KEY"):
        parser.error("--live needs OPENAI_API_KEY")
    if not live:
        set_tracing_disabled(True)  # no key: nowhere to send traces
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'OpenAI API (gpt-4.1-mini)' if live else 'scripted, offline'}")

    agent = make_tracker(live)
    state = GuardState()  # one per conversation: the guard's counts, kept in the run context
    conversation: list[Any] = []
    print("--- turn 1")
    await turn(agent, state, conversation, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
    print("--- turn 2")
    await turn(agent, state, conversation, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    asyncio.run(main())
