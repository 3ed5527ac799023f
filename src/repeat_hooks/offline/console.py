"""The offline tools of the ``repeat-hooks`` console command (``cli``): ``replay`` recorded trajectories through
policies, side by side; ``record``; ``tune``.

Tune a policy on your own logs before turning it on::

    repeat-hooks replay logs.jsonl.gz --policy '{}' --policy '{"count": "per_turn"}'

Input: JSON Lines or JSON (a list), optionally gzipped, each record either the generic format
(``{"id", "success", "turns": [[{"name", "arguments", "result", "ok"}, ...], ...]}``: one call per model
response) or an OpenAI chat-format conversation (a list of messages, or ``{"messages": [...], "success":
...}``: each user message starts a turn; an assistant message's ``tool_calls`` are one response; ``tool``
messages carry the results). A malformed record is reported on stderr with its line number, and the rest is
still replayed. A digest-only recording (``repeat_hooks.offline.recording``: a file of it, or a recorder's folder)
is read too, and decided on exactly as the full trajectories it was made from.

``repeat-hooks record FILES --out DIR`` writes full trajectories as a digest-only recording;
``repeat-hooks tune FILES`` proposes a policy from recordings, each suggestion measured by replay
(``repeat_hooks.offline.tune``). A command whose output is cut short (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import sys
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from ..policy import Policy
from . import reading
from .reading import (
    MAX_LINE_CHARS,  # noqa: F401 - 0.2's name here; the readers read ``reading.MAX_LINE_CHARS``
    capped_lines,
    is_digest_line,
    read_digest_lines,
    read_folder,
)
from .recording import DigestRecorder
from .replay import ROWS, NotReplayable, RecordedCall, Tally, Trajectory, printable, replay_one

MAX_DOCUMENT_CHARS = 256 * 1024 * 1024
"""A file that is one JSON document (not JSON Lines) may be at most this long."""
PROGRESS_BYTES = 4 * 1024 * 1024
"""Files larger than this show a progress bar on a terminal."""

INPUTS = "JSONL or JSON files (optionally gzipped), or a DigestRecorder's folder (its files read together)"
KEY_HELP = "the file whose bytes (16 or more) keyed the recording's digests (DigestRecorder(digest_key=...))"


class MalformedRecord(ValueError):
    """A record that is neither the generic format nor a chat-format conversation."""


def main(argv: Sequence[str] | None = None) -> int:
    """The offline tools of the ``repeat-hooks`` console script (``cli.main``); returns the exit status. Output cut
    short by its reader (``| head``) ends it quietly, with status 0. Every line it prints is ``say``'s: names from
    the files read cannot act on the terminal, and a character the terminal's encoding lacks is written as its
    escape, never an error."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not raise again
        return 0


class UsageError(Exception):
    """A command-line value that cannot be used: its one-line reason is printed, the status is 2."""


def say(text: str = "", *, file: IO[str] | None = None) -> None:
    """Print ``text`` (to stdout, or ``file``), each of its lines ``replay.printable``: a tool name or a
    trajectory id holding a terminal escape sequence, a bidi mark or a lone surrogate is shown escaped, never
    acted on nor a crash. Every line the console script prints goes through it."""
    print("\n".join(printable(line) for line in text.split("\n")), file=sys.stdout if file is None else file)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="repeat-hooks", description="Stop LLM agents from repeating tool calls.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    play = commands.add_parser("replay", help="replay recorded trajectories through one or more policies")
    play.add_argument("files", nargs="+", type=Path, help=INPUTS)
    play.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="JSON",
        help="Policy settings as JSON, e.g. '{\"max_calls\": 3}'; repeat to compare (default: the default policy)",
    )
    play.add_argument("--json", action="store_true", help="print the figures as JSON")
    play.add_argument("--examples", action="store_true", help="list where harmful refusals happened")
    play.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the figures as one self-contained HTML page (tool names and digests only)",
    )
    play.add_argument("--digest-key-file", type=Path, metavar="FILE", help=KEY_HELP)
    _add_record_and_tune(commands)
    from .hooks import add_commands  # for --help: cli.main runs these before this module is imported

    add_commands(commands)
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            return record(args.files, args.out, read_key(args.digest_key_file), append=args.append)
        if args.command == "tune":
            base = parse_policy(args.policy) if args.policy is not None else None
            return tune_files(args.files, base, read_key(args.digest_key_file))
        policies = [parse_policy(text) for text in args.policy] or [Policy()]
        key = read_key(args.digest_key_file)
        if args.html is not None:
            check_writable(args.html, "--html")
    except UsageError as error:
        say(f"repeat-hooks {args.command}: {error}", file=sys.stderr)
        return 2
    for label, policy in zip(args.policy, policies, strict=False):
        if policy.max_model_seconds is not None or policy.max_cost_usd is not None:
            say(
                f"repeat-hooks: {label}: a corpus records no model seconds nor cost, so max_model_seconds and "
                "max_cost_usd never trip in a replay (max_model_calls does: one model call per response)",
                file=sys.stderr,
            )
    labels = args.policy or ["default"]
    tallies = [Tally() for _ in policies]
    errors = 0
    for path in args.files:
        try:
            for trajectory in read_trajectories(path, key):
                for policy, tally in zip(policies, tallies, strict=True):
                    replay_one(policy, trajectory, tally)
        except MalformedRecordsSeen as seen:
            errors += seen.count
        except (OSError, NotReplayable) as error:
            say(f"repeat-hooks: {path}: {error}", file=sys.stderr)
            return 2
    unwritten = args.html is not None and not write_html(args.html, labels, tallies, args.files)
    if args.json:
        say(
            json.dumps(
                [{"policy": label, **tally.as_dict()} for label, tally in zip(labels, tallies, strict=True)], indent=2
            )
        )
    else:
        say(table(labels, tallies))
        if args.examples:
            for label, tally in zip(labels, tallies, strict=True):
                for example in tally.examples:
                    say(f"harmful ({label}): {example}")
    return 2 if unwritten else 1 if errors else 0


def write_html(path: Path, labels: Sequence[str], tallies: Sequence[Tally], files: Sequence[Path]) -> bool:
    """Write the report page (``repeat_hooks.report``) to ``path``; ``False`` (the reason on stderr) if it
    cannot be written."""
    from .report import render_html

    try:
        path.write_text(render_html(labels, tallies, [file.name for file in files]), encoding="utf-8")
    except OSError as error:
        say(f"repeat-hooks: --html {path}: {error}", file=sys.stderr)
        return False
    return True


def _add_record_and_tune(commands: Any) -> None:
    """The ``record`` and ``tune`` subcommands' arguments."""
    convert = commands.add_parser("record", help="write trajectories as a digest-only recording (no values)")
    convert.add_argument("files", nargs="+", type=Path, help="JSONL or JSON files, optionally gzipped")
    convert.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder to write it in")
    convert.add_argument(
        "--append", action="store_true", help="add to the recording already in --out (else it must be empty)"
    )
    convert.add_argument(
        "--digest-key-file", type=Path, metavar="FILE", help="a file whose bytes (16 or more) key every digest"
    )
    propose = commands.add_parser("tune", help="propose a policy from recordings (digest or full), measured")
    propose.add_argument("files", nargs="+", type=Path, help=INPUTS)
    propose.add_argument(
        "--policy", metavar="JSON", help="the policy to tune from, as JSON (default: the default policy)"
    )
    propose.add_argument("--digest-key-file", type=Path, metavar="FILE", help=KEY_HELP)


def parse_policy(text: str) -> Policy:
    """``--policy JSON`` as a ``Policy``; ``UsageError`` with a one-line reason."""
    try:
        return Policy.model_validate_json(text)
    except ValidationError as error:
        reasons = []
        for problem in error.errors(include_url=False):
            where = ".".join(str(part) for part in problem["loc"])
            message = str(problem["msg"]).removeprefix("Value error, ")
            reasons.append(f"{where}: {message}" if where else message)
        raise UsageError(f"--policy {text}: {'; '.join(reasons)}") from None


def read_key(path: Path | None) -> bytes:
    """The bytes of ``--digest-key-file`` (``b""``: none given); ``UsageError`` naming the option."""
    if path is None:
        return b""
    try:
        key = path.read_bytes()
    except OSError as error:
        raise UsageError(f"--digest-key-file {path}: {error.strerror or error}") from None
    if len(key) < 16:
        raise UsageError(f"--digest-key-file {path}: holds {len(key)} bytes; a digest key needs at least 16")
    return key


def check_writable(path: Path, option: str) -> None:
    """Whether a file can be written at ``path`` (checked before any work); ``UsageError`` naming ``option``."""
    folder = path.parent
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a folder")
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: no folder {folder}")
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise UsageError(f"{option} {path}: cannot be written (permission denied)")


def record(files: Sequence[Path], out: Path, key: bytes, *, append: bool = False) -> int:
    """``repeat-hooks record``: write ``files`` to ``out`` as one digest recording (never rotated); returns the
    exit status: 2 when nothing could be written, 1 when some records were malformed or none was found."""
    try:
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: is a file, not a folder")
        if out.is_dir() and any(out.iterdir()) and not append:
            raise UsageError(f"--out {out}: is not empty (--append to add to the recording in it)")
        out.mkdir(parents=True, exist_ok=True)
        recorder = DigestRecorder(out, max_bytes=None, digest_key=key or None)
    except UsageError as error:
        say(f"repeat-hooks record: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        say(f"repeat-hooks record: --out {out}: {error.strerror or error}", file=sys.stderr)
        return 2
    errors = written = 0
    try:
        for path in _distinct(files):
            try:
                for trajectory in read_trajectories(path):
                    recorder.write_trajectory(trajectory)
                    written += 1
            except MalformedRecordsSeen as seen:
                errors += seen.count
            except OSError as error:
                say(f"repeat-hooks record: {path}: {error.strerror or error}", file=sys.stderr)
                return 2
    finally:
        recorder.close()
    if not written:
        say("repeat-hooks record: no conversations in the files given; nothing written", file=sys.stderr)
        return 1
    say(f"{written} conversations written to {recorder.path}")
    return 1 if errors else 0


def _distinct(files: Sequence[Path]) -> list[Path]:
    """``files`` without a file named twice (``record a.jsonl a.jsonl`` writes it once)."""
    seen: set[str] = set()
    kept = []
    for path in files:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            kept.append(path)
    return kept


def tune_files(files: Sequence[Path], base: Policy | None = None, key: bytes = b"") -> int:
    """``repeat-hooks tune``: read ``files``, print the proposed policy and its figures; the exit status."""
    from .tune import report, tune

    trajectories: list[Trajectory] = []
    errors = 0
    for path in files:
        try:
            trajectories.extend(read_trajectories(path, key))
        except MalformedRecordsSeen as seen:
            errors += seen.count
        except OSError as error:
            say(f"repeat-hooks: {path}: {error}", file=sys.stderr)
            return 2
    try:
        proposal = tune(trajectories, base)
    except NotReplayable as error:
        say(f"repeat-hooks tune: {error}", file=sys.stderr)
        return 2
    say(report(proposal))
    say()
    say(table(["default", "proposed"], [proposal.default, proposal.proposed]))
    return 1 if errors else 0


def table(labels: Sequence[str], tallies: Sequence[Tally]) -> str:
    """The figures side by side, one column per policy."""
    heads = [_label(label) for label in labels]
    width = max(len(name) for _, name in ROWS)
    columns = [max(len(head), 8) for head in heads]
    lines = ["  ".join([" " * width, *(head.rjust(col) for head, col in zip(heads, columns, strict=True))])]
    for attribute, name in ROWS:
        cells = []
        for tally, col in zip(tallies, columns, strict=True):
            value = getattr(tally, attribute)
            if attribute == "loops_caught":
                value = f"{value}/{tally.loops}"
            cells.append(str(value).rjust(col))
        lines.append("  ".join([name.ljust(width), *cells]))
    return "\n".join(lines)


def _label(label: str) -> str:
    label = printable(label)
    return label if len(label) <= 40 else label[:37] + "..."


class MalformedRecordsSeen(Exception):
    """Raised at the end of a file in which some records were malformed (each already reported)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} malformed records")
        self.count = count


def read_trajectories(path: Path, key: bytes = b"") -> Iterator[Trajectory]:
    """The trajectories in ``path`` (JSONL or JSON, gzipped or not, or a recorder's folder); malformed records
    reported on stderr. ``key``: the digest key a digest recording was made with (its ``ignore_*`` replay needs
    it).

    JSON Lines when the first line is a JSON value of its own, else one JSON document (a record, a list of
    records, or one chat-format conversation). Memory stays bounded: a line over ``MAX_LINE_CHARS``, a
    document over ``MAX_DOCUMENT_CHARS`` or nested too deep is reported and skipped. Raises
    ``MalformedRecordsSeen`` after the last good record if any record was malformed, or if the file ends
    early or its compression is corrupt (a one-line reason on stderr, never a traceback).
    """
    seen = _Seen(path)
    if path.is_dir():  # a DigestRecorder's folder: its rotated files as one stream
        yield from read_folder(path, seen.report, key)
        if seen.bad:
            raise MalformedRecordsSeen(seen.bad)
        return
    with path.open("rb") as raw:
        text = _open_text(raw)
        try:
            first = text.readline(reading.MAX_LINE_CHARS + 1)
            blank = bool(first)
            while first and not first.strip():
                first = text.readline(reading.MAX_LINE_CHARS + 1)
            if not first:
                what = "only blank lines" if blank else "an empty file"
                say(f"repeat-hooks: {path}: no records ({what})", file=sys.stderr)
                return
            try:
                opening = json.loads(first)
                digests, transcript = is_digest_line(opening), _is_transcript(opening)
                lines: Iterator[str | None] | None = capped_lines(text, first)
            except (ValueError, RecursionError):
                digests, transcript, lines = False, False, None
            if transcript and lines is not None:
                yield from _transcript(lines, seen)
            elif digests and lines is not None:
                yield from read_digest_lines(_digest_lines(lines, seen), seen.report, key)
            elif lines is None:  # one JSON document over several lines, or JSON Lines with a bad first line
                yield from _document(first, text, seen, raw)
            else:
                yield from _json_lines(lines, raw, seen)
        except (EOFError, OSError, UnicodeError, zlib.error) as error:
            seen.report(f"unreadable after line {seen.line}: {error}")
    if seen.bad:
        raise MalformedRecordsSeen(seen.bad)


def _is_transcript(entry: Any) -> bool:
    """The first line of a Claude Code session transcript (``~/.claude/projects/<project>/<session>.jsonl``): an
    entry naming its ``sessionId`` and its ``type``, which no record of the other formats has."""
    return isinstance(entry, dict) and isinstance(entry.get("sessionId"), str) and isinstance(entry.get("type"), str)


def _transcript(lines: Iterator[str | None], seen: _Seen) -> Iterator[Trajectory]:
    """A Claude Code transcript as one trajectory, read by the Claude Code adapter (each call as its hook command
    sees it); a line that is not JSON is reported and skipped. Without the adapter: one line saying what to install."""
    from .hooks import Missing, adapter

    try:
        reader = adapter("claude-code")
    except Missing as missing:
        seen.report(f"a Claude Code transcript: {missing}")
        return

    def entries() -> Iterator[dict[str, Any]]:
        for number, line in enumerate(lines, 1):
            seen.line = number
            if line is None:
                seen.report(f"line {number}: over {reading.MAX_LINE_CHARS} characters")
                continue
            try:
                entry = json.loads(line) if line.strip() else None
            except (ValueError, RecursionError):
                seen.report(f"line {number}: not JSON")
                continue
            if isinstance(entry, dict):
                yield entry

    yield reader.trajectory(entries(), seen.path.name.split(".")[0])


class _Seen:
    """What reading one file has met so far: its line number and its malformed records (each reported)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.line = 0
        self.bad = 0

    def report(self, problem: str) -> None:
        self.bad += 1
        say(f"repeat-hooks: {self.path}: {problem}", file=sys.stderr)


def _document(first: str, text: IO[str], seen: _Seen, raw: IO[bytes]) -> Iterator[Trajectory]:
    rest = text.read(MAX_DOCUMENT_CHARS + 1 - len(first))
    whole = first + rest
    try:
        if len(whole) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"one JSON document over {MAX_DOCUMENT_CHARS} characters: use JSON Lines")
        document = json.loads(whole)
    except (ValueError, RecursionError) as error:
        lines = rest.splitlines(keepends=True)
        if any(_is_json(line) for line in lines[:20]):  # JSON Lines whose first line is bad: name it, go on
            yield from _json_lines(iter([first, *lines]), raw, seen)
            return
        why = "nested too deep" if isinstance(error, RecursionError) else str(error)
        seen.report(f"not JSON Lines, nor one JSON document: {why}")
        return
    for index, record in enumerate(_records(document)):
        try:
            yield parse_record(record, f"{seen.path.name}:{index}")
        except MalformedRecord as error:
            seen.report(f"record {index}: {error}")


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return bool(line.strip())


def _json_lines(lines: Iterator[str | None], raw: IO[bytes], seen: _Seen) -> Iterator[Trajectory]:
    size = seen.path.stat().st_size
    show = size > PROGRESS_BYTES and sys.stderr.isatty()
    for number, line in enumerate(lines, start=1):
        seen.line = number
        if line is None:
            seen.report(f"line {number}: over {reading.MAX_LINE_CHARS} characters")
            continue
        if not line.strip():
            continue
        try:
            for record in _records(json.loads(line)):
                yield parse_record(record, f"{seen.path.name}:{number}")
        except RecursionError:
            seen.report(f"line {number}: nested too deep")
        except (ValueError, MalformedRecord) as error:
            seen.report(f"line {number}: {error}")
        if show and number % 50 == 0:
            print(f"\r{printable(seen.path.name)}: {100 * raw.tell() // max(size, 1):3d}%", end="", file=sys.stderr)
    if show:
        print(f"\r{printable(seen.path.name)}: 100%", file=sys.stderr)


def _digest_lines(lines: Iterator[str | None], seen: _Seen) -> Iterator[str]:
    """A digest recording's lines, an overlong one reported and skipped."""
    for number, line in enumerate(lines, start=1):
        seen.line = number
        if line is None:
            seen.report(f"line {number}: over {reading.MAX_LINE_CHARS} characters")
        else:
            yield line


def _records(document: Any) -> list[Any]:
    """The records a JSON value holds: a list of records, one chat conversation, or one record."""
    if isinstance(document, list) and document and all(isinstance(item, dict) for item in document):
        if all("role" in item for item in document):
            return [document]  # one chat-format conversation
        if all("turns" in item or "messages" in item for item in document):
            return document
    if isinstance(document, list) and document and all(isinstance(item, list) for item in document):
        return document  # a list of conversations
    return [document]


def _open_text(raw: IO[bytes]) -> IO[str]:
    magic = raw.read(2)
    raw.seek(0)
    binary: IO[bytes] = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw  # type: ignore[assignment]
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace")


def parse_record(record: Any, fallback_id: str) -> Trajectory:
    """One record of either format as a ``Trajectory``; ``MalformedRecord`` says what is wrong."""
    try:
        if isinstance(record, list):
            return _chat(record, fallback_id, None)
        if not isinstance(record, dict):
            raise MalformedRecord(f"expected an object or a list of messages, got {type(record).__name__}")
        ident = str(record.get("id", fallback_id))
        success = record.get("success")
        if success is not None and not isinstance(success, bool):
            raise MalformedRecord(f"'success' must be true, false or null, got {success!r}")
        if "turns" in record:
            return _generic(record["turns"], ident, success)
        if "messages" in record:
            return _chat(record["messages"], ident, success)
        raise MalformedRecord("expected 'turns' (generic format) or 'messages' (chat format)")
    except (TypeError, AttributeError, KeyError, ValueError) as error:
        if isinstance(error, MalformedRecord):
            raise
        raise MalformedRecord(f"unexpected shape: {type(error).__name__}: {error}") from None


def _generic(turns: Any, ident: str, success: bool | None) -> Trajectory:
    if not isinstance(turns, list) or not all(isinstance(turn, list) for turn in turns):
        raise MalformedRecord("'turns' must be a list of lists of calls")
    parsed: list[list[list[RecordedCall]]] = []
    for turn in turns:
        calls = []
        for call in turn:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise MalformedRecord("every call needs a 'name' (text)")
            calls.append(
                [
                    RecordedCall(
                        call["name"],
                        call.get("arguments"),
                        call.get("result"),
                        call.get("ok", True) is not False,
                        call.get("read_only"),
                    )
                ]
            )
        parsed.append(calls)
    return Trajectory(ident, parsed, success)


def _chat(messages: Any, ident: str, success: bool | None) -> Trajectory:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise MalformedRecord("a chat-format conversation is a list of messages, each with a 'role'")
    turns: list[list[list[RecordedCall]]] = []
    # A tool message answers the latest call with its id: ids may repeat across responses.
    waiting: dict[str, tuple[int, int, int]] = {}  # call id -> (turn, response, position)
    slots: dict[tuple[int, int, int], tuple[Any, bool]] = {}
    calls: list[list[list[tuple[str, Any, str]]]] = []
    for message in messages:
        role = message["role"]
        if role == "user":
            calls.append([])
            continue
        if role == "tool":
            where = waiting.pop(str(message.get("tool_call_id")), None)
            if where is not None:
                slots[where] = (message.get("content"), not _is_error(message))
            continue
        if role != "assistant" or not message.get("tool_calls"):
            continue
        if not calls:
            calls.append([])  # tool calls before any user message
        tool_calls = message["tool_calls"]
        if not isinstance(tool_calls, list):
            raise MalformedRecord("'tool_calls' must be a list")
        response: list[tuple[str, Any, str]] = []
        for tool_call in tool_calls:
            function = tool_call.get("function") if isinstance(tool_call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise MalformedRecord("every tool call needs 'function': {'name', 'arguments'}")
            call_id = str(tool_call.get("id"))
            waiting[call_id] = (len(calls) - 1, len(calls[-1]), len(response))
            response.append((function["name"], function.get("arguments"), call_id))
        calls[-1].append(response)
    for t, turn in enumerate(calls):
        turns.append([])
        for r, response in enumerate(turn):
            recorded = []
            for position, (name, arguments, _) in enumerate(response):
                result, ok = slots.get((t, r, position), (None, True))
                recorded.append(RecordedCall(name, arguments, result, ok))
            turns[-1].append(recorded)
    return Trajectory(ident, turns, success)


def _is_error(message: dict[str, Any]) -> bool:
    return message.get("status") == "error" or message.get("is_error") is True


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
