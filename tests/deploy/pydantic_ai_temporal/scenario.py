"""The pydantic-ai scenario shared by the test and the worker processes: script, settings, report types.

The script: a model stuck on one parcel, over two turns (two ``agent.run`` calls) of one conversation.
Conversation step 0 asks for ``track_parcel`` on PX-42 and PX-7 in parallel; every later step asks for
PX-42 again. With ``max_calls=2``, ``max_refusals=3`` and the default ``count="progress"``, PX-7's run
(a tool not known to be read-only) restarts PX-42's count, so PX-42 runs at responses 1, 2 and 3, is
refused at 4, 5 and 6, and turn 1 ends before a 7th model request, with the ``ignored_refusals`` stop
message as the output. Turn 2 ("Any news?") is a new run, so a new count: PX-42 runs twice, is refused
three times, and the turn ends the same way.

The parcels, the kill points and the ledger every process appends to are ``temporal_harness``'s; the
worker hands its ledger and kill point to the activities pydantic-ai builds through its environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import temporal_harness
from pydantic import BaseModel, Field
from pydantic_ai.messages import ModelMessage
from temporal_harness import OTHER_PARCEL, PROMPTS, STUCK_PARCEL, KillAt, KillPoint

from repeat_hooks import Stop

TASK_QUEUE = "repeat-hooks-pydantic-ai-temporal"
WORKFLOW_NAME = "GuardedParcelConversationPAI"
AGENT_NAME = "parcel_tracker"
POLICY: dict[str, Any] = {"max_calls": 2, "max_refusals": 3}
"""The guard's settings (``repeat_hooks.Policy`` fields): the agent is built with them in every process."""
LEDGER_ENV = "REPEAT_HOOKS_PAI_LEDGER"
KILL_AT_ENV = "REPEAT_HOOKS_PAI_KILL_AT"


def script(step: int) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the model asks for at conversation step ``step`` (0-based)."""
    if step == 0:
        return [("track_parcel", {"parcel_id": STUCK_PARCEL}), ("track_parcel", {"parcel_id": OTHER_PARCEL})]
    return [("track_parcel", {"parcel_id": STUCK_PARCEL})]


async def checkpoint(kind: KillPoint, fields: dict[str, Any]) -> None:
    """``temporal_harness.checkpoint`` with the ledger and kill point of this worker's environment (nothing
    outside a worker: the test's replayer runs no activity)."""
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        await temporal_harness.checkpoint(Path(ledger), KillAt.parse(os.environ.get(KILL_AT_ENV)), kind, fields)


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
