"""A worker process: ``python -m pydantic_ai_temporal.worker --address HOST:PORT --ledger FILE [...]``.

Run with ``tests/deploy`` on ``PYTHONPATH`` (``-m`` from there). ``PydanticAIPlugin`` registers the
workflow's agent activities (model requests, ``track_parcel``); the worker writes its PID to
``--ready`` once it polls and shuts down cleanly on SIGTERM/SIGINT. ``--wait-for FILE`` makes it boot
(imports, connection) but start polling only once FILE exists: a standby worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import NondeterminismError

from . import scenario
from .agent import ContinuedParcelConversation, GuardedParcelConversation, StructuredParcelLookup

STICKY_TIMEOUT = timedelta(seconds=1)
"""How long a workflow task waits on this worker's sticky queue before any worker may take it
(the default, 10 s, would make the surviving worker wait that long for the dead worker's workflow)."""
WAIT_FOR_SECONDS = 60.0
SANDBOX = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(
        # The guard and its adapter: one copy per process (the workflow module imports them passed through).
        "repeat_hooks",
        "repeat_hooks_pydantic_ai",
        "pydantic_ai_temporal",
    )
)
"""The workflow sandbox; ``PydanticAIPlugin`` adds pydantic-ai's own modules to its passthrough."""


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pydantic_ai_temporal.worker", description=__doc__)
    parser.add_argument("--address", required=True, help="Temporal frontend, HOST:PORT")
    parser.add_argument("--ledger", required=True, type=Path, help="JSON-lines file the activities append to")
    parser.add_argument("--kill-at", default=None, help="tool:N or model:N: block there (first attempt) to be killed")
    parser.add_argument("--ready", type=Path, default=None, help="file to write this PID to once polling")
    parser.add_argument("--wait-for", type=Path, default=None, help="start polling only once this file exists")
    args = parser.parse_args(argv)
    scenario.KillAt.parse(args.kill_at)  # fail fast on a bad kill point
    os.environ[scenario.LEDGER_ENV] = str(args.ledger)
    os.environ[scenario.KILL_AT_ENV] = args.kill_at or ""

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    client = await Client.connect(args.address, plugins=[PydanticAIPlugin()])
    worker = Worker(
        client,
        task_queue=scenario.TASK_QUEUE,
        workflows=[GuardedParcelConversation, StructuredParcelLookup, ContinuedParcelConversation],
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
