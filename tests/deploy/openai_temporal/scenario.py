"""The scenario shared by the test and the worker processes: script, settings, kill points, ledger.

The script: a model stuck on one parcel, over two turns of one conversation. Model call 1 asks for
``track_parcel`` on PX-42 and PX-7 in parallel; every later call asks for PX-42 again. With
``max_calls=2`` and ``max_refusals=3`` the guard lets PX-42 run twice and PX-7 once, refuses PX-42
three times (model calls 3, 4 and 5) and ends turn 1 before a sixth model call, with the
``ignored_refusals`` stop message as the final output. Turn 2 ("Any news?") starts a new count:
PX-42 runs twice more (model calls 6 and 7), is refused at 8, 9 and 10, and the turn ends the same way.

The ledger is one JSON-lines file that every process appends to (``O_APPEND``, one ``write`` per
line, fsynced): what reached the tool, what each model call received, and where a worker blocked so
the test could kill it. It survives the processes that wrote it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio import activity

from repeat_hooks import GuardEvent, Stop

TASK_QUEUE = "repeat-hooks-openai-temporal"
MODEL_NAME = "scripted-parcel-model"
"""The agent's model name; the workers' ``ScriptedModelProvider`` serves it."""
WORKFLOW_NAME = "GuardedParcelConversation"
PROMPTS = ("Where are my parcels PX-42 and PX-7?", "Any news on PX-42?")
"""The user's messages: one turn each, in one conversation (one workflow)."""
STUCK_PARCEL = "PX-42"
OTHER_PARCEL = "PX-7"
POLICY: dict[str, Any] = {"count": "per_turn", "max_calls": 2, "max_refusals": 3}
"""The guard's settings (``repeat_hooks.Policy`` fields), sent as workflow input: every replay uses the same."""
MAX_SCRIPTED_STEPS = 20
"""Past this many model calls the scripted model gives up with a text answer (a guard that never stops)."""
GIVE_UP = "I give up: the tracking service keeps saying the same thing."
BLOCK_SECONDS = 60.0
"""How long a worker blocks at the kill point waiting to be killed before it fails the call (harness bug)."""

KillPoint = Literal["tool", "model"]


def tracking_status(parcel_id: str) -> str:
    """What ``track_parcel`` answers (always the same: the model has no reason to ask again)."""
    return f"Parcel {parcel_id}: in transit, hub Lyon, delivery expected tomorrow."


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


@dataclass(frozen=True)
class KillAt:
    """Where the first worker blocks (first attempt only) so the test can SIGKILL it mid-turn.

    ``tool:N``: inside the N-th distinct ``track_parcel`` call of the workflow; ``model:N``: inside
    model call N. Parsed from the worker's ``--kill-at``.
    """

    where: KillPoint
    number: int

    @classmethod
    def parse(cls, text: str | None) -> KillAt | None:
        if not text:
            return None
        where, _, number = text.partition(":")
        if where not in ("tool", "model") or not number.isdigit():
            raise ValueError(f"--kill-at must be tool:N or model:N, not {text!r}")
        return cls(where, int(number))  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.where}:{self.number}"


# -- the ledger ------------------------------------------------------------------------------------


def append(ledger: Path, record: dict[str, Any]) -> None:
    """Append one JSON line to ``ledger`` atomically (one ``write`` with ``O_APPEND``) and fsync it."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(ledger: Path) -> list[dict[str, Any]]:
    """Every record in ``ledger`` (a torn last line from a killed process is skipped)."""
    try:
        lines = ledger.read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


@dataclass(frozen=True)
class Ledger:
    """What one workflow's processes wrote: per activity id, the attempts that reached the tool or the model."""

    records: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, ledger: Path, workflow_id: str) -> Ledger:
        return cls(tuple(r for r in read(ledger) if r.get("workflow_id") == workflow_id))

    def _attempts(self, kind: str) -> dict[str, list[dict[str, Any]]]:
        calls: dict[str, list[dict[str, Any]]] = {}
        for record in self.records:
            if record["kind"] == kind:
                calls.setdefault(record["activity_id"], []).append(record)
        return calls

    @property
    def tool_calls(self) -> dict[str, list[dict[str, Any]]]:
        """``track_parcel`` calls that reached the tool, by activity id: each one's attempts, in order."""
        return self._attempts("tool")

    @property
    def model_calls(self) -> dict[str, list[dict[str, Any]]]:
        """Model calls that reached the model, by activity id: each one's attempts, in order."""
        return self._attempts("model")

    @property
    def tool_arguments(self) -> list[str]:
        """The parcel of each distinct call that reached the tool, in the order they first arrived."""
        return [attempts[0]["parcel_id"] for attempts in self.tool_calls.values()]

    def received_by_step(self) -> dict[int, list[str]]:
        """The tool outputs each model call was given (its whole conversation), by the call's step."""
        return {
            attempts[-1]["step"]: [item["output"] for item in attempts[-1]["received"]]
            for attempts in self.model_calls.values()
        }

    @property
    def blocked(self) -> list[dict[str, Any]]:
        """Where a worker blocked to be killed."""
        return [r for r in self.records if r["kind"] == "blocked"]

    def pids(self) -> set[int]:
        """The worker processes that ran this workflow's activities."""
        return {int(r["pid"]) for r in self.records}


async def block_until_killed(ledger: Path, record: dict[str, Any], at: str) -> None:
    """Log that this worker reached the kill point ``at``, then wait (heartbeating) to be SIGKILLed.

    Fails the attempt after ``BLOCK_SECONDS`` if nobody killed the worker (a harness bug: the test sees
    the extra attempt and fails).
    """
    append(ledger, {**record, "kind": "blocked", "at": at})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BLOCK_SECONDS
    while loop.time() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"harness: blocked at {at} for {BLOCK_SECONDS} s and was not killed")


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
