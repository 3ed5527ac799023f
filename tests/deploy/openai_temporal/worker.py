"""A worker process: ``python -m openai_temporal.worker --address HOST:PORT --ledger FILE [...]``.

Run with ``tests/deploy`` on ``PYTHONPATH``. It registers the workflow, the ``track_parcel`` activity
and (through ``OpenAIAgentsPlugin``) the model activity backed by the scripted model; the command line,
signals and standby gate are ``temporal_harness.serve``'s. ``DEPLOYMENT`` is how the test drives these
workers.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agents import set_tracing_disabled
from temporal_harness import Deployment, KillAt, sandbox, serve
from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

from . import scenario
from .model import ScriptedModelProvider
from .tools import ParcelTools
from .workflows import ACTIVITY_TIMEOUT, HEARTBEAT_TIMEOUT, RETRY, GuardedParcelConversation

MODEL_PARAMS = ModelActivityParameters(
    start_to_close_timeout=ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=RETRY
)
# The guard's adapter passed through the sandbox; pydantic_core and annotated_types: pydantic's own helpers,
# imported lazily by the plugin's converter inside the sandbox (warnings). ``OpenAIAgentsPlugin`` adds
# ``openai``, ``agents`` and ``mcp``.
SANDBOX = sandbox("repeat_hooks_openai_agents", "pydantic_core", "annotated_types")


def plugin(ledger: Path, kill_at: KillAt | None = None) -> OpenAIAgentsPlugin:
    """The OpenAI Agents plugin with the scripted model; clients and the replayer use it for its data converter."""
    return OpenAIAgentsPlugin(model_params=MODEL_PARAMS, model_provider=ScriptedModelProvider(ledger, kill_at))


DEPLOYMENT = Deployment(
    package="openai_temporal",
    task_queue=scenario.TASK_QUEUE,
    workflow_name=scenario.WORKFLOW_NAME,
    request=scenario.ConversationRequest,
    report=scenario.ConversationReport,
    plugins=lambda ledger: [plugin(ledger)],
    id_prefix="guarded-conversation",
)


def setup(ledger: Path, kill_at: KillAt | None) -> tuple[list[OpenAIAgentsPlugin], dict[str, Any]]:
    """The worker's client plugin (the scripted model, blocking at ``kill_at``) and its workflow and tool."""
    set_tracing_disabled(True)  # no API key, no trace export
    return [plugin(ledger, kill_at)], {
        "task_queue": scenario.TASK_QUEUE,
        "workflows": [GuardedParcelConversation],
        "activities": [ParcelTools(ledger, kill_at).track_parcel],
        "workflow_runner": SANDBOX,
    }


if __name__ == "__main__":
    sys.exit(asyncio.run(serve("openai_temporal.worker", __doc__, setup)))
