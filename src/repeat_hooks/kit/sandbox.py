"""An isolated user for the tests that run a coding CLI with the hook command installed (``Home``), and a short private
folder for resident hook servers that a test starts and stops (``resident_folder``). What every CLI adapter's
``testing`` needs, written once: each adapter's ``Home`` only says which CLI it is, which of its variables point
elsewhere, where its own settings live and how to run it. Not for production."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import resident

__all__ = ["Home", "Run", "resident_folder", "served"]


@dataclass
class Run:
    """One headless run of a CLI: its exit code, its JSON lines (parsed) and its stderr; an adapter's ``Run`` adds what
    its CLI's lines say."""

    code: int
    lines: list[dict[str, Any]]
    stderr: str

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """The lines of one ``type``."""
        return [line for line in self.lines if line.get("type") == kind]


class Home:
    """An isolated user in ``root``: ``HOME`` (so the hook's settings and state live under it:
    ``~/.config/repeat-hooks``, ``~/.local/state/repeat-hooks``) and a ``project`` folder the CLI runs in. The
    environment (``env``) drops this process's variables that would point elsewhere (the XDG folders, the hook's own,
    and the CLI's: ``prefixes``); its hook calls are answered by a resident hook server with its socket in ``resident``
    (as a user's are: ``resident_folder`` makes one, and stops its server), or each runs in its own process (``None``:
    ``REPEAT_HOOKS_RESIDENT=off``)."""

    cli: str = ""
    """The CLI's name in ``repeat-hooks hook|install <cli>``."""
    prefixes: tuple[str, ...] = ()
    """The CLI's own environment variables (by prefix), dropped from this process's."""

    def __init__(self, root: str | Path, *, resident: Path | None = None) -> None:
        self.root = Path(root)
        self.resident = resident
        self.project = self.root / "project"
        self.project.mkdir(parents=True, exist_ok=True)

    def own(self) -> dict[str, str]:
        """The CLI's variables that point into this home (``CLAUDE_CONFIG_DIR``...): none here."""
        return {}

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the CLI, the hook command and ``repeat-hooks``, ``extra`` over it."""
        dropped = ("XDG_", "REPEAT_HOOKS_", *self.prefixes)
        kept = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
        served = str(self.resident) if self.resident is not None else "off"
        return {**kept, "HOME": str(self.root), **self.own(), "REPEAT_HOOKS_RESIDENT": served, **extra}

    @property
    def user_settings(self) -> Path:
        """The hook command's user settings file in this home (``~/.config/repeat-hooks/settings.json``)."""
        return self.root / ".config" / "repeat-hooks" / "settings.json"

    def record(self) -> tuple[Path, Path]:
        """Record every hook call (``record`` and ``record_key_file`` in the user's settings, which this replaces):
        the recording's folder and its key's file."""
        import json

        key = self.root / "digest.key"
        key.write_bytes(b"a key of thirty-two bytes, 12345")
        self.user_settings.parent.mkdir(parents=True, exist_ok=True)
        self.user_settings.write_text(json.dumps({"record": "recordings", "record_key_file": str(key)}))
        return self.user_settings.parent / "recordings", key

    def replayed(self, folder: Path, key: Path) -> dict[str, Any]:
        """The default policy's figures of ``repeat-hooks replay <folder> --digest-key-file <key> --json`` (it must
        succeed, and say nothing on stderr)."""
        import json

        done = self.repeat_hooks("replay", str(folder), "--digest-key-file", str(key), "--json")
        assert done.returncode == 0 and done.stderr == "", done.stderr
        (figures,) = json.loads(done.stdout)
        return dict(figures)

    def repeat_hooks(self, *args: str, event: str = "", **extra: str) -> subprocess.CompletedProcess[str]:
        """``repeat-hooks <args>`` (the console command of this environment) run in the project, in this home, with
        ``event`` on its stdin and ``extra`` in its environment."""
        command = [sys.executable, "-m", "repeat_hooks", *args]
        return subprocess.run(
            command, cwd=self.project, env=self.env(**extra), input=event, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``repeat-hooks install <cli>`` (the user's settings, by default); asserts it succeeded."""
        done = self.repeat_hooks("install", self.cli, *args)
        assert done.returncode == 0, done.stderr
        return done

    def run(
        self, command: Sequence[str], env: Mapping[str, str], timeout: float
    ) -> tuple[int, list[dict[str, Any]], str]:
        """``command`` run headless in the project with ``env``: its exit code, its JSON lines (parsed) and stderr
        (a ``Run``'s fields)."""
        import json

        done = subprocess.run(
            list(command),
            cwd=self.project,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return done.returncode, lines, done.stderr


@contextlib.contextmanager
def resident_folder() -> Iterator[Path]:
    """A short folder private to this user for resident hook servers' sockets (a socket's path is at most about 100
    bytes: a test's own temporary folder is often longer); every server in it stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    folder.chmod(0o700)
    try:
        yield folder
    finally:
        for path in folder.glob("*.sock"):
            found = resident.status(path)
            if found is not None and int(found["pid"]) != os.getpid():  # a server in a thread of this one stops itself
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(found["pid"]), signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)  # a server still starting finds no folder, one started sees no socket


def served(folder: Path) -> int:
    """How many hook calls the resident servers in ``folder`` answered."""
    return sum(int((resident.status(path) or {}).get("served", 0)) for path in folder.glob("*.sock"))


def dies_with_parent() -> Callable[[], None] | None:
    """Linux: a ``preexec_fn`` by which a CLI a test starts gets SIGKILL when the process that started it dies
    (``run_retried``'s crash is an ``os._exit`` mid-tool-call: the CLI must not go on without its tools and its model);
    ``None`` elsewhere. ``prctl`` is looked up here, in the parent: the child, forked from a process with threads, only
    calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:  # pragma: no cover - runs in the child, before exec
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return set_death_signal
