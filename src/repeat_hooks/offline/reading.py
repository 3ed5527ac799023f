"""Reading digest recordings back: the folder a ``DigestRecorder`` writes, as trajectories to replay and tune.

``read_folder`` reads each writer's files (its rotated ones first, logrotate's ``.gz`` too) and yields one
``DigestTrajectory`` per conversation and agent; every line is checked against the format first
(``check_line``: a malformed one is named and skipped, the rest read), and no line over ``MAX_LINE_CHARS`` is
held; ``as_digests`` turns a full trajectory into the one its live recording would read back (``tune``
analyses every input in this form). See ``recording`` for the format, and for what a digest recording replays
exactly.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..call import digest_secret, key_text, parsed_arguments, plain_value
from ..policy import Policy
from .recording import (
    DIGEST_PATTERN,
    FILE_NAME,
    FILE_PATTERN,
    OPAQUE,
    VERSION,
    Conversation,
    ForeignFile,
    Line,
    field_digest,
    is_schema_name,
    key_check,
    line_bytes,
    open_own,
    trajectory_lines,
)
from .replay import UNRECORDED, NotReplayable, RecordedCall, Trajectory

MAX_LINE_CHARS = 64 * 1024 * 1024
"""A line longer than this is reported and skipped, read in chunks so that memory stays bounded: by every
reader alike (a file named on the command line, and each file of a recorder's folder, its ``.gz`` too)."""


@dataclass(frozen=True)
class DigestTrajectory(Trajectory):
    """A trajectory read from a digest recording: its calls' arguments and results are digest mappings."""

    deep_arguments: frozenset[str] = frozenset()
    """Digests of the schema-like names found below the top level of its calls' arguments (``"*"``: some
    could not be read)."""
    deep_results: frozenset[str] = frozenset()
    """The same, in its results."""
    key_check: str | None = None
    """The fingerprint of the key it was recorded with (``None``: no turn line said)."""
    key: bytes = field(default=b"", repr=False, compare=False)
    """The key the reader was given: the replay digests the policy's ``ignore_*`` names with it."""
    names: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """Field digest -> name, where known (a full trajectory converted by ``as_digests``; a recording has none)."""

    def field_digest(self, name: str) -> str:
        """A field name as this recording writes it; a name written ``#<16 hex digits>`` is a digest already."""
        if len(name) == 17 and name[0] == "#" and DIGEST_PATTERN.fullmatch(name[1:]):
            return name[1:]
        return field_digest(name, self.key)

    def field_name(self, digest: str) -> str:
        """The name of a field digest where known, else ``#<digest>`` (what ``field_digest`` reads back)."""
        return self.names.get(digest, f"#{digest}")

    def replayed_by(self, policy: Policy) -> Policy:
        """``policy`` with its ``ignore_*`` names digested as this recording digests field names; raises
        ``NotReplayable`` when it cannot be replayed exactly under ``policy``."""
        if not policy.ignore_arguments and not policy.ignore_results:
            return policy
        if self.key_check is not None and self.key_check != key_check(self.key):
            given = "no digest key was given" if not self.key else "the digest key given is another"
            return _not_replayable(
                f"{self.id} was recorded with a digest key and {given}: ignore_arguments and ignore_results "
                "name fields by their digests (repeat-hooks replay --digest-key-file FILE)"
            )
        update: dict[str, frozenset[str]] = {}
        for setting, deep in (("ignore_arguments", self.deep_arguments), ("ignore_results", self.deep_results)):
            ignored: frozenset[str] = getattr(policy, setting)
            if not ignored:
                continue
            digests = {name: self.field_digest(name) for name in ignored}
            odd = sorted(name for name, digest in digests.items() if not is_schema_name(name) and digest != name[1:])
            if odd:
                _not_replayable(f"{setting}: {odd[0]!r} is not a schema name, and a digest recording keeps only those")
            if "*" in deep:
                _not_replayable(f"{setting}: {self.id} has a value whose names could not be read")
            nested = sorted(name for name, digest in digests.items() if digest in deep)
            if nested:
                _not_replayable(
                    f"{setting}: {nested[0]!r} occurs below the top level in {self.id}, and a digest recording "
                    "can drop it only at the top level (replay full trajectories to tune it)"
                )
            update[setting] = frozenset(digests.values())
        return policy.model_copy(update=update)


def _not_replayable(why: str) -> Policy:
    raise NotReplayable(why)


def _fed(part: Any) -> Any:
    """A recorded outcome part as the policy is handed it (see the module's docstring)."""
    if part == "?":
        return OPAQUE
    masked, unmasked = (part, part) if isinstance(part, str) else (part[0], part[1])
    return {"~": f"{masked[:8]}_{masked[8:]}", "!": unmasked}


def _result(outcome: Any) -> Any:
    if isinstance(outcome, dict):
        return {name: _fed(part) for name, part in outcome.items()}
    return _fed(outcome)


def _is_digest(value: Any) -> bool:
    return type(value) is str and len(value) == 16 and DIGEST_PATTERN.fullmatch(value) is not None


def _is_part(part: Any) -> bool:
    """Whether ``part`` is an outcome part as the recorder writes one: ``"?"``, a digest, or ``[masked,
    unmasked]``."""
    if type(part) is list:
        return len(part) == 2 and _is_digest(part[0]) and _is_digest(part[1])
    return part == "?" or _is_digest(part)


def _is_outcome(outcome: Any) -> bool:
    return _is_part(outcome) or (type(outcome) is dict and all(_is_part(part) for part in outcome.values()))


def _is_arguments(arguments: Any) -> bool:
    return _is_digest(arguments) or (type(arguments) is dict and all(_is_digest(d) for d in arguments.values()))


def _is_names(names: Any) -> bool:
    return type(names) is list and all(name == "*" or _is_digest(name) for name in names)


_FIELDS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("t", lambda value: type(value) is int, "a turn number"),
    ("m", lambda value: type(value) is int, "a response number"),
    ("r", lambda value: type(value) is int, "a response number"),
    ("i", lambda value: type(value) is int, "an order number"),
    ("n", lambda value: type(value) is str, "the tool's name (text)"),
    ("a", _is_arguments, "the arguments' digests"),
    ("ok", lambda value: type(value) is bool, "true or false"),
    ("o", _is_outcome, "an outcome's digests"),
    ("ro", lambda value: type(value) is bool, "true or false"),
    ("x", lambda value: type(value) is str, "the rule's name (text)"),
    ("k", lambda value: type(value) is str, "the key's fingerprint (text)"),
    ("da", _is_names, "a list of digests"),
    ("dr", _is_names, "a list of digests"),
    ("u", _is_digest, "a call's digest"),
)
"""Each field a line may hold (but ``rh``, ``c``, ``g`` and ``success``, checked first), the shape the recorder
writes it in, and the words that say so."""


def check_line(value: Any) -> dict[str, Any]:
    """``value`` (a parsed line) if it is a digest recording line each of whose fields has the shape the
    recorder writes; else ``ValueError`` naming the first field that has not (the line is then reported and
    skipped, whole: a number that is ``Infinity``, an outcome that is ``5``, never reach the replay)."""
    if not is_digest_line(value):
        raise ValueError('not a digest recording line (no "rh": 1)')
    line: dict[str, Any] = value
    ident, agent = line.get("c"), line.get("g")
    if type(ident) is not str or not (agent is None or type(agent) is str):
        raise ValueError("'c' must be the conversation's id (text), 'g' its agent's name")
    if "success" in line:
        if type(line["success"]) is not bool:
            raise ValueError("'success' must be true or false")
        return line
    if "n" in line and (type(line["n"]) is not str or type(line.get("i")) is not int):
        raise ValueError("a call needs 'n' (its tool's name) and an order 'i'")
    if "t" not in line:
        raise ValueError("'t' must be a turn number")
    if "o" in line and "i" not in line and "u" not in line:
        raise ValueError("an outcome needs 'u', its call's digest (or 'i', its order)")
    for name, valid, words in _FIELDS:
        if name in line and not valid(line[name]):
            raise ValueError(f"'{name}' must be {words}")
    return line


class _Conversation:
    """The lines of one conversation (one agent's part of it) read so far."""

    def __init__(self) -> None:
        self.success: bool | None = None
        self.turns: dict[int, dict[int, list[dict[str, Any]]]] = {}
        self.bounded: set[int] = set()
        """The turns with a model-call line: their calls' batches are known."""
        self.deep_arguments: set[str] = set()
        self.deep_results: set[str] = set()
        self.key_check: str | None = None

    def add(self, line: dict[str, Any]) -> None:
        """Add a line ``check_line`` passed."""
        turn = line["t"]
        responses = self.turns.setdefault(turn, {})
        if "m" in line:
            responses.setdefault(line["m"], [])
            self.bounded.add(turn)
        elif "n" in line:
            responses.setdefault(line.get("r", 0), []).append(line)
            self.deep_arguments.update(line.get("da", ()))
        elif "k" in line:
            self.key_check = line["k"]

    def trajectory(self, ident: str, key: bytes, names: Mapping[str, str]) -> DigestTrajectory:
        turns: list[list[list[RecordedCall]]] = []
        for number in sorted(self.turns):
            responses = self.turns[number]
            if number in self.bounded:
                ordered = [sorted(responses[response], key=_order) for response in sorted(responses)]
            else:  # no model-call line: each call its own response, in the order decided
                ordered = [[line] for line in sorted((x for r in responses.values() for x in r), key=_order)]
            last: dict[str, tuple[bool, Any]] = {}  # arguments (as JSON) -> what that call last returned
            turn: list[list[RecordedCall]] = []
            for lines in ordered:
                calls = []
                for line in lines:
                    said = json.dumps([line["n"], line.get("a")], sort_keys=True)
                    refused = line.get("x")
                    if refused is not None:  # refused live: no outcome; judged on what it last returned
                        ok, result = last.get(said, (False, UNRECORDED))
                    elif "o" in line:
                        ok, result = line.get("ok", True) is not False, _result(line["o"])
                    else:  # ran, but its outcome never reached the recorder
                        ok, result = True, UNRECORDED
                    if refused is None:
                        last[said] = (ok, result)
                    read_only = line.get("ro")
                    hint = read_only if isinstance(read_only, bool) else None
                    calls.append(RecordedCall(line["n"], line.get("a"), result, ok, hint, _text_or_none(refused)))
                turn.append(calls)
            if turn and not turn[-1]:
                turn.pop()  # the model call that answered: the replay decides it after the turn's responses
            turns.append(turn)
        return DigestTrajectory(
            ident,
            turns,
            self.success,
            frozenset(self.deep_arguments),
            frozenset(self.deep_results),
            self.key_check,
            key,
            names,
        )


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _order(line: dict[str, Any]) -> int:
    order: int = line["i"]
    return order


def is_digest_line(value: Any) -> bool:
    """Whether a parsed JSON line is a digest recording's."""
    return isinstance(value, dict) and value.get("rh") == VERSION


class DigestReader:
    """Reads digest recording lines into conversations keyed by conversation and agent: each writer's lines
    in order (``writer()`` before a writer's first file, then ``read`` each of its files, oldest first), then
    ``trajectories()``."""

    def __init__(self, key: bytes = b"") -> None:
        self.key = digest_secret(key)
        self._conversations: dict[Conversation, _Conversation] = {}
        self._labels: dict[str, bool] = {}
        self._waiting: dict[int, tuple[Conversation, dict[str, Any]]] = {}
        """Order -> the call line it names, in the current writer's lines (an outcome without ``u`` names its call
        so: the recordings of 0.3.0)."""
        self._unanswered: dict[tuple[Conversation, int, str], deque[dict[str, Any]]] = {}
        """Per conversation, turn and ``u``: the call lines of every writer that have no outcome yet, first read first
        (an outcome takes the first: one conversation's hook calls may run in several processes, each a writer)."""
        self._early: dict[tuple[Conversation, int, str], deque[dict[str, Any]]] = {}
        """The outcome lines read before any call line they could belong to (a writer read before the call's)."""

    def writer(self) -> None:
        """The lines read next are another writer's (its orders start afresh)."""
        self._waiting = {}

    def read(self, lines: Iterable[str | None], report: Callable[[str], None], where: str = "line") -> None:
        """Read some of the current writer's lines, in order; ``report`` is told of each malformed line
        (``where`` and its number, and what is wrong), the rest is still read. A line given as ``None`` was
        longer than ``MAX_LINE_CHARS`` (``capped_lines``): reported too."""
        for number, text in enumerate(lines, start=1):
            if text is None:
                report(f"{where} {number}: over {MAX_LINE_CHARS} characters")
                continue
            if not text.strip():
                continue
            try:
                self._line(check_line(json.loads(text)), self._waiting)
            except (ValueError, RecursionError) as error:  # what json.loads and check_line raise
                report(f"{where} {number}: {error}")
            except (KeyError, TypeError, ArithmeticError) as error:  # pragma: no cover - check_line admits none
                report(f"{where} {number}: {type(error).__name__}: {error}")

    def _line(self, value: dict[str, Any], waiting: dict[int, tuple[Conversation, dict[str, Any]]]) -> None:
        ident, agent = value["c"], value.get("g")
        if "success" in value:
            self._labels[ident] = value["success"]
            return
        conversation = (ident, agent)
        if "o" in value and "n" not in value:  # an outcome: of the first call of its ``u`` without one, any writer's
            if "u" in value:
                same = (conversation, value["t"], value["u"])
                calls = self._unanswered.get(same)
                if calls:
                    self._answer(conversation, calls.popleft(), value)
                else:  # its call is in a writer read later (or was rotated away: then it stays unattached)
                    self._early.setdefault(same, deque()).append(value)
                return
            found = waiting.pop(value["i"], None)  # a 0.3.0 recording: the call with its order in this stream
            if found is None or found[0] != conversation:
                return  # its call was rotated away (or never written): nothing to attach it to
            self._answer(conversation, found[1], value)
            return
        read = self._conversations.setdefault(conversation, _Conversation())
        read.add(value)
        if "n" in value and "x" not in value:
            if "u" not in value:
                waiting[value["i"]] = (conversation, value)
                return
            same = (conversation, value["t"], value["u"])
            early = self._early.get(same)
            if early:
                self._answer(conversation, value, early.popleft())
            else:
                self._unanswered.setdefault(same, deque()).append(value)

    def _answer(self, conversation: Conversation, call: dict[str, Any], outcome: dict[str, Any]) -> None:
        """Attach ``outcome`` (a line) to ``call`` (a line read before or after it)."""
        call.update(ok=outcome.get("ok", True), o=outcome["o"])
        self._conversations[conversation].deep_results.update(outcome.get("dr", ()))

    def trajectories(self, names: Mapping[str, str] | None = None) -> Iterator[DigestTrajectory]:
        """The conversations read, each agent's part its own trajectory (``<conversation>/<agent>``)."""
        for (ident, agent), conversation in self._conversations.items():
            if conversation.success is None:
                conversation.success = self._labels.get(ident)
            name = ident if agent is None else f"{ident}/{agent}"
            yield conversation.trajectory(name, self.key, names or {})


def read_digest_lines(
    lines: Iterable[str], report: Callable[[str], None], key: bytes = b""
) -> Iterator[DigestTrajectory]:
    """The conversations in one writer's digest recording lines (each line's JSON text), once all are read;
    ``report`` is told of each malformed line (its number and what is wrong), the rest is still read."""
    reader = DigestReader(key)
    reader.read(lines, report)
    yield from reader.trajectories()


def recording_files(folder: Path) -> list[list[Path]]:
    """A folder's file sets (one per writer), each oldest first: ``.<backups>`` ... ``.1`` (logrotate's
    ``.1.gz`` too), then the current file."""
    sets: dict[str, list[tuple[int, Path]]] = {}
    for path in folder.iterdir():
        found = FILE_PATTERN.fullmatch(path.name)
        if found is not None and not path.is_dir():  # a link or a special file too: the reader names it
            sets.setdefault(found[1], []).append((-int(found[3] or 0), path))
    return [[path for _, path in sorted(files)] for _, files in sorted(sets.items(), key=_writer)]


def _writer(item: tuple[str, list[tuple[int, Path]]]) -> int:
    found = FILE_PATTERN.fullmatch(item[0])
    return int(found[2] or 1) if found is not None else 0


def read_folder(folder: Path, report: Callable[[str], None], key: bytes = b"") -> Iterator[DigestTrajectory]:
    """The conversations of a recorder's folder: each writer's files read as one stream, then the
    conversations they hold together. A malformed line is reported with its file and its line number, a line
    over ``MAX_LINE_CHARS`` skipped in chunks (a small ``.gz`` may hold a huge line), and a file that is a
    symbolic link or not a regular file is named and not read (a recorder never writes one; following it
    reads whatever it points to, a FIFO would wait for a writer forever)."""
    sets = recording_files(folder)
    if not sets:
        report(f"no {FILE_NAME} in this folder")
        return
    reader = DigestReader(key)
    for files in sets:
        reader.writer()
        for path in files:
            try:
                with _open_text(path) as file:
                    reader.read(capped_lines(file), report, f"{path.name}: line")
            except ForeignFile as error:
                report(f"{path.name}: {error.what}, not read")
            except (OSError, EOFError, zlib.error) as error:
                report(f"{path.name}: unreadable ({error})")
    yield from reader.trajectories()


@contextlib.contextmanager
def _open_text(path: Path) -> Iterator[IO[str]]:
    """A recording file's text (``open_own``: never through a link), logrotate's ``.gz`` files decompressed."""
    with os.fdopen(open_own(path, os.O_RDONLY), "rb") as binary:
        raw: IO[bytes] = gzip.GzipFile(fileobj=binary) if path.suffix == ".gz" else binary  # type: ignore[assignment]
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as text:
            yield text


def capped_lines(text: IO[str], first: str | None = None) -> Iterator[str | None]:
    """The lines of ``text`` (after ``first``, when it was read already), each at most ``MAX_LINE_CHARS``
    long; ``None`` for a longer one, skipped in chunks of that size, so memory stays bounded whatever the
    file holds (one line of a gigabyte in a 1 MB gzip)."""
    line = text.readline(MAX_LINE_CHARS + 1) if first is None else first
    while line:
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            while line and not line.endswith("\n"):
                line = text.readline(MAX_LINE_CHARS)
            yield None
        else:
            yield line
        line = text.readline(MAX_LINE_CHARS + 1)


def as_digests(trajectory: Trajectory, key: bytes = b"") -> DigestTrajectory:
    """A full trajectory as its digest recording reads back (``tune`` analyses every input in this form); the
    names of its top-level fields are kept beside (``DigestTrajectory.names``), never written."""
    if isinstance(trajectory, DigestTrajectory):
        return trajectory
    key = digest_secret(key)
    reader = DigestReader(key)
    reader.read((line_bytes(line).decode() for line, _, _ in _named(trajectory_lines(trajectory, key))), _never)
    names: dict[str, str] = {}
    for turn in trajectory.turns:
        for response in turn:
            for call in response:
                for value in (call.arguments, call.result):
                    names.update(_top_names(value, key))
    for digests in reader.trajectories(names):
        return digests
    # no turn: no line but its label names it (replay reads it so: a trajectory, none of its turns)
    return DigestTrajectory(trajectory.id, [], trajectory.success, key=key, names=names)


def _named(lines: Iterator[Line]) -> Iterator[Line]:
    """Lines with their deep names said on each (as a recorder says them once per file: the same reading)."""
    for body, deep_arguments, deep_results in lines:
        said = dict(body)
        if deep_arguments:
            said["da"] = sorted(deep_arguments)
        if deep_results:
            said["dr"] = sorted(deep_results)
        yield said, deep_arguments, deep_results


def _top_names(value: Any, key: bytes) -> dict[str, str]:
    try:
        plain = plain_value(parsed_arguments(value) if type(value) is str else value)
    except Exception:
        return {}
    if not isinstance(plain, Mapping):
        return {}
    names = (key_text(name) for name in plain)
    return {field_digest(name, key): name for name in names if is_schema_name(name)}


def _never(problem: str) -> None:  # pragma: no cover - lines made here are well formed
    raise AssertionError(problem)


__all__: Sequence[str] = (
    "DigestReader",
    "DigestTrajectory",
    "NotReplayable",
    "as_digests",
    "read_digest_lines",
    "read_folder",
    "recording_files",
)
