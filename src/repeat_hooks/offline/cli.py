"""``repeat-hooks``: the console command.

- ``repeat-hooks hook <cli>`` runs one hook event of a coding CLI (``claude-code``, ``gemini-cli``, ``codex``):
  every tool call of the CLI spawns it, so it is dispatched here before anything else is imported
  (``offline.hooks``); ``install <cli>`` / ``uninstall <cli>`` edit that CLI's settings file;
- the offline tools (``offline.console``): ``replay`` recorded trajectories through policies, side by side;
  ``record`` full trajectories as digests; ``tune`` a policy on recordings. A command whose output is cut short
  (``| head``) ends quietly.

The offline tools' names (``read_trajectories``, ``parse_record``, ``table``...) are read from here as before.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: a hook call's client loads nothing it does not use (``kit.resident``)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    """The ``repeat-hooks`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"]:
        from .hooks import hook

        return hook(args[1:])
    if args[:1] in (["install"], ["uninstall"]):
        from .hooks import install

        try:
            return install(args)
        except BrokenPipeError:  # ``--dry-run | head``: ends quietly, as the offline tools do
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the last flush must not raise again
            return 0
    from .console import main as offline

    return offline(args)


def __getattr__(name: str) -> Any:
    """The offline tools' names, from ``offline.console`` (where they moved so that ``hook`` loads none of them)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module(".console", __package__), name)
