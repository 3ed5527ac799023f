"""A worker process: ``python -m openai_temporal.worker --address HOST:PORT --ledger FILE [...]``.

Run with ``tests/deploy`` on ``PYTHONPATH``. It registers the workflow, the ``track_parcel`` activity
and (through ``OpenAIAgentsPlugin``) the model activity backed by the scripted model; it writes its
PID to ``--ready`` once it polls, and shuts down cleanly on SIGTERM/SIGINT. ``--wait-for FILE`` makes
it boot (imports, connection) but start polling only once FILE exists: a standby worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from agents import set_tracing_disabled
from temporalio.client import Client
from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import NondeterminismError

from . import scenario
from .model import ScriptedModelProvider
from .tools import ParcelTools
from .workflows import ACTIVITY_TIMEOUT, HEARTBEAT_TIMEOUT, RETRY, GuardedParcelConversation

MODEL_PARAMS = ModelActivityParameters(
    start_to_close_timeout=ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=RETRY
)
STICKY_TIMEOUT = timedelta(seconds=1)
"""How long a workflow task waits on this worker's sticky queue before any worker may take it.

The default (10 s) would make the surviving worker wait that long for the dead worker's workflow."""
WAIT_FOR_SECONDS = 60.0
SANDBOX = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(
        # The guard and its adapter: one copy per process instead of one per workflow run (the workflow
        # module also imports them under ``imports_passed_through``). pydantic_core and annotated_types:
        # pydantic's own helpers, imported lazily by the plugin's converter inside the sandbox (warnings).
        "repeat_hooks",
        "repeat_hooks_openai_agents",
        "pydantic_core",
        "annotated_types",
    )
)
"""The workflow sandbox; ``OpenAIAgentsPlugin`` adds ``openai``, ``agents`` and ``mcp`` to its passthrough."""


def plugin(ledger: Path, kill_at: scenario.KillAt | None = None) -> OpenAIAgentsPlugin:
    """The OpenAI Agents plugin with the scripted model; clients and the replayer use it for its data converter."""
    return OpenAIAgentsPlugin(model_params=MODEL_PARAMS, model_provider=ScriptedModelProvider(ledger, kill_at))


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openai_temporal.worker", description=__doc__)
    parser.add_argument("--address", required=True, help="Temporal frontend, HOST:PORT")
    parser.add_argument("--ledger", required=True, type=Path, help="JSON-lines file the activities append to")
    parser.add_argument("--task-queue", default=scenario.TASK_QUEUE)
    parser.add_argument("--kill-at", default=None, help="tool:N or model:N: block there (first attempt) to be killed")
    parser.add_argument("--ready", type=Path, default=None, help="file to write this PID to once polling")
    parser.add_argument("--wait-for", type=Path, default=None, help="start polling only once this file exists")
    args = parser.parse_args(argv)

    set_tracing_disabled(True)  # no API key, no trace export
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    kill_at = scenario.KillAt.parse(args.kill_at)
    client = await Client.connect(args.address, plugins=[plugin(args.ledger, kill_at)])
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[GuardedParcelConversation],
        activities=[ParcelTools(args.ledger, kill_at).track_parcel],
        workflow_runner=SANDBOX,
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        # A replay that diverges fails the workflow at once (instead of retrying the task forever).
        workflow_failure_exception_types=[NondeterminismError],
        graceful_shutdown_timeout=timedelta(seconds=2),
    )
    if args.wait_for is not None:
        deadline = loop.time() + WAIT_FOR_SECONDS
        while not args.wait_for.exists():
            if stop.is_set() or loop.time() > deadline:
                return 3
            await asyncio.sleep(0.05)
    async with worker:
        if args.ready is not None:
            args.ready.write_text(str(os.getpid()))
        await stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
