"""Stop an agent that repeats itself: the parcel tracker on pydantic-ai, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier
in a loop, although the answer cannot change before it replies. ``RepeatGuard`` lets each run call
track_parcel twice, refuses the 3rd call with a message the model reads as the tool's return, and
after 3 refusals ends the run with its own message instead of another model call. The next run (a
new turn of the same conversation) starts a new count.

    python examples/pydantic_ai_parcel_tracker.py                 # offline: a scripted model that keeps checking
    python examples/pydantic_ai_parcel_tracker.py --live          # a real model (needs a provider key)
    python examples/pydantic_ai_parcel_tracker.py --model anthropic:claude-haiku-4-5

Live mode uses ``openai:gpt-4.1-mini`` when OPENAI_API_KEY is set, ``anthropic:claude-haiku-4-5`` when
ANTHROPIC_API_KEY is; install the provider's extra (``pip install "pydantic-ai-slim[openai]"``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturnPart, UserPromptPart
from repeat_hooks_pydantic_ai import Policy, RepeatGuard, refusals_of, stop_of
from repeat_hooks_pydantic_ai.state import GUARD_NAME
from repeat_hooks_pydantic_ai.testing import ScriptedModel, call

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


async def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return f"{tracking_number}: in transit, last scan Lyon hub at 06:12"


# --- The model ----------------------------------------------------------------------------------------


def small_model() -> ScriptedModel:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""

    def script(step: int) -> list[Any]:
        messages: list[ModelMessage] = model.requests[-1]
        prompts = [
            (i, part.content)
            for i, message in enumerate(messages)
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]
        since, prompt = prompts[-1]
        checked = any(
            isinstance(part, ToolReturnPart)
            for message in messages[since:]
            if isinstance(message, ModelRequest)
            for part in message.parts
        )
        if "keep checking" in str(prompt).lower() or not checked:
            return [call("track_parcel", {"tracking_number": "FR-7731"}, step=step)]
        return [TextPart("Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered.")]

    model = ScriptedModel(script)
    return model


def make_tracker(model: Any) -> Agent[None, str]:
    """The guarded parcel tracker. Seed 004's rule: per tool, 2 calls a turn; 3 refusals end the turn."""
    return Agent(
        model,
        instructions="You track parcels with track_parcel. Answer in at most two sentences.",
        tools=[track_parcel],
        capabilities=[RepeatGuard(Policy(match="tool", max_calls=2, max_refusals=3))],
    )


# --- One turn ---------------------------------------------------------------------------------------------


async def turn(agent: Agent[None, str], history: list[ModelMessage], text: str) -> list[ModelMessage]:
    """Run one turn (one ``agent.run``), say how it ended and why; returns the conversation so far."""
    result = await agent.run(text, message_history=history)
    for tool, refusal in refusals_of(result):
        print(f"loop breaker: refused {tool} ({refusal.reason.value})")
    stop = stop_of(result)
    if stop is not None:
        # The guard's closing response (in place of a model call) is not a model call.
        answered = [m for m in result.new_messages() if isinstance(m, ModelResponse) and m.model_name != GUARD_NAME]
        print(f"loop breaker: ended the turn ({stop.reason}) after {len(answered)} model calls")
        print(f"agent (stopped: {stop.reason}): {result.output}")
    else:
        print(f"agent (answered): {result.output}")
    return result.all_messages()


def live_model(requested: str | None) -> str | None:
    """The model name for live mode: ``--model``, else one for the provider key that is set."""
    if requested:
        return requested
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4.1-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-haiku-4-5"
    return None


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use a real model (needs a provider key)")
    parser.add_argument("--model", default=None, help="a pydantic-ai model name, e.g. openai:gpt-4.1-mini")
    args = parser.parse_args()
    name = live_model(args.model) if (args.live or args.model) else None
    if (args.live or args.model) and name is None:
        parser.error("--live needs OPENAI_API_KEY or ANTHROPIC_API_KEY (or --model with its provider's key)")
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {name or 'scripted, offline'}")

    agent = make_tracker(name or small_model())
    print("--- turn 1")
    history = await turn(agent, [], "Parcel FR-7731 is due today. Keep checking until it is delivered.")
    print("--- turn 2")
    await turn(agent, history, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    asyncio.run(main())
