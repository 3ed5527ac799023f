"""The parcel tracker as deployed workers run it: the Mistral adapter's guard, its counters in Redis.

``agents run-worker examples/deploy/parcel_worker`` imports ``main.py``, which takes ``agent`` from
here. Every worker process imports this module; every hook call runs in a Temporal activity on
whichever worker picks it up, and rebuilds the hook from its class. So:

- the guard is a named ``RepeatGuardHook`` subclass with its settings in class variables and no
  instance attributes (rc11 refuses any other shape in deployed builds);
- its ``store`` is a ``RedisStore`` shared by every worker, built when this module is imported from
  ``REPEAT_HOOKS_REDIS_URL``: the worker's environment is the only configuration it has.

Offline by design: the model is scripted (``repeat_hooks_mistral.testing``) and decides each reply from
the conversation it is sent, never from memory of its own, since consecutive model calls of one turn may
run in different processes. The carrier is a stub that answers "in transit".

Environment:
    ``REPEAT_HOOKS_REDIS_URL``  the Redis every worker shares (default ``redis://127.0.0.1:6379/0``).
    ``PARCEL_WITNESS_LOG``     if set, a JSONL file that gets one line per carrier call and per model call,
                               with the worker's PID: what the demo and the test check the counts against.
    ``PARCEL_HOLD_SECONDS``    if set, the model call that follows the 2nd carrier result of a "keep
                               checking" turn waits this long on its first attempt, after writing a ``hold``
                               line: the window in which the demo kills that worker mid-turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import temporalio.activity
from mistralai.agents import agents
from repeat_hooks_mistral import Policy, RepeatGuardHook
from repeat_hooks_mistral.testing import Reply, ScriptedModel, ToolUse, calls_this_turn, last_user_text

from repeat_hooks.stores.redis import RedisStore

REDIS_URL_ENV = "REPEAT_HOOKS_REDIS_URL"
WITNESS_LOG_ENV = "PARCEL_WITNESS_LOG"
HOLD_SECONDS_ENV = "PARCEL_HOLD_SECONDS"

TRACKING_NUMBER = "FR-7731"
KEEP_CHECKING = "keep checking"
"""A user message with these words gets a model that loops on ``track_parcel`` (as small models do)."""
FIRST_TURN = f"Where is parcel {TRACKING_NUMBER}? Keep checking until it moves."
SECOND_TURN = f"Check {TRACKING_NUMBER} once more, then tell me where it is."
ANSWER = f"Parcel {TRACKING_NUMBER} is in transit; the carrier expects to deliver it tomorrow."
HOLD_AFTER_CARRIER_CALLS = 2
"""The model call that has seen this many carrier results in a looping turn is the one that holds."""


# -- what happened, seen from the workers ---------------------------------------------------------


def witness(event: str, **fields: Any) -> None:
    """Append one line to ``$PARCEL_WITNESS_LOG`` (nothing if unset): the event, this PID, the Temporal activity."""
    path = os.environ.get(WITNESS_LOG_ENV)
    if not path:
        return
    line: dict[str, Any] = {"event": event, "pid": os.getpid(), "time": round(time.time(), 3)}
    if temporalio.activity.in_activity():
        info = temporalio.activity.info()
        line |= {"workflow_id": info.workflow_id, "activity_id": info.activity_id, "attempt": info.attempt}
    line |= fields
    with Path(path).open("a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


# -- the carrier ------------------------------------------------------------------------------------


@agents.tool
def track_parcel(tracking_number: str) -> dict[str, str]:
    """Return the carrier's current status for a parcel."""
    witness("carrier", tracking_number=tracking_number)
    return {"tracking_number": tracking_number, "status": "in transit", "eta": "tomorrow"}


# -- the model --------------------------------------------------------------------------------------


def tool_messages(request: Any) -> list[str]:
    """Every tool message the model is sent, oldest first: carrier results and refusals."""
    return [message.content for message in request.messages if message.role == "tool"]


def tool_results_this_turn(request: Any) -> list[str]:
    """The tool messages the model is sent since the last user message."""
    results: list[str] = []
    for message in reversed(request.messages):
        if message.role == "user":
            break
        if message.role == "tool":
            results.append(message.content)
    return results[::-1]


def parcel_script(request: Any) -> Reply:
    """Decide one reply from the request alone: loop on ``track_parcel`` when told to keep checking,
    else check once and answer. The call id is unique in the session because the history only grows."""
    seen = calls_this_turn(request)
    if seen == 0 or KEEP_CHECKING in last_user_text(request).lower():
        call_id = f"call_{len(request.messages)}"
        return ToolUse("track_parcel", {"tracking_number": TRACKING_NUMBER}, call_id=call_id)
    return ANSWER


class ParcelModel(ScriptedModel):
    """The scripted model, plus a witness line per model call and the optional hold (see the module doc)."""

    async def complete(self, request: Any) -> AsyncIterator[Any]:
        results = tool_results_this_turn(request)
        witness(
            "model",
            turn_id=request.turn_id,
            tool_results=results,
            conversation_tool_messages=tool_messages(request),
            user=last_user_text(request),
        )
        hold = float(os.environ.get(HOLD_SECONDS_ENV) or 0)
        first_attempt = not temporalio.activity.in_activity() or temporalio.activity.info().attempt == 1
        looping = KEEP_CHECKING in last_user_text(request).lower()
        if hold and first_attempt and looping and len(results) == HOLD_AFTER_CARRIER_CALLS:
            witness("hold", turn_id=request.turn_id, seconds=hold)
            await asyncio.sleep(hold)
        async for delta in super().complete(request):
            yield delta


MODEL = ParcelModel(parcel_script, name="parcel-deploy-scripted")


# -- the guard --------------------------------------------------------------------------------------


def redis_store() -> RedisStore:
    """The store every worker shares, from ``$REPEAT_HOOKS_REDIS_URL`` (read once, when this module loads)."""
    url = os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/0")
    return RedisStore.from_url(url, prefix="repeat-hooks:parcel-deploy:", ttl=3600)


class ParcelGuard(RepeatGuardHook):
    """Seed 004's rule: 2 calls of a tool a turn; from the 3rd a refusal; after 3 refusals the turn ends."""

    policy = Policy(match="tool", max_calls=2, max_refusals=3)
    store = redis_store()


def build_agent(guard: type[RepeatGuardHook]) -> agents.Agent:
    """The parcel tracker with ``guard`` as its only hook."""
    return agents.Agent(
        model=MODEL.name,
        completion=MODEL.completion(),
        name="parcel-tracker",
        instructions="Track parcels for the user with track_parcel.",
        builtins=agents.Builtins.none(),
        max_iterations=12,
        harness=agents.Harness(tools=[track_parcel], hooks=[guard()]),
    )


agent = build_agent(ParcelGuard)
