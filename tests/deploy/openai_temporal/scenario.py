"""The OpenAI scenario shared by the test and the worker processes: script, settings, report types.

The script: a model stuck on one parcel, over two turns of one conversation. Model call 1 asks for
``track_parcel`` on PX-42 and PX-7 in parallel; every later call asks for PX-42 again. With
``max_calls=2`` and ``max_refusals=3`` the guard lets PX-42 run twice and PX-7 once, refuses PX-42
three times (model calls 3, 4 and 5) and ends turn 1 before a sixth model call, with the
``ignored_refusals`` stop message as the final output. Turn 2 ("Any news?") starts a new count:
PX-42 runs twice more (model calls 6 and 7), is refused at 8, 9 and 10, and the turn ends the same way.

The parcels, the kill points and the ledger every process appends to are ``temporal_harness``'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field
from temporal_harness import OTHER_PARCEL, PROMPTS, STUCK_PARCEL

from repeat_hooks import GuardEvent, Stop

TASK_QUEUE = "repeat-hooks-openai-temporal"
MODEL_NAME = "scripted-parcel-model"
"""The agent's model name; the workers' ``ScriptedModelProvider`` serves it."""
WORKFLOW_NAME = "GuardedParcelConversation"
POLICY: dict[str, Any] = {"count": "per_turn", "max_calls": 2, "max_refusals": 3}
"""The guard's settings (``repeat_hooks.Policy`` fields), sent as workflow input: every replay uses the same."""
MAX_SCRIPTED_STEPS = 20
"""Past this many model calls the scripted model gives up with a text answer (a guard that never stops)."""
GIVE_UP = "I give up: the tracking service keeps saying the same thing."


def script(step: int) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the model asks for at model call ``step`` (1-based); ``[]`` means answer in text."""
    if step == 1:
        return [("track_parcel", {"parcel_id": STUCK_PARCEL}), ("track_parcel", {"parcel_id": OTHER_PARCEL})]
    if step <= MAX_SCRIPTED_STEPS:
        return [("track_parcel", {"parcel_id": STUCK_PARCEL})]
    return []


def call_id(step: int, index: int, conversation: Any) -> str:
    """A call id unique within the session: the step, the position, and a digest of the conversation so far."""
    digest = hashlib.blake2b(json.dumps(conversation, sort_keys=True, default=str).encode(), digest_size=4).hexdigest()
    return f"call_{step}_{index}_{digest}"


def step_of(call_ids: Iterable[str]) -> int:
    """The model call number the conversation is at: one more than the last step found in its call ids."""
    steps = [int(cid.split("_")[1]) for cid in call_ids if cid.startswith("call_") and cid.count("_") >= 3]
    return 1 + max(steps, default=0)


# -- workflow input and output (here, not in the workflow module: the sandbox passes them through) --


class ConversationRequest(BaseModel):
    """The workflow's input: the user's messages (one turn each) and the guard's settings."""

    prompts: list[str] = Field(default_factory=lambda: list(PROMPTS))
    policy: dict[str, Any] = Field(default_factory=lambda: dict(POLICY))


class ToolOutput(BaseModel):
    """One ``function_call_output`` of a turn: a tool result or a refusal."""

    call_id: str
    output: str


class TurnReport(BaseModel):
    """One turn: its final output, the guard's stop, and the tool outputs the turn produced."""

    final_output: str
    stop: Stop | None
    """The guard's stop at the end of the turn (``None`` if the model finished on its own)."""
    tool_outputs: list[ToolOutput]
    """The turn's tool outputs in order, refusals included (the turn's last may never reach the model)."""
    model_calls: int
    """Model responses the turn used (``len(result.raw_responses)``)."""


class ConversationReport(BaseModel):
    """What the workflow returns: every turn, and the guard's own account of the conversation."""

    turns: list[TurnReport]
    events: list[GuardEvent]
    """Refusals and stops, as the guard recorded them (with their turn ids)."""
    guard_json: str
    """The guard's state at the end (``GuardState.model_dump_json``)."""
