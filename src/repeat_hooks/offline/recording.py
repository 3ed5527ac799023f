"""Digest-only recordings: what ``repeat-hooks replay`` and ``tune`` need of your agent's runs, and no value.

Install a recorder once; every guard in the process then writes each tool call it decides, as digests::

    from repeat_hooks.observe import scope
    from repeat_hooks.offline.recording import DigestRecorder

    recorder = DigestRecorder("recordings/", digest_key=secrets_from_your_vault)
    recorder.install()                 # or: with DigestRecorder(...): ...
    with scope(conversation_id=conversation_id):   # adapters that know the conversation set it themselves
        ...                            # run the agent
    recorder.label(conversation_id, success=True)   # optional: the replay's false-alarm figure needs it
    recorder.uninstall()               # stops hearing the guards and closes the file

Then ``repeat-hooks replay recordings/`` and ``repeat-hooks tune recordings/`` read the folder (each writer's
files, its rotated ones first) as they read full trajectories, and decide on them exactly as on the full ones.

**Which conversation**: each line names its conversation (``c``: the ``observe.scope(conversation_id=...)``
the hook call runs in, else the turn's id) and its agent (``g``: the scope's ``agent_name``, where set): two
agents with their own guards in one conversation are two trajectories (``<conversation>/<agent>``). A hook
call with neither a conversation id nor a turn id is not recorded (it could belong to any conversation); the
first one is warned of (``RuntimeWarning``) with the spelling that fixes it.

**The cost**: the recorder runs in the hook call, on the thread that called it (in an async SDK, the event
loop's), and writes each line to the file there: one blocking unbuffered ``write`` (no ``fsync``), two per
tool call: about 40-65 µs a tool call on this machine (``bench/recording_overhead.py`` prints it).

**The files**: one writer per file set. The first recorder writing into a folder takes
``repeat-hooks.jsonl``, a second process at the same time ``repeat-hooks-2.jsonl``, and so on (each holds an
``flock`` on a ``.lock`` file beside it while it writes; a restarted process takes the first free set again),
each rotated to ``.1`` ... ``.<backups>`` past ``max_bytes`` (a line is never split: a file exceeds
``max_bytes`` only by holding one line longer than it). Two recorders on one folder in one process are refused
(``install`` raises). A recorder that finds its file's last line torn (a crash mid-write) starts a new line.
The reader also reads rotated files compressed by logrotate (``.1.gz``). Neither follows a symbolic link, nor
opens anything but a regular file, in the folder (``open_own``): a recorder finding one (planted, say, to make
it append to a file elsewhere) takes the next file set, with a warning naming it; the reader names it and reads
the rest.

**The lines** (JSON Lines, each ``{"rh": 1, "c", "g"?, ...}``): ``{"t", "k"}`` a turn started (``k``: a
fingerprint of the digest key); ``{"t", "m"}`` model response ``m`` of turn ``t`` was allowed (a turn's last
one, when it asked for no tool, is the answer: the replay decides it after the turn's responses);
``{"t", "r", "i", "n", "a"}`` a call decided (tool name ``n``, batch ``r``: the calls of one model response,
``i`` its order among the writer's lines), with ``"ro"`` its read-only hint where the SDK knew it, ``"x"``
the rule that refused it where the guard did, else ``"u"``, the digest of its tool and arguments; ``{"t", "u",
"ok", "o"}`` the outcome of a call of that ``u``, when the guard is told it (an adapter whose policy needs no
outcome never tells it: the call stays without one); ``{"success"}`` a label. A call is written when it is
decided, so a call whose result never comes (a crash, a policy with no ``post_tool_call``) is kept.

**Which call an outcome is of**: the first call of its ``u`` in its turn still without one, read in any writer's
files (a recording of 0.3.0 names it by ``i`` in its writer's). So a call decided in one process and recorded in
another, as one conversation's hook calls may be (a coding CLI runs a process per event; a deployment routes
one conversation's requests to several workers), gets its outcome; the recorder keeps nothing per call. Two
calls of the same tool and arguments in one turn may swap outcomes across processes (the replay judges them by
the same equality either way); an outcome whose call was decided before the recorder was installed may be given
to a later call of the same ``u`` in that turn.

**Never a value, nor a name that may be data**: the file holds tool names, conversation ids and agent names
as they are, and digests. Field names are digested like the values (an id used as a key, ``alice_smith``,
is not written); ``da``/``dr`` list, once per conversation and file, the digests of the schema-like names
(``[A-Za-z_][A-Za-z0-9_]*``, at most 64 characters, no run of 3 digits, nothing the volatile mask would
change) found below the top level of arguments/results. One value has one digest wherever it appears (an
argument, a result field, a field's name): equalities show, values do not.

**The digests**: 8-byte BLAKE2b, keyed with ``digest_key`` when given (then nobody without the key can test
guesses against them; without one, a short guessable value, a PIN, a date or a common field name, can be
found by trying every candidate). Arguments (``a``): a digest per top-level field when they are a mapping
(fields whose names are not schema-like together under ``"#rest"``), else one digest. Results (``o``): the
same split, each part the digest of its text with volatile tokens masked, and a second digest (``[masked,
unmasked]``) where masking changed it; ``"?"`` for a part with no stable form (``result.UNKNOWN_OUTCOME``).

**What a digest recording replays exactly**, policy by policy: every setting that reads names, counts and
hints (``count``, ``max_calls``, ``limits``, ``exempt``, ``read_only``, ``destructive``, ``window``,
``max_cycle_period``, ``max_opaque_runs``, ``count_failures``, the stop rules), ``match`` either way,
``mask_volatile`` either way, and ``ignore_arguments`` / ``ignore_results`` naming top-level schema-like
fields: the replay digests those names with the recording's key (``repeat-hooks replay --digest-key-file``)
and drops the fields whose name digests equal. What it cannot: ignoring a name that also occurs below the top
level of that conversation's arguments (results), or a name that is not schema-like, or any name without the
key the recording was made with; ``replay_one`` then raises ``NotReplayable`` naming it (record full
trajectories to tune those). Like a full corpus, it records no seconds nor cost, and the destructive and
idempotent hints of MCP are not kept (only ``read_only``).

**The replay seam** (``Trajectory.replayed_by``; the policy is untouched): a digest call is replayed as a
``RecordedCall`` whose arguments and result are small mappings of digests, built so that the policy's own
canonical form of them is equal for two calls exactly when it is equal for the full values under that
policy's settings. Arguments become ``{field digest: digest}``: dropping an ignored top-level field drops its
digest. A result part becomes ``{"~": "<masked>", "!": "<unmasked>"}``, the masked digest written
``xxxxxxxx_xxxxxxxx`` (no volatile token) and the unmasked one as 16 hex digits (a volatile token): with
``mask_volatile`` the policy masks the unmasked digest away and compares the masked ones, without it compares
both. A part with no stable form is the text ``"<repeat_hooks.opaque>"``, which the policy's own check turns
into ``UNKNOWN_OUTCOME``. So the replay calls the same verbs of the same policy on the same sequence of
equalities, and its figures are the full replay's (the 4-byte digests a harmful refusal's context shows
differ: they are digests of these digests).

**Calls with no result**: a call the live guard refused has none: it is replayed as returning what that
same call last returned in the turn (what the guard judged; ``RecordedCall.refused`` names the rule), and a
call that ran without its outcome reaching the recorder is replayed without one (``replay.UNRECORDED``). A
refusal of a call whose result, or whose last result, is unrecorded is neither harmful nor waste prevented:
the replay counts it apart (``Tally.unjudged``), and ``tune`` takes neither kind as evidence.

**A turn with no model-call line** (an adapter whose policy needs no ``pre_llm_call`` never says where one
model response ends) is replayed with each call as its own model response, in the order decided: no call is
taken to be in a parallel batch it may not have been in.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import stat
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from json.encoder import encode_basestring
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

from .. import observe
from ..call import (
    as_text,
    canonical_arguments,
    canonical_json,
    digest_secret,
    json_text,
    key_text,
    parsed_arguments,
    plain_value,
)
from ..observation import ModelCallDecided, Outage, ToolCallDecided, ToolResultRecorded, TurnStarted
from ..result import NO_STABLE_FORM, STAND_IN, mask_volatile_tokens, model_view

if TYPE_CHECKING:
    from .replay import Trajectory

try:  # a file set is claimed with flock where there is one
    import fcntl
except ImportError:  # pragma: no cover - Windows: one file set per process instead
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("repeat_hooks")

VERSION = 1
"""The ``rh`` field of every line: the format's version."""
FILE_NAME = "repeat-hooks.jsonl"
"""The first writer's file in a folder (the next ones ``repeat-hooks-2.jsonl`` ...; rotated to ``.1`` ...)."""
REST = "#rest"
"""The part holding the top-level fields whose names are not schema-like."""
OPAQUE = "<repeat_hooks.opaque>"
"""A result part with no stable form, as the replay hands it to the policy (it gives ``UNKNOWN_OUTCOME``)."""
MAX_CONVERSATIONS = 4096
"""Conversations a recorder remembers the deep names written for (per file)."""
MAX_WRITERS = 1024
"""File sets a folder may hold (writers at the same time)."""
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_DIGITS = re.compile(r"[0-9]{3}")
DIGEST_PATTERN = re.compile(r"[0-9a-f]{16}")
FILE_PATTERN = re.compile(r"(repeat-hooks(?:-([0-9]+))?\.jsonl)(?:\.([0-9]+))?(\.gz)?")
_KEY_CHECK = "repeat-hooks: which key"

_RECORDING: dict[str, DigestRecorder] = {}
"""The folders installed recorders write into in this process (their real paths)."""
_RECORDING_LOCK = threading.Lock()

Conversation = tuple[str, str | None]
"""A conversation as the recorder keys it: its id and the agent's name (``None``: no agent named)."""


@functools.lru_cache(maxsize=4096)
def is_schema_name(name: str) -> bool:
    """Whether a field name looks like a name a tool's schema gives, not data: the names ``ignore_*`` can name."""
    return (
        _SCHEMA_NAME.fullmatch(name) is not None and _DIGITS.search(name) is None and mask_volatile_tokens(name) == name
    )


# -- digesting one call ----------------------------------------------------------------------------------

_PERSON = b"rh-record"
_UNSEEN = object()
MAX_DEEP_VALUES = 100_000
"""Values below a top level read for their names: past them, the names read are not all of them (``"*"``)."""
MAX_NAMES = 4096
"""Field names a key's digests remember (each name's digest, or that it is not schema-like)."""


class _Digests:
    """The digests of one key: its BLAKE2b state with the key hashed in once (each digest continues a copy of
    it: the same digest as ``blake2b(text, key=key)``, without hashing the key's block again), and what each
    field name seen digests to (``None``: not schema-like), up to ``MAX_NAMES`` names."""

    __slots__ = ("_key", "_names", "_start")

    def __init__(self, key: bytes) -> None:
        self._key = key
        try:
            self._start: hashlib.blake2b | None = hashlib.blake2b(digest_size=8, key=key, person=_PERSON)
        except ValueError:  # a key BLAKE2b refuses (over 64 bytes: not from ``digest_secret``): each digest raises
            self._start = None
        self._names: dict[str, str | None] = {}

    def digest(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        if self._start is None:
            return hashlib.blake2b(data, digest_size=8, key=self._key, person=_PERSON).hexdigest()
        hasher = self._start.copy()
        hasher.update(data)
        return hasher.hexdigest()

    def name(self, name: str) -> str | None:
        """``field_digest(name, key)`` for a schema-like name (``is_schema_name``), else ``None``."""
        digest = self._names.get(name, _UNSEEN)
        if digest is _UNSEEN:
            digest = self.digest(json_text(name)) if is_schema_name(name) else None
            if len(self._names) >= MAX_NAMES:
                self._names.clear()
            self._names[name] = digest
        return digest  # type: ignore[return-value]  # str | None, never _UNSEEN


@functools.lru_cache(maxsize=64)
def _digests(key: bytes) -> _Digests:
    return _Digests(key)


def _digest(text: str, key: bytes) -> str:
    return _digests(key).digest(text)


@functools.lru_cache(maxsize=4096)
def field_digest(name: str, key: bytes = b"") -> str:
    """A field name as a recording writes it: the digest of the name as a JSON text (as that text as a value)."""
    return _digest(json_text(name), key)


def key_check(key: bytes) -> str:
    """The fingerprint of a digest key a recording writes (``k``): tells which key made it, not the key."""
    return _digest(_KEY_CHECK, key)[:8]


def _text(value: Any) -> str:
    """A value's canonical JSON, as ``canonical_arguments`` writes it once parsed (never parsing it again)."""
    kind = type(value)
    if kind is str:  # what json_text writes of a string, of a bool, of None and of an int, written out
        return encode_basestring(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    try:
        if kind is int:
            return int.__repr__(value)  # past the int-to-text digit limit: ValueError, as json_text raises
        return json_text(value)
    except (TypeError, ValueError, RecursionError):
        return canonical_json(value, frozenset())


def _split(value: Any, digests: _Digests) -> dict[str, str] | None:
    """A mapping's canonical text per part, each schema-like field under its name's digest, the others together
    under ``REST``; ``None`` for a value that is no mapping."""
    plain = value if type(value) is dict else plain_value(value)
    if not isinstance(plain, Mapping):
        return None
    parts: dict[str, str] = {}
    rest: dict[str, Any] = {}
    name_digest = digests.name
    for name, child in plain.items():
        text = name if type(name) is str else key_text(name)
        digest = name_digest(text)
        if digest is not None:
            parts[digest] = _text(child)
        else:
            rest[text] = child
    if rest:
        parts[REST] = _text(rest)
    return parts


def _deep_names(value: Any, digests: _Digests) -> set[str]:
    """The digests of the schema-like names below ``value``'s top level (a name ``ignore`` drops there)."""
    names: set[str] = set()
    plain = plain_value(value)
    stack = list(plain.values()) if isinstance(plain, Mapping) else [plain]
    seen = 0
    while stack and seen < MAX_DEEP_VALUES:
        seen += 1
        item = plain_value(stack.pop())
        if isinstance(item, Mapping):
            for name, child in item.items():
                digest = digests.name(key_text(name))
                if digest is not None:
                    names.add(digest)
                stack.append(child)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    if stack:  # too large to read every name: the replay must not take the names it holds as all of them
        names.add("*")
    return names


def digest_arguments(arguments: Any, key: bytes = b"") -> tuple[str | dict[str, str], set[str]]:
    """A call's arguments as digests (per top-level field when a mapping) and the digests of the names below."""
    return _digest_arguments(arguments, _digests(key))


def _digest_arguments(arguments: Any, digests: _Digests) -> tuple[str | dict[str, str], set[str]]:
    try:
        value = parsed_arguments(arguments)
        parts = _split(value, digests)
        deep = _deep_names(value, digests)
        if parts is not None:
            digest = digests.digest
            return {name: digest(text) for name, text in parts.items()}, deep
        return digests.digest(_text(value)), deep
    except Exception:  # a hostile value: its canonical text is all that is safe; its names are unknown
        return digests.digest(canonical_arguments(arguments)), {"*"}


def _outcome_part(text: str, digests: _Digests) -> str | list[str]:
    if '"<' in text and STAND_IN.search(text):
        return "?"
    masked = mask_volatile_tokens(text)
    if masked == text:
        return digests.digest(text)
    return [digests.digest(masked), digests.digest(text)]


def digest_result(result: Any, key: bytes = b"") -> tuple[Any, set[str]]:
    """A tool's result as digests (per top-level field when a mapping), and the digests of the names below.

    The text digested is the one ``outcome_digest`` digests (a JSON text parsed, any other value as pydantic
    writes it for a model)."""
    return _digest_result(result, _digests(key))


def _digest_result(result: Any, digests: _Digests) -> tuple[Any, set[str]]:
    try:
        kind = type(result)
        value = parsed_arguments(result) if kind is str else model_view(result)
        if value is NO_STABLE_FORM:
            return "?", set()
        if kind is not str:
            value = parsed_arguments(value)
        parts = _split(value, digests)
        deep = _deep_names(value, digests)
        if parts is not None:
            return {name: _outcome_part(text, digests) for name, text in parts.items()}, deep
        return _outcome_part(_text(value), digests), deep
    except Exception:
        return "?", {"*"}


def _head(conversation: Conversation, **fields: Any) -> dict[str, Any]:
    """A line's first fields: the version, the conversation, its agent where named, then ``fields``."""
    line: dict[str, Any] = {"rh": VERSION, "c": conversation[0]}
    if conversation[1] is not None:
        line["g"] = conversation[1]
    line.update(fields)
    return line


def _call_line(
    conversation: Conversation,
    turn: int,
    response: int,
    order: int,
    call: Any,
    digests: _Digests,
    refused: str | None,
    same: str | None,
) -> tuple[dict[str, Any], set[str]]:
    """A decided call's line and the digests of its arguments' deep names (``call``: ``name``, ``arguments``,
    ``read_only``); ``same``: the digest its outcome will name it by (``u``), for a call that runs."""
    arguments, deep = _digest_arguments(call.arguments, digests)
    line = _head(conversation, t=turn, r=response, i=order, n=call.name, a=arguments)
    if type(call.read_only) is bool:  # anything else is no hint (as ``ToolCall`` takes it)
        line["ro"] = call.read_only
    if refused is not None:
        line["x"] = str(refused)
    if same is not None:
        line["u"] = same
    return line, deep


def _outcome_line(
    conversation: Conversation, turn: int, ok: bool, result: Any, digests: _Digests, same: str
) -> tuple[dict[str, Any], set[str]]:
    """The outcome line of the call ``same`` names (its ``u``), and the digests of its result's deep names."""
    outcome, deep = _digest_result(result, digests)
    return _head(conversation, t=turn, ok=bool(ok), o=outcome, u=same), deep


Line = tuple[dict[str, Any], set[str], set[str]]
"""A line to write, with the digests of the deep argument and result names it brings."""


def trajectory_lines(trajectory: Trajectory, key: bytes = b"") -> Iterator[Line]:
    """A full trajectory as the lines a live recording of it holds (``DigestRecorder.write_trajectory`` writes
    them; ``as_digests`` reads them back)."""
    conversation: Conversation = (trajectory.id, None)
    digests, check = _digests(key), key_check(key)
    order = 0
    for number, turn in enumerate(trajectory.turns, start=1):
        yield _head(conversation, t=number, k=check), set(), set()
        for response_number, response in enumerate(turn, start=1):
            yield _head(conversation, t=number, m=response_number), set(), set()
            for call in response:
                order += 1
                same = digests.digest(_call_ident(call))
                line, deep_arguments = _call_line(
                    conversation, number, response_number, order, call, digests, None, same
                )
                yield line, deep_arguments, set()
                outcome, deep_results = _outcome_line(conversation, number, call.ok, call.result, digests, same)
                yield outcome, set(), deep_results
        if turn:  # the model call that answered, as a live recording has it
            yield _head(conversation, t=number, m=len(turn) + 1), set(), set()
    if trajectory.success is not None:
        yield _head(conversation, success=trajectory.success), set(), set()


# -- the recorder -------------------------------------------------------------------------------------------


class DigestRecorder:
    """An observer writing what the guards in this process decide, as digests (see the module's docstring).

    It runs in the hook call that told the guard (on the event loop's thread in an async SDK) and writes there:
    a blocking file write (unbuffered, not synced) per line, two lines per tool call. That costs about 40 µs
    per tool call for small arguments, 65 µs for typical ones (5x and 6x the tool call without a recorder,
    fresh objects each call: ``bench/recording_overhead.py``; about 12 µs of it any observer costs the hooks,
    the rest digesting and about 3 µs per line written), and more when the disk stalls: the agent's loop waits
    for it. ``folder`` is created if missing. The file rotates past
    ``max_bytes``, keeping ``backups`` older files (``None``: it never rotates). ``digest_key`` (bytes or
    text, at least 16 bytes) keys every digest. Safe across threads and tasks (one lock around each line); a
    write that fails is logged (once per run of failures), never raised into the agent.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        max_bytes: int | None = 16 * 1024 * 1024,
        backups: int = 5,
        digest_key: bytes | str | None = None,
    ) -> None:
        if max_bytes is not None and max_bytes < 1024:
            raise ValueError(f"max_bytes must be at least 1024 (or None: never rotate), got {max_bytes}")
        if backups < 0:
            raise ValueError(f"backups must be 0 or more, got {backups}")
        secret = digest_key.encode("utf-8") if isinstance(digest_key, str) else (digest_key or b"")
        if digest_key is not None and len(secret) < 16:
            raise ValueError("digest_key must be at least 16 bytes (secrets.token_bytes(32)): a short key is guessed")
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.backups = backups
        self._key = digest_secret(secret)
        self._digests = _digests(self._key)
        self._check = key_check(self._key)
        self._lock = threading.Lock()
        self._remove: Callable[[], None] | None = None
        self._order = 0
        self._names: OrderedDict[Conversation, tuple[set[str], set[str]]] = OrderedDict()
        self._foreign: set[str] = set()
        """The paths of the folder found to be links or special files (each warned of once)."""
        self.failing: str | None = None
        """Why the last line could not be written (``None``: it was, or none was tried): a hook command says it."""
        self._unnamed = False
        self._file: BinaryIO | None = None
        self._claim: BinaryIO | None = None
        self._name = FILE_NAME
        self._pid = os.getpid()

    @property
    def path(self) -> Path:
        """The file this recorder writes now (its file set's current file)."""
        return self.folder / self._name

    # -- installing --

    def install(self) -> DigestRecorder:
        """Start hearing every guard in this process (``observe.add_observer``); returns the recorder.

        Raises ``ValueError`` if another recorder of this process is installed on the same folder."""
        if self._remove is not None:
            return self
        where = os.path.realpath(self.folder)
        with _RECORDING_LOCK:
            other = _RECORDING.get(where)
            if other is not None:
                raise ValueError(
                    f"a DigestRecorder already records into {self.folder} in this process: install one recorder "
                    "per folder (it hears every guard of the process), or give this one another folder"
                )
            _RECORDING[where] = self
        self._remove = observe.add_observer(self)
        return self

    def uninstall(self) -> None:
        """Stop hearing the guards and close the file; harmless when not installed."""
        if self._remove is not None:
            self._remove()
            self._remove = None
            with _RECORDING_LOCK:
                where = os.path.realpath(self.folder)
                if _RECORDING.get(where) is self:
                    del _RECORDING[where]
        self.close()

    def close(self) -> None:
        """Close the file and free its file set (the next line written opens one again)."""
        with self._lock:
            self._close()

    def __enter__(self) -> DigestRecorder:
        return self.install()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.uninstall()

    # -- hearing --

    def __call__(self, seen: observe.Observation) -> None:
        """Called after each fresh decision or record is committed (``observe.Observation``), in the hook call."""
        if isinstance(seen, Outage):
            return  # no decision of the policy: nothing to replay
        where = seen.where
        conversation = self._conversation(where)
        if conversation is None:
            return
        turn = where.turn
        if isinstance(seen, ToolCallDecided):
            refusal = seen.refusal
            with self._lock:
                self._order += 1
                order = self._order
            refused = None if refusal is None else refusal.reason
            same = None if refusal is not None else self._digests.digest(_call_ident(seen.call))
            line, deep = _call_line(conversation, turn, where.response, order, seen.call, self._digests, refused, same)
            self._write((line, deep, set()))
        elif isinstance(seen, ToolResultRecorded):
            # named by ``u``: the reader gives it to the first call of that ``u`` in the turn without an outcome,
            # whichever writer decided it (a coding CLI's hook calls are processes of their own)
            same = self._digests.digest(_call_ident(seen.call))
            line, deep = _outcome_line(conversation, turn, seen.ok, seen.result, self._digests, same)
            self._write((line, set(), deep))
        elif isinstance(seen, TurnStarted):
            self._write((_head(conversation, t=turn, k=self._check), set(), set()))
        elif isinstance(seen, ModelCallDecided) and seen.stop is None:
            self._write((_head(conversation, t=turn, m=where.response), set(), set()))

    def label(self, conversation_id: str, success: bool) -> None:
        """Say whether a conversation succeeded (every agent's part of it): the replay's false-alarm figure
        counts successful ones. The id is taken as ``scope`` takes it (``call.as_text``: ``42`` is ``"42"``)."""
        self._write((_head((as_text(conversation_id), None), success=bool(success)), set(), set()))

    def write_trajectory(self, trajectory: Trajectory) -> None:
        """Write a full trajectory as a live recording of it would be (``repeat-hooks record``). Unlike the
        hooks' lines, a write that fails raises ``OSError``: a conversion must not report success."""
        for line in trajectory_lines(trajectory, self._key):
            self._write(line, strict=True)

    def _conversation(self, where: observe.Where) -> Conversation | None:
        scope = observe.current_scope()
        ident = scope.conversation_id if scope.conversation_id is not None else where.turn_id
        if ident is not None:
            return ident, scope.agent_name
        if not self._unnamed:
            self._unnamed = True
            warnings.warn(
                f"repeat_hooks recording: a guard decided with no conversation id and no turn id, so its calls are "
                f"not recorded in {self.folder} (they could belong to any conversation): run the agent inside "
                "`with repeat_hooks.observe.scope(conversation_id=...)`, or give each turn an id "
                "(pre_agent_turn(turn_id=...))",
                RuntimeWarning,
                stacklevel=2,
            )
        return None

    # -- writing --

    def _write(self, line: Line, strict: bool = False) -> None:
        """Write one line (with the deep names the file has not named yet for its conversation); a failure is
        logged once per run of failures, or raised when ``strict``."""
        body, deep_arguments, deep_results = line
        conversation = (body["c"], body.get("g"))
        with self._lock:
            try:
                file = self._open()
                data, names = self._bytes(body, conversation, deep_arguments, deep_results)
                if self.max_bytes is not None and (size := file.tell()) > 0 and size + len(data) > self.max_bytes:
                    self._rotate()  # the new file must name the deep names again
                    file = self._open()
                    data, names = self._bytes(body, conversation, deep_arguments, deep_results)
                _write_all(file, data)  # handed to the OS before the hook returns (not synced to the disk)
            except OSError as error:
                self._close()  # opened again, and the path checked again, at the next line
                if strict:
                    raise
                if self.failing is None:
                    logger.warning("repeat_hooks recording: cannot write %s (%s); the guard goes on", self.path, error)
                self.failing = f"cannot write {self.path} ({error})"
                return
            self.failing = None
            if names is not None:
                names[0].update(deep_arguments)
                names[1].update(deep_results)

    def _bytes(
        self, body: dict[str, Any], conversation: Conversation, deep_arguments: set[str], deep_results: set[str]
    ) -> tuple[bytes, tuple[set[str], set[str]] | None]:
        """The line's bytes with the deep names this file has not named for the conversation, and its names."""
        if not deep_arguments and not deep_results:
            return line_bytes(body), None
        names = self._names.get(conversation)
        if names is None:
            names = self._names[conversation] = (set(), set())
            while len(self._names) > MAX_CONVERSATIONS:
                self._names.popitem(last=False)
        else:
            self._names.move_to_end(conversation)
        new_arguments = deep_arguments - names[0] if deep_arguments else deep_arguments
        new_results = deep_results - names[1] if deep_results else deep_results
        if not new_arguments and not new_results:
            return line_bytes(body), names
        line = dict(body)
        if new_arguments:
            line["da"] = sorted(new_arguments)
        if new_results:
            line["dr"] = sorted(new_results)
        return line_bytes(line), names

    def _open(self) -> BinaryIO:
        """The file to write, its file set claimed (again in a forked child: the parent keeps its own)."""
        if self._file is not None and self._pid == os.getpid():
            return self._file
        if self._pid != os.getpid():  # a forked child: the parent's files are the parent's
            self._file = self._claim = None
            self._pid = os.getpid()
            self._names.clear()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._name, file = self._claim_set()
        if file.tell():
            file.seek(-1, os.SEEK_END)
            if file.read(1) != b"\n":  # a torn last line (a crash mid-write): start a new one
                _write_all(file, b"\n")
        self._file = file
        return file

    def _claim_set(self) -> tuple[str, BinaryIO]:
        """Claim the first free file set of the folder (an ``flock`` held until ``close``) whose files are its
        own (no link, no special file: ``open_own``); its file's name, and that file opened."""
        if fcntl is None:  # pragma: no cover - Windows
            name = f"repeat-hooks-p{os.getpid()}.jsonl"
            return name, self._own(self.folder / name)
        for number in range(1, MAX_WRITERS + 1):
            name = FILE_NAME if number == 1 else f"repeat-hooks-{number}.jsonl"
            try:
                claim = self._own(self.folder / f".{name}.lock")
            except ForeignFile as error:
                self._skip(error)
                continue
            try:
                fcntl.flock(claim.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                file = self._own(self.folder / name)
            except BlockingIOError:
                claim.close()
                continue
            except ForeignFile as error:
                claim.close()
                self._skip(error)
                continue
            except BaseException:
                claim.close()
                raise
            self._claim = claim
            return name, file
        raise OSError(f"{MAX_WRITERS} writers already record into {self.folder}")

    def _own(self, path: Path) -> BinaryIO:
        """``path`` opened to append (created if missing), never through a link (``open_own``), unbuffered: a
        line is one ``write`` of the file, nothing kept back to flush."""
        return os.fdopen(open_own(path, os.O_RDWR | os.O_APPEND | os.O_CREAT), "ab+", buffering=0)

    def _skip(self, error: ForeignFile) -> None:
        """Warn, once a path, of a file set passed over for a file that is not its own."""
        if error.filename not in self._foreign:
            self._foreign.add(error.filename)
            logger.warning(
                "repeat_hooks recording: %s is %s, not followed: writing another file set", error.filename, error.what
            )

    def _close(self) -> None:
        for handle in (self._file, self._claim):
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        self._file = self._claim = None

    def _rotate(self) -> None:
        """``file`` to ``file.1``, ``file.1`` to ``file.2``, ...; the names written start afresh (a new file
        must say them again). The file set stays claimed."""
        if self._file is not None:
            self._file.close()
            self._file = None
        for number in range(self.backups, 0, -1):
            older = self.folder / f"{self._name}.{number}"
            newer = self.folder / (f"{self._name}.{number - 1}" if number > 1 else self._name)
            if newer.exists():
                os.replace(newer, older)
        if self.backups == 0:
            self.path.unlink()
        self._names.clear()
        self._file = self._own(self.path)  # a link planted meanwhile: ``ForeignFile``, the set given up


class ForeignFile(OSError):
    """A path of a recorder's folder that is no file of its own: a symbolic link (planted: following it would
    write, or read, whatever it points to) or not a regular file (a FIFO would block the writer or the reader).
    ``what`` says which; ``filename`` is the path."""

    def __init__(self, what: str, path: Path) -> None:
        super().__init__(errno.ELOOP if what == SYMLINK else errno.EINVAL, f"{path} is {what}", str(path))
        self.what = what

    def __str__(self) -> str:
        return f"{self.filename} is {self.what}"


SYMLINK = "a symbolic link"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NOT_FOLLOWED = {errno.ELOOP, getattr(errno, "EMLINK", errno.ELOOP), getattr(errno, "EFTYPE", errno.ELOOP)}
"""What ``open`` says of a link it was told not to follow (Linux: ELOOP; the BSDs: EMLINK or EFTYPE)."""


def open_own(path: Path, flags: int) -> int:
    """``os.open(path, flags)`` for a file of a recorder's folder, the recorder's and the reader's alike: never
    through a symbolic link (``O_NOFOLLOW``), never anything but a regular file (opened without blocking, then
    checked), else ``ForeignFile``. Returns the descriptor (blocking again)."""
    if not _NOFOLLOW and path.is_symlink():  # pragma: no cover - no O_NOFOLLOW (Windows)
        raise ForeignFile(SYMLINK, path)
    extra = _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags | extra, 0o666)
    except OSError as error:
        if error.errno in _NOT_FOLLOWED or path.is_symlink():
            raise ForeignFile(SYMLINK, path) from None
        if error.errno == errno.ENXIO:  # a FIFO nobody reads, opened to write
            raise ForeignFile("not a regular file", path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ForeignFile("not a regular file", path)
        if extra & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _write_all(file: BinaryIO, data: bytes) -> None:
    """``data`` written to the unbuffered ``file``: one ``write`` (a regular file takes it whole), again for
    the rest if it took part of it (as a buffered file's ``flush`` does); ``OSError`` if it took nothing."""
    written = file.write(data)
    while written != len(data):
        if not written:
            raise OSError(errno.EIO, f"nothing written of {len(data)} bytes")
        data = data[written:]
        written = file.write(data)


_LINE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
"""A line's encoder, built once (``json.dumps`` with keywords builds one a call)."""


def line_bytes(line: dict[str, Any]) -> bytes:
    """A line as written: its compact ASCII JSON and a line break."""
    return (_LINE.encode(line) + "\n").encode("ascii")


_NO_FIELDS: frozenset[str] = frozenset()


def _call_ident(call: Any) -> str:
    """What names a call to its outcome (``u``, digested with the recorder's key): its tool and arguments (the first
    call of the same tool and arguments in the same turn without an outcome takes it; a call id would not do: the
    policy names a batch's calls without one ``#0``...)."""
    return f"{call.name}\x00{canonical_arguments(call.arguments, _NO_FIELDS)}"


__all__ = ["DigestRecorder", "digest_arguments", "digest_result", "field_digest", "trajectory_lines"]
