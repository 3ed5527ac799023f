"""The scenario shared by the test and the worker processes: script, settings, kill points, ledger.

The script: a model stuck on one parcel, over two turns (two ``agent.run`` calls) of one conversation.
Conversation step 0 asks for ``track_parcel`` on PX-42 and PX-7 in parallel; every later step asks for
PX-42 again. With ``max_calls=2``, ``max_refusals=3`` and the default ``count="progress"``, PX-7's run
(a tool not known to be read-only) restarts PX-42's count, so PX-42 runs at responses 1, 2 and 3, is
refused at 4, 5 and 6, and turn 1 ends before a 7th model request, with the ``ignored_refusals`` stop
message as the output. Turn 2 ("Any news?") is a new run, so a new count: PX-42 runs twice, is refused
three times, and the turn ends the same way.

The ledger is one JSON-lines file every process appends to (``O_APPEND``, one ``write`` per line,
fsynced): what reached the tool, what reached the model and what it was sent, and where a worker
blocked so the test could kill it. It survives the processes that wrote it.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai.messages import ModelMessage
from temporalio import activity

from repeat_hooks import Stop

TASK_QUEUE = "repeat-hooks-pydantic-ai-temporal"
WORKFLOW_NAME = "GuardedParcelConversationPAI"
AGENT_NAME = "parcel_tracker"
PROMPTS = ("Where are my parcels PX-42 and PX-7?", "Any news on PX-42?")
STUCK_PARCEL = "PX-42"
OTHER_PARCEL = "PX-7"
POLICY: dict[str, Any] = {"max_calls": 2, "max_refusals": 3}
"""The guard's settings (``repeat_hooks.Policy`` fields): the agent is built with them in every process."""
LEDGER_ENV = "REPEAT_HOOKS_PAI_LEDGER"
KILL_AT_ENV = "REPEAT_HOOKS_PAI_KILL_AT"
BLOCK_SECONDS = 60.0
"""How long a worker blocks at the kill point waiting to be killed before it fails the call (harness bug)."""

KillPoint = Literal["tool", "model"]


def tracking_status(parcel_id: str) -> str:
    """What ``track_parcel`` answers (always the same: the model has no reason to ask again)."""
    return f"Parcel {parcel_id}: in transit, hub Lyon, delivery expected tomorrow."


def script(step: int) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the model asks for at conversation step ``step`` (0-based)."""
    if step == 0:
        return [("track_parcel", {"parcel_id": STUCK_PARCEL}), ("track_parcel", {"parcel_id": OTHER_PARCEL})]
    return [("track_parcel", {"parcel_id": STUCK_PARCEL})]


@dataclass(frozen=True)
class KillAt:
    """Where the first worker blocks (first attempt only) so the test can SIGKILL it mid-turn.

    ``tool:N``: inside the N-th distinct ``track_parcel`` call of the workflow; ``model:N``: inside the
    N-th distinct model request.
    """

    where: KillPoint
    number: int

    @classmethod
    def parse(cls, text: str | None) -> KillAt | None:
        if not text:
            return None
        where, _, number = text.partition(":")
        if where not in ("tool", "model") or not number.isdigit():
            raise ValueError(f"kill point must be tool:N or model:N, not {text!r}")
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
        """Model requests that reached the model, by activity id: each one's attempts, in order."""
        return self._attempts("model")

    @property
    def tool_arguments(self) -> list[str]:
        """The parcel of each distinct call that reached the tool."""
        return [attempts[0]["parcel_id"] for attempts in self.tool_calls.values()]

    def received_by_step(self) -> dict[int, list[str]]:
        """The tool returns each model request carried in its last message, by conversation step."""
        return {attempts[-1]["step"]: attempts[-1]["received"] for attempts in self.model_calls.values()}

    @property
    def blocked(self) -> list[dict[str, Any]]:
        """Where a worker blocked to be killed."""
        return [r for r in self.records if r["kind"] == "blocked"]

    def pids(self) -> set[int]:
        """The worker processes that ran this workflow's activities."""
        return {int(r["pid"]) for r in self.records}


async def checkpoint(kind: KillPoint, fields: dict[str, Any]) -> None:
    """Log that an activity attempt reached the tool or the model; block there if it is the kill point.

    Runs inside the activity (``activity.info()``); the ledger and kill point come from the worker's
    environment. Blocks (heartbeating) until SIGKILLed; fails the attempt after ``BLOCK_SECONDS``.
    """
    ledger_path = os.environ.get(LEDGER_ENV)
    if not ledger_path:
        return
    ledger = Path(ledger_path)
    info = activity.info()
    record = {
        "kind": kind,
        "workflow_id": info.workflow_id,
        "activity_id": info.activity_id,
        "attempt": info.attempt,
        "pid": os.getpid(),
        **fields,
    }
    append(ledger, record)
    kill_at = KillAt.parse(os.environ.get(KILL_AT_ENV))
    if kill_at is None or kill_at.where != kind or info.attempt != 1:
        return
    loaded = Ledger.load(ledger, info.workflow_id or "")
    number = len(loaded.tool_calls if kind == "tool" else loaded.model_calls)
    if number != kill_at.number:
        return
    at = f"{kind}:{number}"
    append(ledger, {**record, "kind": "blocked", "at": at})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BLOCK_SECONDS
    while loop.time() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"harness: blocked at {at} for {BLOCK_SECONDS} s and was not killed")


# -- workflow input and output ---------------------------------------------------------------------


class ConversationRequest(BaseModel):
    """The workflow's input: the user's messages, one turn (one ``agent.run``) each."""

    prompts: list[str] = Field(default_factory=lambda: list(PROMPTS))


class TurnReport(BaseModel):
    """One turn: its output, the guard's stop, and the tool returns the turn produced."""

    output: str
    stop: Stop | None
    """``stop_of(result)``: the guard's stop (``None`` if the model finished on its own)."""
    tool_returns: list[str]
    """The turn's tool returns in order, refusals included (the last may never reach the model)."""
    refused: list[str]
    """``refusals_of(result)``: the tool of each call the guard refused in the turn."""
    model_responses: int
    """Responses of real model requests in the turn (the guard's own closing response not counted)."""


class ConversationReport(BaseModel):
    """What the workflow returns."""

    turns: list[TurnReport]
    run_ids: list[str]
    """Each turn's ``run_id`` (replay-stable under Temporal: the guard's turn ids)."""


STRUCTURED_WORKFLOW_NAME = "StructuredParcelLookupPAI"


class Delivery(BaseModel):
    """The structured agent's output type (no ``str`` branch: a stop raises ``RepeatGuardStopped``)."""

    parcel_id: str
    eta: str


class LookupRequest(BaseModel):
    """The structured workflow's input: catch ``RepeatGuardStopped`` in the workflow, or let it fail it."""

    catch: bool = True


class LookupReport(BaseModel):
    """What the structured workflow returns when it catches the stop."""

    stop: Stop
    messages: int
    """How many messages ``RepeatGuardStopped.messages`` carried."""


CONTINUED_WORKFLOW_NAME = "ContinuedParcelConversationPAI"


class ContinuedRequest(BaseModel):
    """The continue-as-new workflow's input: the first run pauses after ``pause_after`` tool steps and
    continues as new with the history so far (``messages``); the new run resumes it with no new prompt."""

    pause_after: int
    messages: list[ModelMessage] | None = None
    """The history the previous workflow run continued as new with (``None`` in the first run)."""
    run_ids: list[str] = Field(default_factory=list)
    """The ``run_id`` of each agent run so far, across workflow runs."""


class ContinuedReport(BaseModel):
    """The turn, as the resumed run ended it."""

    output: str
    stop: Stop | None
    refused: list[str]
    """``refusals_of(result.all_messages())``: every refusal of the turn, both workflow runs' included."""
    model_responses: int
    """Responses of real model requests in the whole turn."""
    run_ids: list[str]
