"""``repeat-hooks install`` / ``uninstall``: the hook command's entries merged into a CLI's JSON settings file.

Written once for every coding CLI whose hooks live in a JSON file of the shape Claude Code, Gemini CLI and Codex CLI
share: ``{"hooks": {"<Event>": [{"matcher": "*", "hooks": [{"type": "command", "command": "..."}]}]}}``. Install
appends one matcher group of ours to each event's list (the user's own groups stay first, in their order, untouched)
and is idempotent; uninstall removes exactly the hooks whose command is ours (``is_ours``: the command runs
``repeat-hooks hook <cli>``), then the groups and event lists that held only ours. The file keeps its indent and
its trailing newline, so install then uninstall of a file written in the CLI's usual form (2-space indent JSON) leaves
it byte-identical. A setting the CLI needs for hooks to run at all (Gemini CLI's ``hooksConfig.enabled``) is set by
install and noted in our first hook (``SET_KEY``), so that uninstall puts back what was there, and only that.
``dry_run`` prints the change as a diff and writes nothing.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import GuardSetupError


def json_kind(value: object) -> str:
    """What a parsed JSON value is, in JSON's words (``object``, ``array``, ``string``, ``number``, ``boolean``,
    ``null``), for the messages about a file or an event that holds the wrong one."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    kinds = ((dict, "object"), (list, "array"), (str, "string"), ((int, float), "number"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


@dataclass(frozen=True)
class Entry:
    """One hook of ours: the CLI's event, its matcher (``None``: an event that takes none), and what the CLI's hook
    entry holds beside ``type`` and ``command`` (a ``timeout``, Gemini's ``name``)."""

    event: str
    matcher: str | None = "*"
    extra: Mapping[str, Any] = field(default_factory=dict)


def command_line(cli: str) -> str:
    """The command a CLI runs for ``repeat-hooks hook <cli>``: this environment's console script by its full path
    (the CLI's own ``PATH`` may not hold it), else this interpreter running ``-m repeat_hooks``."""
    script = Path(sys.executable).parent / "repeat-hooks"
    if script.is_file() and os.access(script, os.X_OK):
        return f"{shlex.quote(str(script))} hook {cli}"
    return f"{shlex.quote(sys.executable)} -m repeat_hooks hook {cli}"


def is_ours(command: object, cli: str) -> bool:
    """The hook command is one ``command_line`` writes: a ``repeat-hooks`` console script or an interpreter's
    ``-m repeat_hooks``, by its absolute path, then ``hook <cli>``, and nothing else. Any other command that runs the
    hook (``runs_hook``: the script on the user's ``PATH``, as a team's shared settings spell it, or inside a wrapper)
    is the user's: install adds none beside it in its event, and uninstall never removes it."""
    words = _words(command)
    if words is None or words[-2:] != ["hook", cli]:
        return False
    runner = words[:-2]
    if not runner or not os.path.isabs(runner[0]):
        return False
    if len(runner) == 1:
        return os.path.basename(runner[0]) == "repeat-hooks"
    return (
        len(runner) == 3 and os.path.basename(runner[0]).startswith("python") and runner[1:] == ["-m", "repeat_hooks"]
    )


def runs_hook(command: object, cli: str) -> bool:
    """The command ends by running ``repeat-hooks hook <cli>`` (the console script by any path, or ``-m
    repeat_hooks``), whatever comes before it (an environment variable, a wrapper)."""
    words = _words(command)
    if words is None or words[-2:] != ["hook", cli] or len(words) < 3:
        return False
    return os.path.basename(words[-3]) == "repeat-hooks" or words[-4:-2] == ["-m", "repeat_hooks"]


def _words(command: object) -> list[str] | None:
    if not isinstance(command, str):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


def project_root(folder: str) -> Path:
    """The project a ``--project`` install is for: the nearest folder at or above ``folder`` that is a git checkout's
    root (holds ``.git``), else ``folder`` itself (a CLI started at the project's root reads its settings there)."""
    start = Path(folder).resolve()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def tracked_note(path: Path, root: Path) -> str | None:
    """A note for a project settings file git would commit (it names this machine's interpreter), or ``None``."""
    import subprocess

    if not (root / ".git").exists():
        return None
    try:
        checked = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "-q", str(path)], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if checked.returncode != 1:  # 0: ignored; 128: no git, or not a checkout
        return None
    return f"{path}: names this machine's interpreter and git does not ignore it: add it to .gitignore"


SET_KEY = "repeatHooksSet"
"""The key, in the first hook of ours, listing the settings ``installed`` set (``settings``) with what each was
before (``[path]``: absent, so uninstall removes it; ``[path, value]``: uninstall puts ``value`` back)."""


def installed(
    document: Mapping[str, Any],
    entries: Sequence[Entry],
    command: str,
    cli: str,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``document`` with our hook for each of ``entries``: a hook of ours already there is kept where it is (its
    command updated to ``command``), a missing one appended as a matcher group of its own after the user's, none
    where an entry of the user's runs the hook already (``is_ours``).
    ``settings``: a dotted path (``"hooksConfig.enabled"``) to the value the CLI needs there for hooks to run; one
    that differs is set, and what it was is noted in our first hook (``SET_KEY``), for ``removed`` to put back."""
    result = _with_hooks(document, entries, command, cli)
    mine = [hook for group in _all_groups(result["hooks"]) for hook in _ours(group, cli)]
    if not mine:
        return result  # the user's own entries run the hook everywhere: theirs to set up, nothing of ours to note in
    changed = []
    for path, value in (settings or {}).items():
        parent, *_ = path.split(".")
        if parent not in result:
            changed.append([parent])
            result[parent] = {}
        holder, last = _holder(result, path)
        if last not in holder:
            changed.append([path])
        elif holder[last] != value:
            changed.append([path, holder[last]])
        holder[last] = value
    if changed:
        mine[0][SET_KEY] = [*mine[0].get(SET_KEY, []), *changed]
    return result


def _holder(document: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The object holding a dotted path's last key (made where missing), and that key."""
    *parents, last = path.split(".")
    holder = document
    for key in parents:
        if not isinstance(holder.get(key), dict):
            raise GuardSetupError(f"'{key}' in the settings is a JSON {json_kind(holder.get(key))}, not an object")
        holder = holder[key]
    return holder, last


def _ours(group: object, cli: str) -> list[dict[str, Any]]:
    return [hook for hook in _hooks_of(group) if is_ours(hook.get("command"), cli)]


def _with_hooks(document: Mapping[str, Any], entries: Sequence[Entry], command: str, cli: str) -> dict[str, Any]:
    result = copy.deepcopy(dict(document))
    made = [] if "hooks" in result else [["hooks"]]  # noted in our first hook: uninstall removes them once empty
    hooks = result.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise GuardSetupError(f"'hooks' is a JSON {json_kind(hooks)}, not an object of events")
    for entry in entries:
        if entry.event not in hooks:
            made.append([f"hooks.{entry.event}"])
        groups = hooks.setdefault(entry.event, [])
        if not isinstance(groups, list):
            raise GuardSetupError(f"hooks.{entry.event} is a JSON {json_kind(groups)}, not an array")
        ours = {"type": "command", "command": command, **entry.extra}
        theirs = [hook for group in groups for hook in _hooks_of(group) if runs_hook(hook.get("command"), cli)]
        if theirs and not any(is_ours(hook.get("command"), cli) for hook in theirs):
            continue  # the user's own entry runs the hook here already: a second would see each event twice
        found = False
        for group in groups:
            for index, hook in enumerate(_hooks_of(group)):
                if is_ours(hook.get("command"), cli):
                    group["hooks"][index] = {**hook, **ours} if not found else hook
                    found = True
        if not found:
            group = {"matcher": entry.matcher} if entry.matcher is not None else {}
            groups.append({**group, "hooks": [ours]})
    mine = [hook for group in _all_groups(hooks) for hook in _ours(group, cli)]
    if made and mine:
        mine[0][SET_KEY] = [*mine[0].get(SET_KEY, []), *made]
    return result


def _all_groups(hooks: Mapping[str, Any]) -> list[Any]:
    return [group for groups in hooks.values() if isinstance(groups, list) for group in groups]


def removed(document: Mapping[str, Any], cli: str) -> dict[str, Any]:
    """``document`` without our hooks: the groups left empty by that removed too, and the event lists and ``hooks``
    that install made (noted in our first hook) once nothing is left in them; everything else as it was (an empty
    list the user had stays)."""
    result = copy.deepcopy(dict(document))
    hooks = result.get("hooks")
    if not isinstance(hooks, dict):
        return result
    noted = [
        hook for groups in hooks.values() if isinstance(groups, list) for group in groups for hook in _ours(group, cli)
    ]
    for change in reversed([c for hook in noted for c in hook.get(SET_KEY, []) if isinstance(c, list) and c]):
        path = str(change[0])
        if path == "hooks" or path.startswith("hooks."):
            continue  # a container of hooks install made: removed below, once our hooks are out of it
        try:
            holder, last = _holder(result, path)
        except GuardSetupError:
            continue
        if len(change) > 1:
            holder[last] = change[1]
        elif "." not in path:
            if result.get(path) == {}:  # made by install, and nothing of the user's in it since
                del result[path]
        else:
            holder.pop(last, None)
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            inner = _hooks_of(group)
            if not any(is_ours(hook.get("command"), cli) for hook in inner):
                kept.append(group)
                continue
            left = [hook for hook in inner if not is_ours(hook.get("command"), cli)]
            if left:
                kept.append({**group, "hooks": left})
        hooks[event] = kept  # an event list install made goes below, with the changes it noted
    for change in reversed([c for hook in noted for c in hook.get(SET_KEY, []) if isinstance(c, list) and c]):
        path = str(change[0])
        if path == "hooks" and result.get("hooks") == {}:
            del result["hooks"]
        elif path.startswith("hooks.") and hooks.get(path[6:]) == []:
            del hooks[path[6:]]
    return result


def _hooks_of(group: object) -> list[dict[str, Any]]:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return []
    return [hook for hook in group["hooks"] if isinstance(hook, dict)]


def edit(
    path: Path,
    change: Callable[[Mapping[str, Any]], dict[str, Any]],
    *,
    dry_run: bool = False,
    out: IO[str] | None = None,
) -> bool:
    """Apply ``change`` to the JSON settings file at ``path`` (a missing file is ``{}``), keeping its indent and
    trailing newline; print what changed (a diff with ``dry_run``, which writes nothing). Returns whether it
    changed. Raises ``GuardSetupError`` for a file that is not a JSON object."""
    out = out or sys.stdout
    path = Path(os.path.realpath(path))  # a settings file that is a link (dotfiles) is written where it points
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = ""
    except UnicodeDecodeError:
        raise GuardSetupError(f"{path}: not UTF-8 text; fix it or move it away first") from None
    try:
        document = json.loads(before) if before.strip() else {}
    except ValueError as error:
        commented = "//" in before or "/*" in before
        hint = " (it has comments, which the CLI may allow and install cannot keep: add the hooks by hand)"
        said = f"{path}: not JSON ({error}){hint if commented else ''}; fix it or move it away first"
        raise GuardSetupError(said) from None
    if not isinstance(document, dict):
        raise GuardSetupError(f"{path}: holds a JSON {json_kind(document)}, not an object of settings")
    after_document = change(document)
    if after_document == document:
        out.write(f"{path}: nothing to change\n")
        return False
    after = _written(after_document, before)
    if dry_run:
        import difflib

        diff = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), str(path), f"{path} (after)"
        )
        out.writelines(line if line.endswith("\n") else line + "\n" for line in diff)
        return True
    mode = path.stat().st_mode & 0o7777 if before or path.exists() else 0o600
    if not mode & 0o200:
        raise GuardSetupError(f"{path}: is read-only; make it writable first (or edit it by hand)")
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".repeat-hooks.tmp", dir=path.parent)
    try:
        os.fchmod(descriptor, mode)  # the file's own mode from the start: a 0600 file is never readable by others
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(after)
        os.replace(temporary, path)  # a reader never sees half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    out.write(f"{path}: updated\n")
    return True


def _written(document: Mapping[str, Any], before: str) -> str:
    """``document`` as JSON in the form of the text it replaces: its indent (2 spaces for a new file; none for a file
    on one line, with its separators), its escapes of non-ASCII characters (``\\u00fc``, if it had them and no raw
    ones) and its trailing newline."""
    ascii_only = "\\u" in before and before.isascii()
    newline = "\n" if before.endswith("\n") or not before else ""
    if before.strip() and "\n" not in before.strip():
        separators = (",", ":") if '": ' not in before and '", ' not in before else (", ", ": ")
        return json.dumps(document, separators=separators, ensure_ascii=ascii_only) + newline
    indent: str | int = 2
    for line in before.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            indent = line[: len(line) - len(stripped)]
            break
    return json.dumps(document, indent=indent, ensure_ascii=ascii_only) + newline
