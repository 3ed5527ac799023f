"""``repeat-hooks hook|install|uninstall <cli>``: the coding CLIs' hook command, and its entries in their settings.

``CLIS`` maps each CLI's name to its adapter (a distribution of its own): its module has ``hook()`` (one event from
stdin, answered on stdout; returns the exit code), ``ENTRIES`` (the ``kit.install.Entry`` list of its hooks) and
``settings_file(scope)`` (the CLI's settings file, ``"user"`` or ``"project"``), and may have ``SETTINGS`` (what
install sets for the CLI to run hooks at all: ``kit.install.installed``), ``FEEDS`` (what its
events feed the guard, checked against the settings at install) and ``trajectory`` (its CLI's session transcript as a
replay's ``Trajectory``: ``repeat-hooks replay`` reads Claude Code's). ``hook`` imports the adapter and
nothing of the offline tools: every tool call of the CLI runs it.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: a hook call's client loads nothing it does not use (``kit.resident``)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import ModuleType
    from typing import Any

CLIS = {
    "claude-code": ("repeat_hooks_claude_code", "repeat-hooks-claude-code"),
    "gemini-cli": ("repeat_hooks_gemini_cli", "repeat-hooks-gemini-cli"),
    "codex": ("repeat_hooks_codex", "repeat-hooks-codex"),
}
"""Each CLI's adapter: its module, and the distribution that installs it."""


class Missing(Exception):
    """The CLI is none of ``CLIS``, or its adapter is not installed (the message says what to do)."""


def adapter(name: str | None) -> ModuleType:
    """The adapter module of CLI ``name``; ``Missing`` (saying what to install) for an unknown or absent one."""
    if name not in CLIS:
        raise Missing(f"the CLI is one of {', '.join(CLIS)}, not {name!r}")
    module, distribution = CLIS[name]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module:
            raise
        raise Missing(f"the {name} hook needs its adapter: pip install {distribution}") from None


def hook(args: Sequence[str]) -> int:
    """``repeat-hooks hook <cli>``: one event of ``<cli>``'s hooks. A CLI unknown or not installed is one line on
    stderr and exit code 1 (every CLI here takes it for a hook error that blocks nothing)."""
    from ..kit import resident

    names = ", ".join(CLIS)
    if len(args) != 1 or args[0] not in CLIS:
        wrong = f"usage: repeat-hooks hook <cli>, <cli> one of {names}" if len(args) != 1 else None
        sys.stderr.write(f"repeat-hooks hook: {wrong or f'the CLI is one of {names}, not {args[0]!r}'}\n")
        return 1
    cli, environ = args[0], resident.environment()
    event = sys.stdin.buffer.read(resident.MAX_EVENT_BYTES + 1) if sys.stdin is not None else b""
    answered = resident.ask(cli, event, environ)  # the resident server, when one runs: the core stays loaded there
    if answered is not None:
        given, out, err = answered
        sys.stdout.write(out)
        sys.stdout.flush()
        sys.stderr.write(err)
        return given
    try:
        module = adapter(cli)
    except Missing as missing:
        sys.stderr.write(f"repeat-hooks hook: {missing}\n")
        return 1
    import io

    code: int = module.hook(stdin=io.BytesIO(event), environ=environ)
    sys.stdout.flush()
    resident.start(cli, environ)  # for the next call, after this one's answer
    return code


def add_commands(commands: Any) -> None:
    """The ``hook``, ``install`` and ``uninstall`` subcommands on the console script's parser (``commands``)."""
    names = ", ".join(CLIS)
    run = commands.add_parser("hook", help=f"answer one hook event of a coding CLI ({names}) from stdin")
    run.add_argument("cli", choices=list(CLIS))
    for verb, what in (("install", "add the hook command to"), ("uninstall", "remove the hook command from")):
        parser = commands.add_parser(verb, help=f"{what} a coding CLI's settings file")
        parser.add_argument("cli", choices=list(CLIS))
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--user", dest="scope", action="store_const", const="user", help="the user's (default)")
        scope.add_argument(
            "--project", dest="scope", action="store_const", const="project", help="the project's, in this folder"
        )
        parser.add_argument("--dry-run", action="store_true", help="print the change, write nothing")


def install(args: Sequence[str]) -> int:
    """``repeat-hooks install|uninstall <cli> [--user|--project] [--dry-run]``: 0 done (or nothing to do), 2 for a
    CLI not installed, settings that cannot be used (install checks the hook's settings first) or a settings file
    that is not JSON."""
    import argparse
    import os

    from ..errors import GuardSetupError
    from ..kit.command import settings
    from ..kit.install import command_line, edit, installed, project_root, removed, tracked_note
    from ..stop_rules import Feed

    parser = argparse.ArgumentParser(prog="repeat-hooks")
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    parsed = parser.parse_args(list(args))
    verb, cli = parsed.command, parsed.cli
    try:
        module = adapter(cli)
        scope = parsed.scope or "user"
        root = project_root(os.getcwd())
        path = module.settings_file(scope, cwd=str(root)) if scope == "project" else module.settings_file(scope)
        if verb == "install":
            owner, feeds = f"repeat-hooks hook {cli}", getattr(module, "FEEDS", (Feed.OUTCOMES, Feed.MODEL_CALLS))
            chosen = settings(os.getcwd(), os.environ, owner=owner, feeds=feeds)  # a mistake said now, not at each call
            for unused in chosen.unused:
                sys.stderr.write(f"repeat-hooks install: note: {cli}'s guard leaves out {unused}\n")
            line = command_line(cli)
            needs = getattr(module, "SETTINGS", None)
            skipped = getattr(module, "SKIPPED", None)  # where the CLI lists hooks by name that it does not run

            def merged(document: Mapping[str, Any]) -> dict[str, Any]:
                holder: object = document
                for part in (skipped or "").split(".") if skipped else ():
                    holder = holder.get(part) if isinstance(holder, dict) else None
                if isinstance(holder, list) and "repeat-hooks" in holder:
                    sys.stderr.write(
                        f"repeat-hooks install: note: {path} lists repeat-hooks in {skipped}: {cli} runs none of the "
                        "guard's hooks until you remove it from there\n"
                    )
                return installed(document, module.ENTRIES, line, cli, needs)

            changed = edit(path, merged, dry_run=parsed.dry_run)
            note = tracked_note(path, root) if scope == "project" and changed and not parsed.dry_run else None
            if note is not None:
                sys.stderr.write(f"repeat-hooks install: {note}\n")
        else:
            edit(path, lambda document: removed(document, cli), dry_run=parsed.dry_run)
    except BrokenPipeError:  # ``--dry-run | head``: the reader has what it wanted
        raise
    except (Missing, GuardSetupError, OSError) as problem:
        sys.stderr.write(f"repeat-hooks {verb}: {problem}\n")
        return 2
    return 0
