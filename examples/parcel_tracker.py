"""Stop an agent that repeats itself: the parcel tracker of the Mistral how-to, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier
in a loop, although the answer cannot change before it replies. The guard lets each turn call
track_parcel twice, refuses the 3rd call with a message the model reads, and after 3 refusals skips
the next model call: the turn ends. A new turn starts a new count.

    python examples/parcel_tracker.py           # offline: a scripted model that keeps checking
    python examples/parcel_tracker.py --live    # Mistral's API (needs MISTRAL_API_KEY; also the default when it is set)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

from mistralai.agents import agents
from repeat_hooks_mistral import StopRepeatedCalls, events_of
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, calls_this_turn, last_user_text

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


@agents.tool
def track_parcel(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return {"tracking_number": tracking_number, "status": "in transit", "last_scan": "Lyon hub, 06:12"}


# --- The guard ----------------------------------------------------------------------------------------
# StopRepeatedCalls is the how-to's hook: per tool, 2 calls a turn; the 3rd is refused; 3 refusals end the
# turn. Settings are class variables (policy, store, cost, fail...): the hook object holds nothing, so the SDK
# may rebuild it anywhere (per hook point locally, per activity when deployed). The counters live in
# ParcelGuard.store. This subclass only prints each refusal.


class ParcelGuard(StopRepeatedCalls):
    """The how-to's guard, printing what it refused."""

    async def pre_tool_call(self, ctx: Any, call: Any) -> Any:
        """The guard's decision, printed when it is a refusal."""
        decision = await super().pre_tool_call(ctx, call)
        if isinstance(decision, agents.hook.PreToolCallHookSkip):
            refused = (await events_of(ctx.session.id, guard=ParcelGuard))[-1]
            print(f"loop breaker: refused {refused.tool}, call {refused.count:g} of this turn")
        return decision


# --- The model ----------------------------------------------------------------------------------------


def small_model(request: Any) -> str | ToolUse:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    if "keep checking" in last_user_text(request).lower() or calls_this_turn(request) == 0:
        return ToolUse("track_parcel", {"tracking_number": "FR-7731"})
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


def make_tracker(live: bool) -> agents.Agent:
    """The parcel tracker: Mistral's model when ``live``, else the scripted small model."""
    options: dict[str, Any] = {"model": "mistral-medium-latest"}
    if not live:
        scripted = ScriptedModel(small_model, name="parcel-tracker-offline")
        options = {"model": scripted.name, "completion": scripted.completion()}
    return agents.Agent(
        **options,
        name="parcel-tracker",
        instructions=(
            "You track parcels with track_parcel. Answer in at most two sentences. "
            "You cannot check again later: say so."
        ),
        builtins=agents.Builtins.none(),
        max_iterations=20,
        harness=agents.Harness(tools=[track_parcel], hooks=[ParcelGuard()]),
    )


async def show(session: Any, question: str) -> None:
    """Run one turn and say how it ended, and why."""
    # mistralai-agents 1.1 drops the message a hook ends a turn with: ParcelGuard.run reads the stop
    # from the guard's store and returns it, with its message as the turn's text.
    result, stop = await ParcelGuard.run(session, question)
    if stop is not None:
        print(f"loop breaker: ended the turn ({stop.reason})")
        print(f"agent (stopped: {stop.reason}): {result.text}")
    else:
        ended = "answered" if result.stop_reason == "completed" else result.stop_reason
        print(f"agent ({ended}): {result.text}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use Mistral's API (needs MISTRAL_API_KEY)")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if a key is set")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # store errors, not each refusal
    live = (args.live or bool(os.environ.get("MISTRAL_API_KEY"))) and not args.offline
    if live and not os.environ.get("MISTRAL_API_KEY"):
        parser.error("--live needs MISTRAL_API_KEY")
    print(f"model: {'Mistral API' if live else 'scripted, offline'}")

    async with make_tracker(live).local_runtime() as tracker, await tracker.create_session() as session:
        print("--- turn 1")
        await show(session, "Parcel FR-7731 is due today. Keep checking until it is delivered, then tell me.")
        print("--- turn 2")
        await show(session, "Check FR-7731 once more.")

    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    asyncio.run(main())
