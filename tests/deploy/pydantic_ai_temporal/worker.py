"""A worker process: ``python -m pydantic_ai_temporal.worker --address HOST:PORT --ledger FILE [...]``.

Run with ``tests/deploy`` on ``PYTHONPATH`` (``-m`` from there). ``PydanticAIPlugin`` registers the
workflow's agent activities (model requests, ``track_parcel``), which find the ledger and the kill point in
this process's environment; the command line, signals and standby gate are ``temporal_harness.serve``'s.
``DEPLOYMENT`` is how the test drives these workers.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporal_harness import Deployment, KillAt, sandbox, serve

from . import scenario
from .agent import ContinuedParcelConversation, GuardedParcelConversation, StructuredParcelLookup

SANDBOX = sandbox("repeat_hooks_pydantic_ai", "pydantic_ai_temporal")
"""The workflow sandbox, passing the adapter and this package through; ``PydanticAIPlugin`` adds pydantic-ai's."""

DEPLOYMENT = Deployment(
    package="pydantic_ai_temporal",
    task_queue=scenario.TASK_QUEUE,
    workflow_name=scenario.WORKFLOW_NAME,
    request=scenario.ConversationRequest,
    report=scenario.ConversationReport,
    plugins=lambda ledger: [PydanticAIPlugin()],
    id_prefix="pai-guarded-conversation",
)


def setup(ledger: Path, kill_at: KillAt | None) -> tuple[list[PydanticAIPlugin], dict[str, Any]]:
    """The worker's client plugin and workflows; the activities read ``ledger`` and ``kill_at`` from the
    environment (``scenario.checkpoint``)."""
    os.environ[scenario.LEDGER_ENV] = str(ledger)
    os.environ[scenario.KILL_AT_ENV] = str(kill_at or "")
    return [PydanticAIPlugin()], {
        "task_queue": scenario.TASK_QUEUE,
        "workflows": [GuardedParcelConversation, StructuredParcelLookup, ContinuedParcelConversation],
        "workflow_runner": SANDBOX,
    }


if __name__ == "__main__":
    sys.exit(asyncio.run(serve("pydantic_ai_temporal.worker", __doc__, setup)))
