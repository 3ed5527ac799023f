"""The resident hook server: the first hook call starts it, later calls are small clients it answers, with the same
decisions as hook calls in their own processes (the state is the same SQLite file), and it goes away when idle, when
its code changed, or when it is killed, losing nothing."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pytest
from cc_events import Answered, command, event

from repeat_hooks.kit import resident
from repeat_hooks.kit.sandbox import resident_folder, served

DENY = "deny"


def bash(command: str, description: str = "Run it") -> dict[str, str]:
    return {"command": command, "description": description}


@pytest.fixture
def sockets() -> Iterator[Path]:
    with resident_folder() as folder:
        yield folder


def running(folder: Path, seconds: float = 20.0) -> dict[str, object]:
    """The status of the one server in ``folder``, once it answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path in folder.glob("*.sock"):
            found = resident.status(path)
            if found is not None:
                return found
        time.sleep(0.05)
    raise AssertionError(f"no resident server answered in {folder}")


def decision(answered: Answered) -> str | None:
    assert answered.code == 0, answered.stderr
    return None if answered.output is None else answered.output["hookSpecificOutput"]["permissionDecision"]


def test_later_calls_are_answered_by_the_server_the_first_one_started(tmp_path: Path, sockets: Path) -> None:
    env = {"REPEAT_HOOKS_RESIDENT": str(sockets)}
    calls = [event("PreToolUse", "Bash", bash("make test", f"run {n}"), tool_use_id=f"toolu_{n}") for n in range(6)]
    first = command(calls[0], tmp_path, **env)  # no server yet: decided in its own process, which starts one
    assert decision(first) is None
    assert running(sockets)["served"] == 0
    rest = [decision(command(call, tmp_path, **env)) for call in calls[1:]]
    assert rest == [None, DENY, DENY, DENY, DENY]  # counted with the first, in the same state
    assert running(sockets)["served"] == 5
    again = command(calls[3], tmp_path, **env)  # a redelivered event, through the server: counts once
    assert decision(again) == DENY and running(sockets)["served"] == 6


def test_concurrent_clients_count_exactly(tmp_path: Path, sockets: Path) -> None:
    env = {"REPEAT_HOOKS_RESIDENT": str(sockets)}
    command(event("UserPromptSubmit", prompt="go"), tmp_path, **env)
    running(sockets)
    calls = [event("PreToolUse", "Bash", bash("ls"), tool_use_id=f"toolu_{n}") for n in range(10)]
    with ThreadPoolExecutor(10) as pool:
        decisions = list(pool.map(lambda call: decision(command(call, tmp_path, **env)), calls))
    assert decisions.count(None) == 2 and decisions.count(DENY) == 8
    assert running(sockets)["served"] == 10


def test_the_client_loads_no_pydantic(tmp_path: Path, sockets: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "REPEAT_HOOKS_RESIDENT": str(sockets)}
    given = json.dumps(event("PreToolUse", "Bash", bash("ls"), tool_use_id="toolu_1")).encode()
    script = "from repeat_hooks.offline.cli import main; raise SystemExit(main(['hook', 'claude-code']))"
    subprocess.run([sys.executable, "-c", script], input=given, env=env, capture_output=True, timeout=60, check=True)
    running(sockets)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script],
        input=given, env=env, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == b""  # the second run of the call: allowed, answered by the server
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "repeat_hooks.kit.resident" in loaded
    assert not {name for name in loaded if name.startswith(("pydantic", "repeat_hooks.policy", "sqlite3", "logging"))}


def test_a_killed_server_loses_nothing_and_the_next_call_starts_another(tmp_path: Path, sockets: Path) -> None:
    env = {"REPEAT_HOOKS_RESIDENT": str(sockets)}
    call = [event("PreToolUse", "Bash", bash("ls"), tool_use_id=f"toolu_{n}") for n in range(4)]
    assert decision(command(call[0], tmp_path, **env)) is None
    os.kill(int(running(sockets)["pid"]), signal.SIGKILL)  # its socket file stays behind
    time.sleep(0.2)
    assert decision(command(call[1], tmp_path, **env)) is None  # no answer there: decided in its own process
    assert decision(command(call[2], tmp_path, **env)) == DENY  # by the new server, or in-process: the same count
    assert running(sockets)["pid"] != 0


def in_thread(path: str | Path, idle: float) -> threading.Thread:
    thread = threading.Thread(target=resident.serve, args=(path, idle, "claude-code"), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while resident.status(path) is None:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    return thread


def test_a_server_whose_code_changed_hands_the_call_back_and_exits(
    tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"HOME": str(tmp_path), "REPEAT_HOOKS_RESIDENT": str(sockets)}
    path = resident.address(environ)
    assert path is not None
    thread = in_thread(path, 30)
    given = json.dumps(event("PreToolUse", "Bash", bash("ls"), tool_use_id="toolu_1")).encode()
    assert resident.ask("claude-code", given, environ) == (0, "", "")
    monkeypatch.setattr(resident, "_fingerprint", lambda root: (("edited.py", 1, 1),))
    assert resident.ask("claude-code", given, environ) is None  # the caller runs the hook itself
    thread.join(5)
    assert not thread.is_alive() and not os.path.exists(path)


def test_a_server_serves_every_cli_and_loading_another_adapter_is_no_change(tmp_path: Path, sockets: Path) -> None:
    environ = {"HOME": str(tmp_path), "REPEAT_HOOKS_RESIDENT": str(sockets)}
    path = resident.address(environ)
    assert path is not None
    thread = in_thread(path, 1.0)
    claude = json.dumps(event("PreToolUse", "Bash", bash("ls"), tool_use_id="toolu_1")).encode()
    gemini = {"session_id": "g1", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "cwd": "/tmp"}
    codex = {"session_id": "c1", "turn_id": "t1", "hook_event_name": "PreToolUse", "tool_name": "Bash"}
    for cli, given in (("claude-code", claude), ("gemini-cli", gemini), ("codex", codex), ("claude-code", claude)):
        raw = given if isinstance(given, bytes) else json.dumps({**given, "tool_input": {"command": "ls"}}).encode()
        assert resident.ask(cli, raw, environ) == (0, "", "")  # answered by the server, not handed back
    assert served(sockets) == 4
    thread.join(10)
    assert not thread.is_alive()


def test_an_idle_server_exits_and_a_dead_ones_socket_is_taken_over(tmp_path: Path, sockets: Path) -> None:
    path = sockets / "x.sock"
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(path))  # a server that died: its socket, with no one listening
    left.close()
    thread = in_thread(path, 0.5)
    assert resident.status(path) is not None
    thread.join(5)
    assert not thread.is_alive() and not path.exists()


def test_off_or_a_path_too_long_for_a_socket_means_every_call_in_its_own_process(tmp_path: Path) -> None:
    assert resident.address({"REPEAT_HOOKS_RESIDENT": "off"}) is None
    assert resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/" + "x" * 120}) is None
    assert resident.ask("claude-code", b"{}", {"REPEAT_HOOKS_RESIDENT": "off"}) is None
    one = resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/rh", "HOME": "/home/a"})
    other = resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/rh", "HOME": "/home/b"})
    project = resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/rh", "HOME": "/home/a", "CLAUDE_PROJECT_DIR": "/p"})
    assert one != other and one == project  # another user's settings, another server; another project, the same


def test_a_folder_others_can_enter_is_refused(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    shared.chmod(0o755)
    with pytest.raises(PermissionError, match="is not private to this user"):
        resident.serve(shared / "x.sock", 0.1)
    resident.start("claude-code", {"REPEAT_HOOKS_RESIDENT": str(shared)})  # never raises: no server, that is all
    time.sleep(0.5)
    assert list(shared.iterdir()) == []


class Silent:
    """A socket that takes every request and answers nothing (a server that died or hung mid-call), or, in a folder
    others can enter, anyone's socket: what reached it is kept. Closed when the test ends (``_close_silent``)."""

    made: ClassVar[list[Silent]] = []

    def __init__(self, path: Path) -> None:
        self.got: list[bytes] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        Silent.made.append(self)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                self.got.append(connection.recv(65536))


@pytest.fixture(autouse=True)
def _close_silent() -> Iterator[None]:
    yield
    while Silent.made:
        Silent.made.pop().listener.close()


def test_a_server_that_dies_before_answering_leaves_the_call_to_the_client_with_its_outage_policy(
    tmp_path: Path, sockets: Path
) -> None:
    env = {"REPEAT_HOOKS_RESIDENT": str(sockets)}
    path = resident.address({"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **env})
    assert path is not None
    with open(os.path.splitext(path)[0] + ".lock", "a") as lock:  # held, as a hung server holds it: no other takes over
        fcntl.flock(lock, fcntl.LOCK_EX)
        silent = Silent(Path(path))
        calls = [event("PreToolUse", "Bash", bash("ls"), tool_use_id=f"toolu_{n}") for n in range(3)]
        assert [decision(command(call, tmp_path, **env)) for call in calls] == [None, None, DENY]  # decided in-process
        assert len(silent.got) == 3  # each was handed to it first
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        settings = tmp_path / ".config" / "repeat-hooks" / "settings.json"
        settings.parent.mkdir(parents=True)
        settings.write_text(json.dumps({"fail": "closed", "state": str(blocker / "state.sqlite3")}))
        closed = command(calls[0], tmp_path, **env)  # the same server's socket (the settings file is read per event)
        assert len(silent.got) == 4
        assert decision(closed) == DENY and closed.stderr.endswith("; failing closed\n")  # the user's policy, not open


def test_no_event_goes_to_a_socket_in_a_folder_others_can_enter_or_own(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    shared.chmod(0o777)
    environ = {"HOME": str(tmp_path), "REPEAT_HOOKS_RESIDENT": str(shared)}
    path = resident.address(environ)
    assert path is not None
    planted = Silent(Path(path))  # someone else's socket, where the server's would be
    secret = json.dumps(event("PreToolUse", "Bash", bash("echo SECRET"), tool_use_id="toolu_1")).encode()
    assert resident.ask("claude-code", secret, {**environ, "ANTHROPIC_API_KEY": "sk-secret"}) is None
    assert planted.got == []
    shared.chmod(0o700)
    link = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp")) / "link"
    link.symlink_to(shared)  # a link to a private folder is not that folder
    assert resident.ask("claude-code", secret, {**environ, "REPEAT_HOOKS_RESIDENT": str(link)}) is None
    assert planted.got == []
    assert resident.ask("claude-code", secret, environ) is None and len(planted.got) == 1  # its own folder: asked
    assert b"sk-secret" not in planted.got[0]  # and only what the hook reads of the environment


def test_paths_are_the_clients_wherever_the_server_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPEAT_HOOKS_STATE", "state.sqlite3")
    monkeypatch.setenv("REPEAT_HOOKS_SETTINGS", "mine.json")
    monkeypatch.setenv("REPEAT_HOOKS_RESIDENT", "run")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    given = resident.environment()
    assert given["REPEAT_HOOKS_STATE"] == str(tmp_path / "state.sqlite3")
    assert given["REPEAT_HOOKS_SETTINGS"] == str(tmp_path / "mine.json")
    assert given["REPEAT_HOOKS_RESIDENT"] == str(tmp_path / "run")
    assert "XDG_RUNTIME_DIR" not in given and given["XDG_STATE_HOME"] == str(tmp_path / "state")


def test_a_stopped_server_removes_its_socket(tmp_path: Path, sockets: Path) -> None:
    env = {"REPEAT_HOOKS_RESIDENT": str(sockets)}
    command(event("UserPromptSubmit", prompt="go"), tmp_path, **env)
    found = running(sockets)
    os.kill(int(found["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while list(sockets.glob("*.sock")):
        assert time.monotonic() < deadline, "the socket stayed"
        time.sleep(0.05)


def test_removing_its_folder_stops_a_server_and_one_still_starting(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    folder.chmod(0o700)
    command(event("UserPromptSubmit", prompt="go"), tmp_path, REPEAT_HOOKS_RESIDENT=str(folder))
    pid = int(running(folder)["pid"])
    shutil.rmtree(folder)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "resident" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
        assert time.monotonic() < deadline, "the server outlived its folder"
        time.sleep(0.1)
    late = subprocess.run(
        [sys.executable, "-m", "repeat_hooks.kit.resident", str(folder / "x.sock"), "30"], timeout=30, check=False
    )
    assert late.returncode == 0 and not folder.exists()  # it exits at once, and makes no folder again
