"""A chat service as a platform team runs one: FastAPI under uvicorn with several worker processes, the OpenAI Agents
adapter on the real ``Runner`` loop (a scripted model), the conversations' guard states in a shared store.

``POST /chat`` takes ``{"conversation": ..., "message": ...}`` and the header ``Idempotency-Key`` (the client's id of
the request, the same on every retry of it), which names the guard's turn; the store key is the conversation.
Configured by the environment: ``SERVICE_STORE`` (``sqlite:///path`` or a ``redis://`` URL), ``SERVICE_RUNS`` (a
file where each tool run is appended, as ``<pid> <conversation> <tool>``) and ``SERVICE_CRASH`` (a folder: the first
``place_order`` of each conversation kills its worker with ``SIGKILL`` right after placing the order, before the
guard hears how it went, leaving a marker so that the retry does not crash again).
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool
from fastapi import FastAPI, Header
from pydantic import BaseModel
from repeat_hooks_openai_agents import guard_agent, stop_of
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

from repeat_hooks.kit import current_request, request

RUNS = Path(os.environ["SERVICE_RUNS"])
CRASH = Path(os.environ["SERVICE_CRASH"])


def _store() -> Any:
    url = os.environ["SERVICE_STORE"]
    if url.startswith("sqlite:///"):
        from repeat_hooks.stores.sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:///"))
    from repeat_hooks.stores.redis import RedisStore

    return RedisStore.from_url(url)


STORE = _store()


def _ran(tool: str) -> None:
    conversation = current_request().conversation_id
    with RUNS.open("a") as runs:
        fcntl.flock(runs, fcntl.LOCK_EX)
        runs.write(f"{os.getpid()} {conversation} {tool}\n")
        runs.flush()


@function_tool
def track_parcel(tracking_number: str) -> str:
    """Where a parcel is."""
    _ran("track_parcel")
    return f"{tracking_number}: in transit"


@function_tool
def place_order(item: str) -> str:
    """Place an order."""
    _ran("place_order")
    marker = CRASH / f"{current_request().conversation_id}.crashed"
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)  # the order is placed; the worker dies before the guard hears it
    return f"order for {item} placed"


OUTPUT = "function_call_output"
"""A tool's output as the model reads it (the Responses format)."""


class Chat(BaseModel):
    conversation: str
    message: str


app = FastAPI()


@app.post("/chat")
async def chat(body: Chat, idempotency_key: str = Header()) -> dict[str, Any]:
    # What the model does for this message (a real model, given the same history, asks for the same calls).
    model = ScriptedModel(
        [tool_call("track_parcel", {"tracking_number": "FR-7731"}, "c1")],
        [tool_call("place_order", {"item": "box"}, "c2")],
        [message("Your box is ordered.")],
    )
    agent = guard_agent(
        Agent(name="shop", model=model, tools=[track_parcel, place_order]),
        store=STORE,
        destructive=["place_order"],
        read_only=["track_parcel"],
    )
    with request(conversation_id=body.conversation, turn_id=idempotency_key):
        result = await Runner.run(agent, body.message)
    stop = stop_of(result)
    last = model.requests[-1].input  # the conversation as the model last read it
    told = [
        str(item["output"]) for item in last if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return {"answer": str(result.final_output), "stopped": stop is not None, "tool_outputs": told, "pid": os.getpid()}
