"""The resident hook server: a coding CLI spawns ``repeat-hooks hook <cli>`` for every hook event, and a fresh
Python that imports the core (pydantic and its models) costs about ten times a bare Python hook. So the first hook
call of a user starts a server that keeps the core loaded (a process of its own, detached from the CLI), and every
later hook call is a small client: it hands the event to the server over a Unix socket and prints the answer. The
server runs the same command (``repeat_hooks.kit.command``: the settings read for each event, one SQLite transaction
per event), so the state is where it always is: a server killed at any moment loses nothing, and two servers (or a
server and an in-process hook) count exactly together.

Which server: one per interpreter, version and the environment the hook reads (``HOME``, the XDG folders,
``REPEAT_HOOKS_SETTINGS``, ``REPEAT_HOOKS_STATE``), its socket in a folder only the user can enter
(``$XDG_RUNTIME_DIR/repeat-hooks``, else ``/tmp/repeat-hooks-<uid>``; ``REPEAT_HOOKS_RESIDENT`` names another, or
``off``: every hook call in its own process). A client hands a server only what the hook reads of its environment
(never an API key), and only through a folder that is the user's alone. The server answers the hook's exit code,
stdout and stderr; it exits after ``IDLE_SECONDS`` without a call, and at the first call after its code changed (an
upgrade, an edit of an editable install). A client that gets no answer (no server, its code changed, it died or hung)
runs the hook itself, with the settings' outage policy, and starts a server, in the background, for the next call.

Only the standard library is imported here: the client's whole cost is the interpreter, this module and a socket.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import zlib

TYPE_CHECKING = False  # not typing's: the client imports nothing it does not use (typing alone costs ~10 ms)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The largest event read from stdin (a ``Write`` of a large file is in its event); a larger one fails open."""
RESIDENT_ENV = "REPEAT_HOOKS_RESIDENT"
"""``off``: no server (every hook call in its own process); a folder: where the servers' sockets live."""
IDLE_SECONDS = 900.0
"""A server with no hook call for this long exits (a session that resumes starts one again)."""
CONNECT_SECONDS = 0.5
"""How long a client waits to reach a server before it runs the hook itself."""
ANSWER_SECONDS = 10.0
"""How long a client waits for a server's answer (a store's lock wait included) before it runs the hook itself: well
inside every CLI's hook timeout (30 s as installed)."""
STATE_ENV, SETTINGS_ENV = "REPEAT_HOOKS_STATE", "REPEAT_HOOKS_SETTINGS"
"""The environment variables naming the state's SQLite file, and the user's settings file."""
READS = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", SETTINGS_ENV, STATE_ENV, "PYTHONPATH")
"""What the hook reads of its environment beyond the event's own (a project folder): a server serves only clients
that agree on all of it, so it never reads one user's settings for another's event."""
STALE = b'{"stale": true}'
"""A server's answer when its code changed: the client runs the hook itself."""
MAX_SOCKET_PATH = 100
"""Unix sockets take paths of about 100 bytes (104 to 108 by system): past that, no server."""


def environment() -> dict[str, str]:
    """This process's environment as a hook call reads it, wherever it runs (a server runs in ``/``): the hook's own
    paths made absolute (``REPEAT_HOOKS_STATE``, ``REPEAT_HOOKS_SETTINGS``, ``REPEAT_HOOKS_RESIDENT``), and a relative
    XDG folder dropped (the XDG specification says to ignore one)."""
    environ = dict(os.environ)
    for name in (STATE_ENV, SETTINGS_ENV, RESIDENT_ENV):
        value = environ.get(name)
        if value and value != "off" and not os.path.isabs(os.path.expanduser(value)):
            environ[name] = os.path.abspath(value)
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        if name in environ and not os.path.isabs(environ[name]):
            del environ[name]
    return environ


def _handed(environ: Mapping[str, str]) -> dict[str, str]:
    """What a client hands the server of its environment: what the hook reads (``READS``, the hook's own variables,
    a CLI's project folder), nothing else (no API key goes to the server)."""
    return {
        name: value
        for name, value in environ.items()
        if name in READS or name.startswith("REPEAT_HOOKS_") or name.endswith("_PROJECT_DIR") or name == "PATH"
    }


def folder(environ: Mapping[str, str]) -> str | None:
    """Where the sockets live, or ``None`` (``REPEAT_HOOKS_RESIDENT=off``, or no Unix sockets here)."""
    named = environ.get(RESIDENT_ENV, "")
    if named == "off" or not hasattr(socket, "AF_UNIX"):
        return None
    if named:
        return named
    runtime = environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "repeat-hooks") if runtime else f"/tmp/repeat-hooks-{os.getuid()}"


def address(environ: Mapping[str, str]) -> str | None:
    """The socket of the server for this interpreter, version and environment, or ``None`` (see ``folder``)."""
    home = folder(environ)
    if home is None:
        return None
    from .. import __version__

    seen = json.dumps([sys.executable, __version__, [environ.get(name) for name in READS]]).encode()
    name = f"{zlib.crc32(seen):08x}{zlib.crc32(seen[::-1]):08x}"  # 64 bits: zlib, not hashlib's 4 ms of OpenSSL
    path = os.path.join(home, f"{name}.sock")
    return path if len(path) <= MAX_SOCKET_PATH else None


def ask(cli: str, event: bytes, environ: Mapping[str, str]) -> tuple[int, str, str] | None:
    """The server's answer to one hook event (exit code, stdout, stderr), or ``None``: no server answered (none runs,
    its folder is not this user's alone, its code changed, it died or hung before answering). The caller then runs the
    hook itself, with its settings' outage policy; an event the server had decided already is found again in the
    state by its call id and not counted twice (Gemini CLI gives no call id: there, and only if a server dies between
    its decision and its answer, the call counts twice)."""
    path = address(environ)
    if path is None or not _own(os.path.dirname(path), path):
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(CONNECT_SECONDS)
        try:
            client.connect(path)
        except OSError:
            return None
        client.settimeout(ANSWER_SECONDS)
        header = json.dumps({"cli": cli, "environ": _handed(environ)}).encode()
        try:
            client.sendall(len(header).to_bytes(4, "big") + header + event)
            client.shutdown(socket.SHUT_WR)
        except OSError:
            return None  # it went away before it had the event: nothing was decided
        try:
            answer = json.loads(_received(client))
            if answer.get("stale"):
                return None  # its code changed: it exits, and the caller runs the hook itself
            return int(answer["code"]), str(answer["stdout"]), str(answer["stderr"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # it died or hung before answering
    finally:
        client.close()


def start(cli: str, environ: Mapping[str, str]) -> None:
    """Start the server for this environment in the background (detached: its own session, no terminal, no pipe of
    the caller's), ``cli``'s adapter loaded before its first call, unless ``off``; a second one started at once sees
    the first and exits. Never raises."""
    path = address(environ)
    if path is None:
        return
    try:
        _private(os.path.dirname(path))
        import subprocess

        subprocess.Popen(  # this interpreter, this module
            [sys.executable, "-m", "repeat_hooks.kit.resident", path, str(IDLE_SECONDS), cli],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=_handed(environ),
            cwd="/",
        )
    except (OSError, ValueError):
        pass  # no server: every hook call runs in its own process, as with "off"


def status(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the server at ``path`` says of itself (``pid``, ``served``: hook calls answered), or ``None``."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(CONNECT_SECONDS)
        client.connect(os.fspath(path))
        header = json.dumps({"status": True}).encode()
        client.sendall(len(header).to_bytes(4, "big") + header)
        client.shutdown(socket.SHUT_WR)
        found = json.loads(_received(client))
        return found if isinstance(found, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        client.close()


MAX_REQUEST_BYTES = 4 + 1024 * 1024 + MAX_EVENT_BYTES + 1
"""A request's largest size (its header and the largest event the hook reads, and one byte more, so the hook says
the event is too large): past it, the server stops reading and answers nothing."""


def _received(connection: socket.socket, limit: int = MAX_REQUEST_BYTES) -> bytes:
    chunks, size = [], 0
    while size <= limit and (chunk := connection.recv(65536)):
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise OSError(f"over {limit} bytes")
    return b"".join(chunks)


def _own(home: str, path: str) -> bool:
    """Whether the folder ``home`` (not a link) and the socket ``path`` in it are this user's, the folder no one
    else's to enter: else a socket there may be anyone's, and no event (nor any variable) goes to it."""
    try:
        folder, found = os.lstat(home), os.lstat(path)
    except OSError:
        return False
    uid = os.getuid()
    return folder.st_uid == uid and not folder.st_mode & 0o077 and os.path.isdir(home) and found.st_uid == uid


def _private(home: str) -> None:
    """``home`` made (mode 0700) if missing; ``PermissionError`` unless it is the user's own and no one else's."""
    os.makedirs(home, mode=0o700, exist_ok=True)
    found = os.stat(home)
    if found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise PermissionError(f"{home} is not private to this user")


# -- the server ------------------------------------------------------------------------------------------------


def _roots() -> list[str]:
    """The folders of the core and of every adapter loaded (``repeat_hooks_<name>``)."""
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.startswith("repeat_hooks_") and "." not in name and file:
            roots.append(os.path.dirname(os.path.abspath(file)))
    return roots


def _fingerprint(root: str) -> tuple[tuple[str, int, int], ...]:
    """Every module file under ``root``, with its size and mtime: a change means new code."""
    found = []
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                found.append((path, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


class _Server:
    """The resident server's state: its code's fingerprint (by folder, taken when first loaded), the calls it answered,
    whether it should stop."""

    def __init__(self) -> None:
        self.served = 0
        self.code: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self.stopping = False

    def changed(self) -> bool:
        """Whether the code of the core, or of an adapter it loaded, changed since it was loaded."""
        for root in _roots():
            now = _fingerprint(root)
            if self.code.setdefault(root, now) != now:
                return True
        return False

    def handle(self, connection: socket.socket) -> None:
        import io

        from ..offline.hooks import adapter

        with connection:
            try:
                connection.settimeout(ANSWER_SECONDS)
                data = _received(connection)
                size = int.from_bytes(data[:4], "big")
                header, event = json.loads(data[4 : 4 + size]), data[4 + size :]
                if header.get("status"):
                    connection.sendall(json.dumps({"pid": os.getpid(), "served": self.served}).encode())
                    return
                module = adapter(str(header["cli"]))
                if self.stopping or self.changed():
                    self.stopping = True
                    connection.sendall(STALE)
                    return
                out, err = io.StringIO(), io.StringIO()
                code = module.hook(stdin=io.BytesIO(event), stdout=out, stderr=err, environ=dict(header["environ"]))
                self.served += 1
                connection.sendall(
                    json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}).encode()
                )
            except Exception:  # one call's failure: its client runs the hook itself, the server goes on
                return


def serve(path: str | os.PathLike[str], idle: float = IDLE_SECONDS, cli: str | None = None) -> None:
    """Answer hook calls on the socket at ``path`` until ``idle`` seconds pass without one, its code changed, or its
    socket is gone (its folder removed: the user's way to stop every server there), ``cli``'s adapter (and so the
    core) loaded first. A server already answering there keeps it, and a folder that is gone is not made again:
    this one exits."""
    import contextlib
    import fcntl
    import threading
    import time

    path = os.fspath(path)
    if not os.path.isdir(os.path.dirname(path)):
        return  # its folder was removed before it started: no one is to be served there
    _private(os.path.dirname(path))
    with open(os.path.splitext(path)[0] + ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # another server is starting, or serving, here
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket left by a server that died: no one answers there (this one holds the lock)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(64)
        server = _Server()
        server.changed()  # the code as it is before it is loaded: an edit from now on is a change
        if cli is not None:  # loaded now, so that the first call it answers pays nothing for it
            from ..offline.hooks import adapter

            with contextlib.suppress(Exception):
                adapter(cli)
        listener.settimeout(min(idle, 1.0))
        last, running = time.monotonic(), list[threading.Thread]()
        try:
            while not server.stopping and time.monotonic() - last < idle:
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    if not os.path.exists(path):
                        break  # its socket, or its folder, was removed
                    continue
                except OSError:  # out of descriptors, say: the waiting clients run the hook themselves
                    time.sleep(0.1)
                    continue
                last = time.monotonic()
                thread = threading.Thread(target=server.handle, args=(connection,), daemon=True)
                thread.start()
                running = [*(other for other in running if other.is_alive()), thread]
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            for thread in running:  # the calls it took are answered before it goes
                thread.join(ANSWER_SECONDS)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: its socket removed on the way out
    serve(sys.argv[1], float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
