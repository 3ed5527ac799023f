"""Stop an agent that repeats itself: the parcel tracker on LlamaIndex, with repeat-hooks.

Ask a parcel-tracking agent to "keep checking until the parcel is delivered" and it polls the carrier in a
loop, although the answer cannot change before it replies. The guard lets each turn (each ``agent.run``) call
track_parcel twice, refuses the 3rd call with a message the model reads as the tool's result, and after 3
refusals ends the run with its own final message instead of another model call. A new run starts a new count.
The guard's state lives in the run's ``Context`` store; pass --context FILE to save the conversation (memory and
counts) with ``Context.to_dict()`` as JSON, and run again to go on from it.

    python examples/llama_index_parcel_tracker.py               # offline: a scripted model that keeps checking
    python examples/llama_index_parcel_tracker.py --live        # OpenAI (pip install llama-index-llms-openai)
    python examples/llama_index_parcel_tracker.py --context ./parcels.json
"""

# No `from __future__ import annotations` in a module defining LlamaIndex tools that take `ctx: Context`
# (LlamaIndex reads the annotation, function_tool.py:110); this one's tool takes none, so it would be harmless.
import argparse
import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from llama_index.core.agent.workflow import AgentOutput, FunctionAgent
from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.workflow import Context
from repeat_hooks_llama_index import RepeatGuard, read_state, stop_of
from repeat_hooks_llama_index.testing import Reply, Script, call

from repeat_hooks import Policy

# --- The carrier, faked -----------------------------------------------------------------------------
# In production, track_parcel calls the carrier's API. Here the parcel stays in transit, and TRACKED
# records every call that reached the carrier.

TRACKED: list[str] = []


async def track_parcel(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan of a parcel."""
    print(f"carrier: tracked {tracking_number}")
    TRACKED.append(tracking_number)
    return {"status": "in transit", "last_scan": "Lyon hub at 06:12"}


# --- The model ------------------------------------------------------------------------------------------


def small_model(script: Script, messages: Sequence[ChatMessage]) -> Reply:
    """What small models do: told to keep checking, they keep checking; else check once and answer."""
    asked = max(i for i, m in enumerate(messages) if m.role == "user")
    checked = any(m.role == "tool" for m in messages[asked + 1 :])
    if "keep checking" in (messages[asked].content or "").lower() or not checked:
        return [call("track_parcel", {"tracking_number": "FR-7731"})]
    return "Parcel FR-7731 is still in transit: last scan at the Lyon hub at 06:12, not yet delivered."


def make_agent(live: bool) -> FunctionAgent:
    """The parcel tracker, guarded: OpenAI when ``live``, else the scripted small model."""
    llm: LLM
    if live:
        from llama_index.llms.openai import OpenAI  # type: ignore[import-untyped,import-not-found,unused-ignore]

        llm = OpenAI(model="gpt-4o-mini")
    else:
        llm = Script(then=small_model).llm()
    guard = RepeatGuard(Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3))  # seed 004
    return guard.agent(
        FunctionAgent(
            name="parcel_tracker",
            system_prompt="You track parcels with track_parcel. Answer in at most two sentences.",
            tools=[track_parcel],
            llm=llm,
            streaming=False,
        )
    )


# --- One turn, as the caller sees it --------------------------------------------------------------------


async def turn(agent: FunctionAgent, ctx: Context, text: str) -> None:
    """Run one turn and say how it ended, and why, from what the caller receives."""
    output: AgentOutput = await agent.run(user_msg=text, ctx=ctx)
    for result in output.tool_calls:  # this run's tool results, as the model read them
        if str(getattr(result, "tool_output", "")).startswith("Refused:"):
            print("loop breaker: refused track_parcel")
    answer = str(output.response.content or "").strip()
    stop = stop_of(output)  # how the guard ended this run, if it did
    if stop is not None:
        model_calls = (await read_state(ctx, agent.name)).turn.responses
        print(f"loop breaker: ended the turn ({stop.reason}) after {model_calls} model calls")
        print(f"agent (stopped: {stop.reason}): {answer}")
    else:
        print(f"agent (answered): {answer}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use OpenAI (OPENAI_API_KEY)")
    parser.add_argument("--context", type=Path, help="a JSON file to keep the conversation's Context in")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")  # the guard logs each refusal at INFO
    print(f"model: {'OpenAI' if args.live else 'scripted, offline'}")
    agent = make_agent(args.live)
    saved = args.context is not None and args.context.exists()
    ctx = Context.from_dict(agent, json.loads(args.context.read_text())) if saved else Context(agent)
    print("--- turn 1")
    await turn(agent, ctx, "Parcel FR-7731 is due today. Keep checking until it is delivered.")
    print("--- turn 2")
    await turn(agent, ctx, "Check FR-7731 once more.")
    print(f"calls that reached the carrier: {len(TRACKED)}")
    if args.context is not None:
        args.context.write_text(json.dumps(ctx.to_dict()))


if __name__ == "__main__":
    asyncio.run(main())
