"""A worker process the test drives with JSON lines: one command a line on its stdin, one answer a line on its
stdout (``{"ready": name}`` first, ``{"error": ...}`` for a command that failed). Its stderr goes to a log
file, shown when it fails, exits or does not answer."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ANSWER_TIMEOUT = 60.0
"""Seconds a worker may take to answer one command."""


class WorkerProcess:
    """The process ``argv`` (in a session of its own, so ``kill`` stops it and its children), named ``name``."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, *, timeout: float = ANSWER_TIMEOUT) -> None:
        self.name = name
        self.log = log
        self.timeout = timeout
        self.stderr = log.open("wb")
        self.process = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, start_new_session=True
        )

    def ready(self) -> None:
        """Wait for the worker to say it is ready."""
        assert self.read() == {"ready": self.name}

    def read(self) -> dict[str, Any]:
        """The worker's next answer; fails the test if it does not come in time, the worker exited, or the
        answer is an error."""
        stdout = self.process.stdout
        assert stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            if not selector.select(self.timeout):
                self._fail("did not answer")
        line = stdout.readline()
        if not line:
            self._fail("exited")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            self._fail(answer["error"])
        return answer

    def send(self, **command: Any) -> None:
        """Send one command (``op=...`` and its arguments), without waiting for the answer."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write((json.dumps(command) + "\n").encode())
        stdin.flush()

    def ask(self, **command: Any) -> dict[str, Any]:
        """Send one command and return its answer."""
        self.send(**command)
        return self.read()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last write."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def close(self) -> None:
        """Close its stdin (the worker ends when its input does), killing it if it has not ended in 10 s."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.stderr.close()

    def _fail(self, what: str) -> None:
        pytest.fail(f"worker {self.name}: {what}\n{self.log.read_text()[-3000:]}", pytrace=False)


@contextlib.contextmanager
def worker_pair(argv: Callable[[str], Sequence[str]], logs: Path) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """Workers ``a`` and ``b`` (the process ``argv(name)`` each, its stderr in ``logs/<name>.log``), started at
    once and ready; killed when the block ends, whatever happened."""
    started: list[WorkerProcess] = []
    try:
        for name in ("a", "b"):
            started.append(WorkerProcess(name, argv(name), logs / f"{name}.log"))
        for worker in started:
            worker.ready()
        yield started[0], started[1]
    finally:
        for worker in started:
            worker.kill()
            worker.close()
