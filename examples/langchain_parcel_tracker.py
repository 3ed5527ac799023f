"""Stop an agent that repeats itself: the parcel tracker on LangChain's ``create_agent``, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier
in a loop, although the answer cannot change before it replies. The guard (an agent middleware) lets
each turn call track_parcel twice, refuses the 3rd call with a message the model reads as the tool's
result, and after 3 refusals ends the turn with its own message instead of another model call. The
counts live in the thread's checkpoint (SQLite here), so the next turn on the thread starts fresh and a
restarted process would carry on where this one stopped.

    python examples/langchain_parcel_tracker.py            # offline: a scripted model that keeps checking
    python examples/langchain_parcel_tracker.py --live     # a real model: REPEAT_HOOKS_MODEL (default
                                                           # openai:gpt-4.1-mini; pip install langchain-openai)
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from repeat_hooks_langchain import STATE_KEY, Policy, RepeatGuardMiddleware, guard_state_of, stop_of
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message

KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "MISTRAL_API_KEY")
"""A provider key in the environment makes --live the default."""

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


@tool
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return f"{tracking_number}: in transit, last scan Lyon hub at 06:12"


# --- The model ------------------------------------------------------------------------------------------


def small_model(messages: Sequence[BaseMessage]) -> AIMessage:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    last_user = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    checked = any(isinstance(m, ToolMessage) for m in messages[last_user:])
    if "keep checking" in messages[last_user].text.lower() or not checked:
        return call_message(("track_parcel", {"tracking_number": "FR-7731"}))
    return AIMessage(content="Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not delivered.")


def make_model(live: bool) -> BaseChatModel:
    """A real chat model when ``live`` (``REPEAT_HOOKS_MODEL``, a ``provider:model`` string), else the script."""
    if live:
        return init_chat_model(os.environ.get("REPEAT_HOOKS_MODEL", "openai:gpt-4.1-mini"))
    return ScriptedChatModel(then=small_model)


# --- Showing what happened -------------------------------------------------------------------------------


def turn(agent: Any, text: str, config: Any) -> None:
    """Run one turn (one ``stream`` of the graph), print the refusals as they happen and how it ended."""
    before = agent.get_state(config).values
    shown = len(guard_state_of(before).events) if STATE_KEY in before else 0  # a new thread has no state yet
    for update in agent.stream({"messages": [("user", text)]}, config, stream_mode="updates"):
        for node in update.values():
            saved = node.get(STATE_KEY) if isinstance(node, dict) else None
            if saved is None:
                continue
            events = guard_state_of(node).events
            for event in events[shown:]:
                if event.kind == "refusal":
                    print(f"loop breaker: refused {event.tool}, call {event.count:g} of this turn")
            shown = len(events)
    values = agent.get_state(config).values
    state, stop = guard_state_of(values), stop_of(values)
    final = values["messages"][-1].text
    if stop is not None:
        print(f"loop breaker: ended the turn ({stop.reason}) after {state.turn.model_calls} model calls")
        print(f"agent (stopped: {stop.reason}): {final}")
    else:
        print(f"agent (answered): {final}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use a real model (REPEAT_HOOKS_MODEL and its key)")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if a key is set")
    args = parser.parse_args()
    live = (args.live or any(os.environ.get(key) for key in KEYS)) and not args.offline
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {os.environ.get('REPEAT_HOOKS_MODEL', 'openai:gpt-4.1-mini') if live else 'scripted, offline'}")

    guard = RepeatGuardMiddleware(Policy(match="tool", max_calls=2, max_refusals=3))  # seed 004
    with tempfile.TemporaryDirectory() as directory:
        connection = sqlite3.connect(Path(directory) / "threads.sqlite", check_same_thread=False)
        agent = create_agent(
            make_model(live),
            tools=[track_parcel],
            system_prompt="You track parcels with track_parcel. Answer in at most two sentences.",
            middleware=[guard],
            checkpointer=SqliteSaver(connection),
        )
        config: Any = {"configurable": {"thread_id": "customer-42"}}
        print("--- turn 1")
        turn(agent, "Parcel FR-7731 is due today. Keep checking until it is delivered.", config)
        print("--- turn 2")
        turn(agent, "Check FR-7731 once more.", config)
        connection.close()
    print(f"calls that reached the carrier: {len(TRACKED)}")


if __name__ == "__main__":
    main()
