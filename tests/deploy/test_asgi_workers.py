"""A web service with several worker processes (uvicorn ``--workers 2``, FastAPI, the OpenAI Agents adapter on the
real ``Runner`` loop with a scripted model): a worker is killed (``SIGKILL``) inside a turn, right after its tool
placed an order and before the guard heard how it went; the client retries the request (the same
``Idempotency-Key``, which names the guard's turn), another worker serves it, and nothing runs twice: the order is
refused (it may have been placed), the tracking call counts on. The service: ``asgi_service/app.py``."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from services import RedisServer, free_port, log_tail, port_open, spawn, stop_pid

pytestmark = pytest.mark.services

SERVICE = Path(__file__).with_name("asgi_service")
CONVERSATIONS = 6


def start_service(tmp_path: Path, store: str) -> tuple[Any, int]:
    port = free_port()
    (tmp_path / "crash").mkdir()
    env = {
        **os.environ,
        "SERVICE_STORE": store,
        "SERVICE_RUNS": str(tmp_path / "runs.txt"),
        "SERVICE_CRASH": str(tmp_path / "crash"),
    }
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(SERVICE), "--workers", "2"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    log = tmp_path / "uvicorn.log"
    process = spawn(argv, log, tmp_path, env=env)
    deadline = time.monotonic() + 60
    while not port_open(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_pid(process)
            pytest.fail(f"uvicorn did not start:\n{log_tail(log)}", pytrace=False)
        time.sleep(0.1)
    return process, port


async def chat_until_answered(client: httpx.AsyncClient, conversation: str) -> tuple[dict[str, Any], int]:
    """POST the message, retrying the same request (same Idempotency-Key) while the worker dies under it; return the
    answer and how many attempts failed."""
    failed = 0
    deadline = time.monotonic() + 90
    while True:
        try:
            response = await client.post(
                "/chat",
                json={"conversation": conversation, "message": "Order a box and track FR-7731"},
                headers={"Idempotency-Key": f"req-{conversation}"},
            )
            if response.status_code == 200:
                return response.json(), failed
        except httpx.TransportError:  # the worker died mid-request: the connection dropped
            pass
        failed += 1
        assert time.monotonic() < deadline, f"{conversation}: never answered"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("where", ["sqlite", "redis"])
def test_a_worker_killed_mid_turn_and_the_request_retried_runs_nothing_twice(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    if where == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        store = server.url.replace("/0", "/1")
    else:
        store = f"sqlite:///{tmp_path / 'states.db'}"
    process, port = start_service(tmp_path, store)

    async def run() -> list[tuple[dict[str, Any], int]]:
        # One conversation after the other, so that each worker dies under its own conversation's order only (a
        # worker serving two conversations at once would die under both, at whatever point the other one was).
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            return [await chat_until_answered(client, f"conv-{n}") for n in range(CONVERSATIONS)]

    try:
        answers = asyncio.run(run())
    finally:
        stop_pid(process)
    runs = [line.split() for line in (tmp_path / "runs.txt").read_text().splitlines()]

    for number, (answer, failed) in enumerate(answers):
        conversation = f"conv-{number}"
        assert failed >= 1, f"{conversation}: no worker died under it: this run proved nothing"
        ran = Counter(tool for _, who, tool in runs if who == conversation)
        assert ran == {"track_parcel": 2, "place_order": 1}, (conversation, ran)  # the order: placed once
        pids = {pid for pid, who, _ in runs if who == conversation}
        assert len(pids) == 2, (conversation, pids)  # the killed worker, then another process
        track, order = answer["tool_outputs"]
        assert track == "FR-7731: in transit"
        assert order.startswith("Refused") and "place_order" in order, order  # what the model read instead
    assert len(list((tmp_path / "crash").iterdir())) == CONVERSATIONS
