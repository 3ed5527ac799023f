"""The hook command: a coding CLI's hooks (Claude Code, Gemini CLI, Codex CLI) run one process per event, which
reads the event on stdin, decides with the guard's state from a store shared by every process, answers on stdout
and exits. Written once here; an adapter's ``Hook`` (its CLI's protocol) only translates the events and answers.

One event is one atomic read-modify-write of the session's state in the embedded store (``SQLiteStore``, a file
under the user's state dir): the hook processes of parallel calls, which every one of these CLIs runs at once,
count exactly, and a redelivered event counts once (the call's tool-use id is its ``call_id``). What an event
means (``Event``): a turn starts (``Turn``), a call is about to run (``Asked``: allowed, or denied with the text
the model reads), a call ran (``Ran``: its outcome and the result as the model reads it), a model response's calls
have all resolved (``Responded``: the model call is counted, and the next one decided: the stop rules end the
turn there), the model answered with text (``Answered``: counted with its answer, for a loop around the agent).
Never a traceback into the CLI: an event that is not one JSON object (or too large), a settings file
that cannot be used, or a store that cannot be reached is one line on stderr and the outage policy's answer
(``fail``: ``"open"``, the CLI goes on, exiting with the CLI's code for a hook error that blocks nothing;
``"closed"``, the call is denied or the turn ended). The stderr lines hold tool names, setting names and the store's
path, never an argument or a result.

Settings (``settings``): JSON files holding ``Policy``'s fields, plus ``fail`` and (user file only) ``state``, the
SQLite file: the project's ``.repeat-hooks.json`` over the user's ``$XDG_CONFIG_HOME/repeat-hooks/settings.json``
(``~/.config/...``; ``REPEAT_HOOKS_SETTINGS`` names another), key by key. The state file: ``REPEAT_HOOKS_STATE``,
else the user file's ``state``, else ``$XDG_STATE_HOME/repeat-hooks/hooks.sqlite3`` (``~/.local/state/...``).

Recording (user file only): ``record``, a folder, makes every hook process write what it decided as a
``DigestRecorder`` does (digests and tool names, no value), the session as the conversation, so ``repeat-hooks
replay <folder>`` and ``tune`` read a user's coding sessions; ``record_key_file``, a file of 16 or more bytes, keys
the digests (then give ``--digest-key-file`` to replay and tune). Each hook process is a writer of its own file
set; the reader pairs an outcome with the call another process decided. A recording that cannot be written is one
line on stderr, and the guard goes on.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any

from ..call import ToolCall
from ..decision import Refusal, RefusalKind, Stop
from ..errors import GuardSetupError
from ..policy import Policy
from ..state import GuardState
from ..stop_rules import Feed
from .install import json_kind
from .resident import MAX_EVENT_BYTES, SETTINGS_ENV, STATE_ENV

if TYPE_CHECKING:
    from ..offline.recording import DigestRecorder

PROJECT_FILE = ".repeat-hooks.json"
"""The project's settings file, in the project's root folder."""
COMMAND_SETTINGS = ("fail", "state", "record", "record_key_file")
"""The settings besides ``Policy``'s: the outage policy; the user's file only: the state's SQLite file, the folder
the hook calls are recorded in, and the file whose bytes key the recording's digests."""
USER_ONLY = ("state", "record", "record_key_file")
"""Settings a project's file may not give: where the user's own files are written (a checkout must not choose)."""
STORE_TIMEOUT = 5.0
"""Seconds an event waits for another hook process's transaction (well inside every CLI's hook timeout)."""
NO_FEED: Mapping[Feed, str] = MappingProxyType(
    {
        Feed.SECONDS: "a hook command sees no model call's time",
        Feed.COST: "a hook command sees no model call's usage",
        Feed.ANSWERS: "this CLI's hook events carry no text answer",
    }
)
"""The figures a coding CLI's hook events may not carry: a setting that needs one the adapter's ``feeds`` lack is left
out of its guard (``Settings.unused``; ``repeat-hooks install`` says so), never a reason to turn the guard off. No
CLI's events carry a model call's time or usage; Claude Code's carry each answer (``Answered``), Gemini CLI's and
Codex's none."""


class Problem(Exception):
    """What makes an event unusable (its one-line reason); the command fails as ``fail`` says."""


class SettingsError(GuardSetupError):
    """Settings that cannot be used (the message names the file and the setting); ``fail``: the outage policy they
    give, if that much could be read."""

    def __init__(self, message: str, fail: str = "open") -> None:
        super().__init__(message)
        self.fail = fail


@dataclass(frozen=True)
class Turn:
    """A user prompt starts a turn (fresh per-turn counts, unless its id is the current turn's)."""

    responds: bool = False
    """The model is called next with no event of the CLI's before it (Claude Code): its first response begins now,
    so that the calls of every response, the first too, are judged on what the model had seen when it began."""


@dataclass(frozen=True)
class Asked:
    """A call is about to run: allow it, or deny it with the refusal the model reads (and end the turn at a stop)."""

    call: ToolCall


@dataclass(frozen=True)
class Ran:
    """A call ran: its outcome, and its result as the model reads it."""

    call: ToolCall
    ok: bool
    result: Any


@dataclass(frozen=True)
class Responded:
    """A model response's calls have all resolved: the model call is counted, and the next one decided."""

    delivery_id: str | None = None
    before: bool = False
    """The CLI's event comes before every model call, the turn's first too (Gemini's ``BeforeModel``, Codex's
    ``PreModelRequest``), not after a response: the turn's first only decides (there is no response to count yet)."""
    unasked: tuple[Ran, ...] = ()
    """Calls of the response the CLI answered itself, with no event before them (Claude Code: a tool the agent lacks):
    each not decided in this response (by its call id) is decided now and, let through, recorded as it ran (its error
    as the model read it), so that its repeats count; a refusal's text is the answer's note for the model."""


@dataclass(frozen=True)
class Answered:
    """The model answered with text, calling no tool (Claude Code's ``Stop``): the model call is counted with its
    answer (``max_same_answers``). The turn ends there unless a loop around the agent runs it again (a ``Stop`` hook
    that blocks), with no event before that model call, so the next one is decided now; but at the turn's first
    answer (no loop has run it again yet) only within ``max_model_calls``: a stop there would end a turn that is over
    (Claude Code empties its result), and a loop's next model call is decided at its end instead."""

    answer: str | None
    again: bool = False
    """A loop around the agent has run it again in this turn (Claude Code's ``stop_hook_active``)."""


Step = Turn | Asked | Ran | Responded | Answered


@dataclass(frozen=True)
class Event:
    """What one hook event means: the state's store key (the CLI's session, and a sub-agent's id), the turn's id
    (``None``: the CLI names none), and the ``step`` (``None``: nothing for the guard, answered as allowed)."""

    key: str
    turn_id: str | None
    step: Step | None


Answer = tuple[Mapping[str, Any] | None, int]
"""What the command prints on stdout (JSON; ``None``: nothing) and its exit code."""


class CommandHook:
    """One CLI's hook protocol, for ``run``: what its events mean (``read``) and the JSON of each answer (``allowed``,
    ``denied``, ``ended``; a decision exits 0). An adapter subclasses it, sets ``cli``, ``asks`` and ``feeds``, and
    writes those four; the rest has its default."""

    cli: str = ""
    """The CLI's name in ``repeat-hooks hook <cli>``."""
    asks: str = ""
    """The CLI's name for the event of a call about to run (``PreToolUse``): an event of that name the hook cannot use
    is denied when failing closed, even when nothing else of it could be read."""
    feeds: tuple[Feed, ...] = (Feed.OUTCOMES, Feed.MODEL_CALLS)
    """What the CLI's events feed the guard (``kit.FEEDS``; with ``Feed.WARNINGS`` where a result can carry a note)."""
    failed_open: int = 1
    """The exit code of a hook that failed but blocks nothing (the CLI shows its stderr, and goes on)."""
    project_variable: str | None = None
    """The environment variable the CLI names the project's folder in, if any (else the event's ``cwd``)."""

    @property
    def owner(self) -> str:
        """The command as the user runs it (``repeat-hooks hook claude-code``), naming it in every message."""
        return f"repeat-hooks hook {self.cli}"

    def read(self, event: Mapping[str, Any], policy: Policy) -> Event:
        """The meaning of one event (raises ``Problem`` for one that lacks what it needs)."""
        raise NotImplementedError(f"{type(self).__name__}.read")

    @staticmethod
    def field(event: Mapping[str, Any], name: str) -> str:
        """The event's non-empty text field ``name`` (``session_id``, ``tool_name``): else ``Problem``, naming the
        event and the field."""
        value = event.get(name)
        if not isinstance(value, str) or not value:
            raise Problem(f"the {event.get('hook_event_name') or 'hook'} event has no {name}")
        return value

    def project(self, event: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        """The project folder whose settings file applies (``None``: none known)."""
        folder = (environ.get(self.project_variable) if self.project_variable else None) or event.get("cwd")
        return folder if isinstance(folder, str) and folder else None

    def allowed(self, event_name: str, warning: str | None) -> Mapping[str, Any] | None:
        """The answer that lets an event go on (``None``: nothing printed); ``warning``: a note for the model after a
        result (``Policy(warn=True)``)."""
        return None

    def denied(self, refusal: Refusal, stop: Stop | None) -> Mapping[str, Any]:
        """The answer to a call refused (``refusal``: what the model reads); ``stop``: the turn ends too."""
        raise NotImplementedError(f"{type(self).__name__}.denied")

    def ended(self, stop: Stop) -> Mapping[str, Any] | None:
        """The answer that ends the turn at a response's end (no further model call), the user told ``stop``."""
        raise NotImplementedError(f"{type(self).__name__}.ended")

    def allow(self, event: Mapping[str, Any], warning: str | None) -> Answer:
        return self.allowed(str(event.get("hook_event_name")), warning), 0

    def deny(self, refusal: Refusal, stop: Stop | None) -> Answer:
        return self.denied(refusal, stop), 0

    def end(self, stop: Stop) -> Answer:
        return self.ended(stop), 0


def cli_call(
    name: str,
    tool_input: Any,
    call_id: str | None,
    policy: Policy,
    *,
    read_only: frozenset[str] = frozenset(),
    writes: frozenset[str] = frozenset(),
    volatile: Mapping[str, frozenset[str]] = MappingProxyType({}),
) -> ToolCall:
    """The ``ToolCall`` of a call a CLI is about to run (or ran): ``call_id`` its id (``None``: the CLI gives none),
    the fields ``volatile`` names for its tool left out (free text the model writes afresh beside the real arguments),
    and its effect: ``read_only`` tools change nothing, ``writes`` change files, any other is unknown (a success may
    change what others return); a tool the settings name in ``read_only`` or ``destructive`` is theirs to decide."""
    dropped = volatile.get(name)
    arguments = tool_input if tool_input is not None else {}
    if dropped and isinstance(arguments, Mapping):
        arguments = {field: value for field, value in arguments.items() if field not in dropped}
    effect: bool | None = None
    if name not in policy.read_only and name not in policy.destructive:
        effect = True if name in read_only else False if name in writes else None
    return ToolCall(name, arguments, call_id=call_id or None, read_only=effect)


@dataclass(frozen=True)
class Settings:
    """The guard's settings for one event: the policy, the outage policy, the state's SQLite file, and the settings
    left out for this CLI (``unused``: each with why), which its events cannot feed (the settings file is every CLI's:
    ``warn`` works for one CLI and not another)."""

    policy: Policy
    fail: str
    state: Path
    unused: tuple[str, ...] = ()
    record: Path | None = None
    """The folder the hook calls are recorded in (``None``: not recorded)."""
    record_key: bytes = b""
    """The recording's digest key (``b""``: unkeyed)."""


def read_event(stream: IO[bytes]) -> dict[str, Any]:
    """One event from ``stream``: a JSON object of at most ``MAX_EVENT_BYTES``; else ``Problem``, saying why."""
    raw = stream.read(MAX_EVENT_BYTES + 1)
    if len(raw) > MAX_EVENT_BYTES:
        raise Problem(f"the event on stdin is over {MAX_EVENT_BYTES} bytes")
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError) as error:
        where = f" ({error.msg} at char {error.pos})" if isinstance(error, json.JSONDecodeError) else ""
        raise Problem(f"the event on stdin is not JSON{where}") from None
    if not isinstance(event, dict):
        raise Problem(f"the event on stdin is a JSON {json_kind(event)}, not an object")
    return event


def _home(variable: str, fallback: str, environ: Mapping[str, str]) -> Path:
    base = environ.get(variable)
    return Path(base) if base and os.path.isabs(base) else Path(environ.get("HOME") or Path.home()) / fallback


def user_file(environ: Mapping[str, str]) -> Path:
    """The user's settings file: ``REPEAT_HOOKS_SETTINGS``, else ``$XDG_CONFIG_HOME/repeat-hooks/settings.json``."""
    named = environ.get(SETTINGS_ENV)
    return Path(named) if named else _home("XDG_CONFIG_HOME", ".config", environ) / "repeat-hooks" / "settings.json"


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise SettingsError(f"{path}: cannot be read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: not UTF-8 text") from None
    try:
        found = json.loads(text)
    except ValueError as error:
        raise SettingsError(f"{path}: not JSON ({error})") from None
    if not isinstance(found, dict):
        raise SettingsError(f"{path}: holds a JSON {json_kind(found)}, not an object of settings")
    return found


def settings(
    project: str | None,
    environ: Mapping[str, str],
    *,
    owner: str,
    feeds: tuple[Feed, ...] = (Feed.OUTCOMES, Feed.MODEL_CALLS),
) -> Settings:
    """The settings for an event in ``project``: the project's file over the user's, key by key, validated as an
    adapter's keywords are (``policy_from``: a misspelt setting names the right one). Raises ``GuardSetupError``
    naming the files (``SettingsError``)."""
    from pydantic import ValidationError

    from .setup import check_budgets, policy_from

    user = user_file(environ)
    files = [user, *([Path(project) / PROJECT_FILE] if project else [])]
    merged: dict[str, Any] = {}
    for path in files:
        found = _load(path)
        for name in USER_ONLY:
            if path is not user and name in found:
                raise SettingsError(
                    f"{path}: '{name}' is a user setting (where the user's files go is theirs to choose)"
                )
        merged.update(found)
    named = ", ".join(str(path) for path in files)
    fail = merged.pop("fail", "open")
    state, record, key_file = (merged.pop(name, None) for name in USER_ONLY)
    if fail not in ("open", "closed"):
        raise SettingsError(f"{named}: fail is 'open' or 'closed', not {fail!r}")
    for name, value, what in (
        ("state", state, "the path of the state's SQLite file"),
        ("record", record, "the path of the folder to record in"),
        ("record_key_file", key_file, "the path of a file whose bytes key the recording's digests"),
    ):
        if value is not None and not (isinstance(value, str) and value):
            raise SettingsError(f"{user}: {name} is {what}, not {value!r}", fail)
    if key_file is not None and record is None:
        raise SettingsError(f"{user}: record_key_file keys a recording: set record (a folder) too", fail)
    try:
        policy = policy_from(None, merged, owner=owner, keywords=COMMAND_SETTINGS)
        policy, unused = _fed(policy, feeds)
        check_budgets(policy, owner=owner, cost=None, clock=None, feeds=feeds, why=NO_FEED)
    except (TypeError, GuardSetupError, ValidationError) as error:
        first = str(error).replace("\n", "; ").replace("=...?", "?")  # a file's key, not a keyword
        raise SettingsError(f"{named}: {first}", fail) from None
    given = environ.get(STATE_ENV)
    if given:
        where = Path(given).expanduser()
    elif state:  # relative to the user's settings file, not to wherever the hook runs
        where = user.parent / Path(state).expanduser()
    else:
        where = _home("XDG_STATE_HOME", ".local/state", environ) / "repeat-hooks" / "hooks.sqlite3"
    folder = None if record is None else user.parent / Path(record).expanduser()
    key = b"" if key_file is None else _key(user, user.parent / Path(key_file).expanduser(), fail)
    return Settings(policy, fail, where, unused, folder, key)


def _key(user: Path, path: Path, fail: str) -> bytes:
    """The bytes of ``record_key_file`` (16 or more); else ``SettingsError`` naming it."""
    try:
        key = path.read_bytes()
    except OSError as error:
        raise SettingsError(f"{user}: record_key_file {path}: {error.strerror or error}", fail) from None
    if len(key) < 16:
        raise SettingsError(
            f"{user}: record_key_file {path} holds {len(key)} bytes; a digest key needs 16 or more", fail
        )
    return key


def _fed(policy: Policy, feeds: tuple[Feed, ...]) -> tuple[Policy, tuple[str, ...]]:
    """``policy`` without the settings that need what a CLI's events never carry (``NO_FEED``), and those settings,
    each with why: a budget on model seconds, cost or repeated answers, and ``warn`` where a result takes no note."""
    from ..stop_rules import STOP_RULES

    missing = policy.feeds() - frozenset(feeds)
    reset: dict[str, Any] = {}
    for rule in STOP_RULES:
        if rule.feed in missing and rule.feed in NO_FEED and getattr(policy, rule.setting) is not None:
            reset[rule.setting] = None
    if Feed.WARNINGS in missing and policy.warn:
        reset["warn"] = False
    if not reset:
        return policy, ()
    why = {rule.setting: NO_FEED[rule.feed] for rule in STOP_RULES if rule.feed is not None and rule.feed in NO_FEED}
    why["warn"] = "it hands the model no note after a result"
    kept = Policy(**{**policy.model_dump(exclude_unset=True), **reset})
    return kept, tuple(f"{name} ({why[name]})" for name in reset)


def decide(policy: Policy, state: GuardState, event: Event) -> tuple[Refusal | None, Stop | None, str | None]:
    """The guard's verbs for one event, on ``state`` (in the store's transaction): the refusal of a call, the stop
    of the turn, and the note for the model: the warning for a result (``Policy(warn=True)``), or at a response's end
    the refusals of the calls the CLI answered itself (``Responded.unasked``). A refusal that reaches
    ``max_refusals`` ends the turn at once, its response counted as a model call first (the CLI will not ask the hook
    before the next)."""
    step, turn_id = event.step, event.turn_id
    if isinstance(step, Turn):
        policy.start_turn(state, turn_id=turn_id)
        if step.responds:
            return None, policy.decide_model_call(state, turn_id=turn_id), None
    elif isinstance(step, Asked):
        refusal = policy.decide_tool_call(state, step.call, turn_id=turn_id)
        limit = policy.max_refusals
        if refusal is None or limit is None:
            return refusal, None, None
        if refusal.reason is RefusalKind.TURN_ENDED:
            return refusal, state.turn.stop, None
        if state.turn.refused_responses < max(1, limit):
            return refusal, None, None
        policy.record_model_call(state, turn_id=turn_id)
        return refusal, policy.decide_model_call(state, turn_id=turn_id), None
    elif isinstance(step, Ran):
        policy.record_tool_result(state, step.call, ok=step.ok, result=step.result, turn_id=turn_id)
        return None, None, policy.warning(state, step.call)
    elif isinstance(step, Responded):
        if state.turn.stop is not None:
            return None, state.turn.stop, None
        notes = _unasked(policy, state, step, turn_id)
        if not (step.before and state.turn.responses == 0):
            policy.record_model_call(state, turn_id=turn_id, delivery_id=step.delivery_id)
        return None, policy.decide_model_call(state, turn_id=turn_id), "\n\n".join(notes) or None
    elif isinstance(step, Answered):
        if state.turn.stop is not None:  # told already
            return None, None, None
        policy.record_model_call(state, turn_id=turn_id, answer=step.answer)
        limit = policy.max_model_calls
        if step.again or limit is None or state.turn.model_calls < limit:
            return None, policy.decide_model_call(state, turn_id=turn_id), None
    return None, None, None


def _unasked(policy: Policy, state: GuardState, step: Responded, turn_id: str | None) -> list[str]:
    """``Responded.unasked`` decided and recorded (none again for a response delivered twice); the texts for the
    model: each refusal, and each warning (``Policy(warn=True)``) of a call let through."""
    if not step.unasked or (step.delivery_id is not None and step.delivery_id in state.deliveries):
        return []
    notes = []
    for ran in step.unasked:
        if policy.decided(state, ran.call, turn_id=turn_id):
            continue  # decided at its own event
        refusal = policy.decide_tool_call(state, ran.call, turn_id=turn_id)
        if refusal is None:
            policy.record_tool_result(state, ran.call, ok=ran.ok, result=ran.result, turn_id=turn_id)
        note = refusal.message if refusal is not None else policy.warning(state, ran.call)
        if note:
            notes.append(note)
    return notes


def run(
    hook: CommandHook,
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """The hook command for one event: read it, decide, print the answer; returns the exit code. Never raises for
    a bad event, settings file or store: one line on ``stderr``, and the outage policy's answer."""
    stdin = stdin if stdin is not None else sys.stdin.buffer if sys.stdin is not None else io.BytesIO()
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    environ = os.environ if environ is None else environ
    fail, event, meaning = "open", None, None
    try:
        event = read_event(stdin)
        chosen = settings(hook.project(event, environ), environ, owner=hook.owner, feeds=hook.feeds)
        fail = chosen.fail
        meaning = hook.read(event, chosen.policy)
        answer = hook.allow(event, None) if meaning.step is None else _decided(hook, chosen, event, meaning, stderr)
    except (Problem, GuardSetupError, OSError) as problem:  # a setup that cannot work: the guard is off until fixed
        fail = getattr(problem, "fail", fail) if event is not None else _fail_of(hook, environ)
        answer = _failed(hook, event, meaning, str(problem).replace("\n", "; "), fail, stderr)
    except Exception as error:  # a bug: still no traceback into the CLI, and its type only (its text may hold values)
        answer = _failed(
            hook, event, meaning, f"unexpected {type(error).__name__} (a bug: please report it)", fail, stderr
        )
    output, code = answer
    if output is not None:
        stdout.write(json.dumps(output, separators=(",", ":")) + "\n")
        stdout.flush()
    return code


def _fail_of(hook: CommandHook, environ: Mapping[str, str]) -> str:
    """The outage policy the settings give, for an event that could not be read (``"open"`` if they cannot be
    read either)."""
    try:
        return settings(hook.project({}, environ), environ, owner=hook.owner, feeds=hook.feeds).fail
    except SettingsError as mistake:
        return mistake.fail


def _decided(hook: CommandHook, chosen: Settings, event: Mapping[str, Any], meaning: Event, stderr: IO[str]) -> Answer:
    """One event decided in the store's transaction; a store that cannot be reached fails as ``fail`` says."""
    from ..errors import StoreUnavailable
    from ..stores.sqlite import SQLiteStore

    policy = chosen.policy
    try:
        chosen.state.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store = SQLiteStore(chosen.state, timeout=STORE_TIMEOUT)
        if chosen.record is None:
            refusal, stop, warning = store.update_now(meaning.key, lambda state: decide(policy, state, meaning))
        else:
            from ..observe import scope

            recorder = _recorder(chosen.record, chosen.record_key)
            with scope(conversation_id=meaning.key):  # the session (a sub-agent's: its own key) as the conversation
                refusal, stop, warning = store.update_now(meaning.key, lambda state: decide(policy, state, meaning))
            if recorder.failing is not None:
                stderr.write(f"{hook.owner}: recording: {recorder.failing}; the guard goes on\n")
    except (StoreUnavailable, OSError) as failure:
        reason = f"the state at {chosen.state} cannot be reached ({type(failure).__name__}: {failure})"
        return _failed(hook, event, meaning, reason.replace("\n", " "), chosen.fail, stderr)
    if refusal is not None:
        return hook.deny(refusal, stop)
    if stop is not None and not isinstance(meaning.step, Asked):
        ended, code = hook.end(stop)
        noted = hook.allow(event, warning)[0] if warning else None
        return ({**noted, **(ended or {})} if noted else ended), code
    return hook.allow(event, warning)


_RECORDING = threading.Lock()
_RECORDERS: dict[tuple[Path, bytes], DigestRecorder] = {}
"""The recorder this process installed (at most one: a resident server keeps it from event to event)."""


def _recorder(folder: Path, key: bytes) -> DigestRecorder:
    """The recorder into ``folder`` with ``key``, installed once per process (another folder or key replaces it)."""
    from ..offline.recording import DigestRecorder

    with _RECORDING:
        recorder = _RECORDERS.get((folder, key))
        if recorder is None:
            for other in _RECORDERS.values():
                other.uninstall()
            _RECORDERS.clear()
            recorder = _RECORDERS[folder, key] = DigestRecorder(folder, digest_key=key or None).install()
        return recorder


def _failed(
    hook: CommandHook, event: Mapping[str, Any] | None, meaning: Event | None, reason: str, fail: str, stderr: IO[str]
) -> Answer:
    """One line on stderr; then, failing open, nothing on stdout and the CLI's code for a hook error that blocks
    nothing. Failing closed: a call about to run is denied, a response's end ends the turn (a text answer: once a
    loop runs the agent again), a turn's start or a call's outcome goes on (nothing to deny); an event that could not
    be read or settings that could not be used end the turn."""
    from ..decision import StopReason
    from ..messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP

    stderr.write(f"{hook.owner}: {reason}; failing {fail}\n")
    stderr.flush()
    if fail == "open":
        return None, hook.failed_open
    given = event or {}
    refusal = Refusal(message=STORE_DOWN_REFUSAL, reason=RefusalKind.STORE_UNAVAILABLE)
    if meaning is None:  # the event itself, or the settings, could not be used: the guard is off until fixed
        stop = Stop(message=f"{hook.owner} cannot guard this session ({reason}) and fails closed: fix it, or set "
                    '"fail": "open"', reason=StopReason.STORE_UNAVAILABLE)  # fmt: skip
        asking = given.get("hook_event_name") in (hook.asks, None)  # a call about to run, or an event not read at all
        return hook.deny(refusal, stop) if asking else hook.end(stop)
    step = meaning.step
    if isinstance(step, Asked):
        return hook.deny(refusal, None)
    if isinstance(step, (Turn, Ran)) or (isinstance(step, Answered) and not step.again):  # nothing to deny or end
        return hook.allow(given, None)
    return hook.end(Stop(message=STORE_DOWN_STOP, reason=StopReason.STORE_UNAVAILABLE))


def session_stop(
    returned: Mapping[str, Any] | str | BaseException | None,
    *,
    key: str,
    output: str,
    turn_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    project: str | None = None,
) -> Stop | None:
    """An adapter's ``stop_of``: how the guard ended a session's latest turn (or turn ``turn_id``, while its state keeps
    it), or ``None`` if it did not (or the session is unknown). ``returned`` is a line of the CLI's output naming the
    session (parsed: its ``key``), a session id, or the ``GuardStopped`` a script raised (its stop); ``output`` names
    the CLI's output in the message for anything else. Read from the state file the hook command uses with
    ``environ`` (default: this process's) and ``project``'s settings."""
    from .core import GuardStopped

    if isinstance(returned, BaseException):
        return GuardStopped.of(returned)
    session = returned.get(key) if isinstance(returned, Mapping) else returned
    if not isinstance(session, str) or not session:
        raise GuardSetupError(
            f"stop_of takes {output} (a dict with its {key}), a session id, or the RepeatGuardStopped a script "
            f"raised; got {type(returned).__name__}"
        )
    import asyncio

    from ..stores.sqlite import SQLiteStore

    chosen = settings(project, os.environ if environ is None else environ, owner="stop_of")
    if not chosen.state.exists():
        return None
    state = asyncio.run(SQLiteStore(chosen.state).load(session))
    return None if state is None else state.stop_of(turn_id)
