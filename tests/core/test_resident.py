"""The resident hook server's own rules, on a CLI of the test's own (no adapter installed: these run with the core
alone): a server in a thread of this process answers what the hook answers, counts what it served, hands a call back
when its code changed, stops when idle or when its socket is gone, and no event goes to a folder that is not the
user's alone. The real CLIs' hooks through a real server: ``tests/adapters/claude_code/test_resident.py``."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import pytest

from repeat_hooks.kit import resident
from repeat_hooks.offline import hooks


def echo_hook(
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """A CLI's hook of the test's own: its answer says what it was handed (and of the environment, what it read)."""
    assert stdin is not None and stdout is not None and stderr is not None and environ is not None
    event = json.loads(stdin.read())
    stdout.write(json.dumps({"seen": event, "home": environ.get("HOME"), "key": environ.get("API_KEY")}))
    stderr.write("one line\n")
    return int(event.get("code", 0))


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module = types.ModuleType("repeat_hooks_echo_cli")
    module.hook = echo_hook  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "repeat_hooks_echo_cli", module)
    monkeypatch.setitem(hooks.CLIS, "echo", ("repeat_hooks_echo_cli", "repeat-hooks-echo"))
    yield "echo"


@pytest.fixture
def folder() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    made.chmod(0o700)
    yield made
    for path in made.iterdir():
        path.unlink()
    made.rmdir()


def serving(path: str, idle: float) -> threading.Thread:
    thread = threading.Thread(target=resident.serve, args=(path, idle, "echo"), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while resident.status(path) is None:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    return thread


def test_a_server_answers_what_the_hook_answers_and_hands_it_only_what_it_reads(echo: str, folder: Path) -> None:
    environ = {"HOME": "/home/a", "REPEAT_HOOKS_RESIDENT": str(folder), "API_KEY": "sk-secret", "PATH": "/bin"}
    path = resident.address(environ)
    assert path is not None
    thread = serving(path, 1.0)
    code, out, err = resident.ask(echo, b'{"n": 1, "code": 3}', environ) or (None, "", "")
    assert code == 3 and err == "one line\n"
    assert json.loads(out) == {"seen": {"n": 1, "code": 3}, "home": "/home/a", "key": None}  # no API key handed
    found = resident.status(path)
    assert found is not None and found["served"] == 1 and found["pid"] == os.getpid()
    thread.join(10)
    assert not thread.is_alive() and not os.path.exists(path)  # idle: gone, its socket with it


def test_a_changed_code_hands_the_call_back_and_a_removed_socket_stops_the_server(
    echo: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"HOME": "/home/b", "REPEAT_HOOKS_RESIDENT": str(folder)}
    path = resident.address(environ)
    assert path is not None
    thread = serving(path, 30)
    assert resident.ask(echo, b"{}", environ) is not None
    with monkeypatch.context() as edited:
        edited.setattr(resident, "_fingerprint", lambda root: (("edited.py", 1, 1),))
        assert resident.ask(echo, b"{}", environ) is None  # handed back: the caller runs the hook itself
        thread.join(10)
    assert not thread.is_alive()
    again = serving(path, 30)
    os.unlink(path)
    again.join(10)
    assert not again.is_alive()  # its socket removed: it stops within a second


def test_no_event_goes_to_a_folder_others_can_enter_and_none_is_made_again(echo: str, folder: Path) -> None:
    environ = {"HOME": "/home/c", "REPEAT_HOOKS_RESIDENT": str(folder)}
    path = resident.address(environ)
    assert path is not None
    thread = serving(path, 1.0)
    folder.chmod(0o755)
    assert resident.ask(echo, b"{}", environ) is None  # a folder others can enter: nothing is sent there
    folder.chmod(0o700)
    assert resident.ask(echo, b"{}", environ) is not None
    thread.join(10)
    gone = folder / "gone"
    resident.serve(str(gone / "x.sock"), 0.1, "echo")  # a folder removed before its server started: it exits
    assert not gone.exists()


def test_the_environment_a_call_hands_on_is_absolute_and_off_means_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPEAT_HOOKS_STATE", "state.sqlite3")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative")
    given = resident.environment()
    assert given["REPEAT_HOOKS_STATE"] == str(tmp_path / "state.sqlite3") and "XDG_CONFIG_HOME" not in given
    assert resident.address({"REPEAT_HOOKS_RESIDENT": "off"}) is None
    assert resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/" + "x" * 120}) is None  # too long for a socket
    assert resident.ask("echo", b"{}", {"REPEAT_HOOKS_RESIDENT": "off"}) is None
    one = resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/rh", "HOME": "/home/a"})
    assert one != resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/rh", "HOME": "/home/b"})
    assert one == resident.address({"REPEAT_HOOKS_RESIDENT": "/tmp/rh", "HOME": "/home/a", "GEMINI_PROJECT_DIR": "/p"})


def test_a_request_past_its_bound_is_not_read_whole() -> None:
    class Endless:
        def recv(self, size: int) -> bytes:
            return b"x" * size

    with pytest.raises(OSError, match="over 100 bytes"):
        resident._received(Endless(), limit=100)  # type: ignore[arg-type]
