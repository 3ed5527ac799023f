"""Drive a deployed agent's sessions straight through Temporal, as Mistral's control plane would.

rc11's workers serve one Temporal workflow per session (the agent's name is the workflow type, the
deployment name is the task queue). Offline there is no control plane to start them, so this module
does what it does: start the session workflow with its first message, send later messages with the
``send_message`` Update, and stop it with a ``stop`` command. Payloads go through the SDK's own
converter and codec, so the workers read them as they would in production.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from mistralai.vibe.harness.app_server.session import TextContentBlock
from mistralai.vibe_agents import session_workflow as wire
from mistralai.vibe_agents.session_workflow.send_message import SendMessageInput
from mistralai.workflows.core.config.config import PayloadCompressionConfig
from mistralai.workflows.core.temporal.payload_codec import MistralWorkflowsPayloadCodec
from mistralai.workflows.core.temporal.payload_converter import MistralWorkflowsPayloadConverter
from mistralai.workflows.models.payload import PayloadWithContext
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter

T = TypeVar("T")

NAMESPACE = "mistral-workflows"
"""The Temporal namespace rc11 workers run in."""
SOURCE = "agents_sdk"
"""Who sends the messages, as the session workflow records it."""


async def connect(address: str, namespace: str = NAMESPACE) -> Client:
    """A Temporal client that speaks the workers' payload format."""
    codec = MistralWorkflowsPayloadCodec(
        payload_offloading_config=None,
        payload_encryption_config=None,
        payload_compression_config=PayloadCompressionConfig(),
    )
    converter = DataConverter(payload_converter_class=MistralWorkflowsPayloadConverter, payload_codec=codec)
    return await Client.connect(address, namespace=namespace, data_converter=converter)


@dataclass(frozen=True)
class Session:
    """One running session: its id (what hooks see as ``ctx.session.id``) and its workflow."""

    id: str
    handle: WorkflowHandle[Any, Any]

    @property
    def workflow_id(self) -> str:
        return self.handle.id


async def start_session(client: Client, agent_name: str, task_queue: str, text: str) -> Session:
    """Start a session of ``agent_name`` on ``task_queue`` whose first turn is the user's ``text``."""
    session_id = uuid.uuid4()
    first = wire.MessageCommand(
        command_id=uuid.uuid4(),
        source=SOURCE,
        message=wire.MessageInput(parts=[wire.MessagePartText(text=text)]),
    )
    start = wire.SessionWorkflowStartInput(
        principal=wire.Principal(customer_id=uuid.uuid4(), organization_id=uuid.uuid4(), workspace_id=uuid.uuid4()),
        initial_command=first,
        session_protocol="session_v1",
        session_id=session_id,
        application_id=uuid.uuid4(),
        application_name=wire.UNIFIED_HARNESS_APPLICATION_NAME,
        agent_id=uuid.uuid4(),
        agent_name=agent_name,
        created_at=datetime.now(UTC).isoformat(),
    )
    handle = await client.start_workflow(
        agent_name,
        start,
        id=f"{agent_name}-{session_id}",
        task_queue=task_queue,
        result_type=wire.SessionWorkflowOutput,
        execution_timeout=timedelta(minutes=10),
    )
    return Session(str(session_id), handle)


async def send_message(session: Session, text: str, idempotency_key: str) -> wire.SessionMessageVerdict:
    """Send the user's ``text``: it starts a turn (or steers the running one). The verdict names the turn."""
    message = SendMessageInput(idempotency_key=idempotency_key, message=[TextContentBlock(text=text)], source=SOURCE)
    answer = await session.handle.execute_update(
        wire.SEND_MESSAGE_UPDATE_NAME, message, result_type=wire.SessionMessageVerdict
    )
    return unwrap(answer, wire.SessionMessageVerdict)


async def stop_session(session: Session) -> wire.SessionWorkflowOutput:
    """Ask the session to stop and wait for its workflow to finish; returns its output."""
    stop = wire.SystemCommand(command_id=uuid.uuid4(), action="stop", reason="driver done")
    await session.handle.signal("submit_command", stop)
    return unwrap(await session.handle.result(), wire.SessionWorkflowOutput)


def unwrap(answer: object, kind: type[T]) -> T:
    """The value inside the SDK's ``PayloadWithContext`` envelope, checked to be a ``kind``."""
    value = answer.payload if isinstance(answer, PayloadWithContext) else answer
    if not isinstance(value, kind):
        raise TypeError(f"expected a {kind.__name__} from the session workflow, got {type(value).__name__}")
    return value


# -- waiting, bounded ----------------------------------------------------------------------------------


async def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.2) -> T:
    """Call ``probe()`` until it returns something other than ``None``; ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        await asyncio.sleep(interval)


async def wait_for_workers(client: Client, task_queue: str, pids: Iterable[int], timeout: float = 60.0) -> None:
    """Wait until every worker PID polls ``task_queue`` for both workflow and activity tasks.

    A Python Temporal worker's identity is ``<pid>@<host>``, so the pollers Temporal lists name them.
    """
    wanted = {str(pid) for pid in pids}
    kinds = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
    deadline = time.monotonic() + timeout
    while True:
        polling: list[set[str]] = []
        for kind in kinds:
            request = DescribeTaskQueueRequest(
                namespace=client.namespace, task_queue=TaskQueue(name=task_queue), task_queue_type=kind
            )
            answer = await client.workflow_service.describe_task_queue(request)
            polling.append({poller.identity.split("@", 1)[0] for poller in answer.pollers})
        if all(wanted <= pids_polling for pids_polling in polling):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers {sorted(wanted)} not all polling {task_queue!r} after {timeout:.0f} s")
        await asyncio.sleep(0.5)


# -- what the session published (through the Workflows API stand-in) -----------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path`` (none if it does not exist yet; a half-written last line is skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


@dataclass(frozen=True)
class TurnEvent:
    """A turn event the session workflow published: ``turn_started`` or ``turn_terminated``."""

    type: str
    turn_id: str
    outcome: str | None
    """How a terminated turn ended (``completed``, ...); ``None`` for ``turn_started``."""
    output: list[dict[str, Any]]
    """The terminated turn's output blocks, as published (``[]`` when a hook ended it: rc11 drops the message)."""

    @property
    def text(self) -> str:
        return "".join(str(block.get("text", "")) for block in self.output)


def turn_events(events: Path, session_id: str) -> list[TurnEvent]:
    """The turn events of ``session_id`` among the events the workers posted to the Workflows API stand-in."""
    found = []
    for event in read_jsonl(events):
        attributes = event.get("attributes") or {}
        if event.get("event_type") != "CUSTOM_TASK_STARTED" or not str(attributes.get("custom_task_type")).endswith(
            ".turn"
        ):
            continue
        value = (attributes.get("payload") or {}).get("value") or {}
        if value.get("session_id") != session_id:
            continue
        turn_event = value.get("turn_event") or {}
        turn = turn_event.get("turn") or {}
        termination = turn.get("termination") or {}
        found.append(
            TurnEvent(
                turn_event.get("type", ""),
                turn.get("id", ""),
                termination.get("outcome"),
                termination.get("output") or [],
            )
        )
    return found


async def wait_for_turn_end(events: Path, session_id: str, turn_id: str, timeout: float) -> TurnEvent:
    """Wait until the session publishes that ``turn_id`` terminated; returns that event."""

    def ended() -> TurnEvent | None:
        return next(
            (e for e in turn_events(events, session_id) if e.type == "turn_terminated" and e.turn_id == turn_id), None
        )

    return await wait_for(f"turn {turn_id} of session {session_id} to end", ended, timeout)


async def wait_for_turn_start(events: Path, session_id: str, timeout: float) -> str:
    """Wait until the session publishes its first ``turn_started``; returns that turn's id."""

    def started() -> str | None:
        return next((e.turn_id for e in turn_events(events, session_id) if e.type == "turn_started"), None)

    return await wait_for(f"session {session_id} to start a turn", started, timeout)
