"""A tool's result as the guard compares it: what the model would read, digested, never stored.

Two runs of a call made progress when their results differ. A result is first converted the way
pydantic writes it for a model (``to_jsonable_python``: datetimes, dates, UUIDs, Decimals, Enums,
dataclasses, pydantic models; sets sorted), then written as canonical JSON, then, unless the policy
keeps them, stripped of **volatile tokens**: text that changes on every call without meaning anything
changed. They are masked in the text before it is digested:

- UUIDs (``8-4-4-4-12`` hex digits, any case),
- runs of 16 or more hex digits (request ids, trace ids, hashes),
- ISO 8601 date-times with a time of day (``2026-12-01T10:38:15``, optional seconds fraction and zone;
  a space in place of the ``T`` counts too), and the same in Python's ``repr`` of a datetime
  (``datetime.datetime(2026, 12, 1, 10, 38, 15, 532104)``, which SDKs that ``str()`` a result write).
  Plain dates (``2026-12-01``) are kept: a new date usually means something changed.
- the moment of the answer itself, written as an epoch number under a key that names it (``"checked_at":
  1733040000``, ``"generatedAt"``, ``"server_time"``, ``"timestamp"``: 10 digits of seconds or 13 of milliseconds,
  2001-2033), the instant an ISO date-time would spell; an entity's own time (``last_run_at``, ``expires_at``) and
  the same number under another key (an order number) are kept: a new one there is news;
- how long the call itself took, where it says so: ``took 0.23s``, ``elapsed: 12 ms``, a test run's summary
  (``5 passed, 1 warning in 0.23s``, ``Ran 5 tests in 0.002s``), and numbers under ``took``, ``elapsed(_ms)``,
  ``time_taken``, ``query_time``: the same work, timed again. A ``duration``, ``latency`` or ``response_time``
  is kept (a job's, a route's or a monitored endpoint's time is often the answer);
- the memory address in a default ``repr`` written into text (``<Thing object at 0x7f3a2b1c9d00>``, ``<function f
  at 0x...>``), as an SDK that hands the model ``str(result)`` of a plain object writes it: all the model reads is
  the type, so two runs that differ only by where Python put the object returned the same.

A value that has no JSON form (an image, an SDK object) is digested from a stable text form where one
exists (a ``repr`` of its own, naming no memory address as the default ``<Type object at 0x...>`` does);
failing that its outcome is ``UNKNOWN_OUTCOME``: new every time, and ``Policy.max_opaque_runs`` caps
how often it may run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from .call import canonical_arguments, json_text, keyed_digest

UNKNOWN_OUTCOME = "?"
"""The outcome of a run whose result has no stable form: never the same as another."""
REJECTED_OUTCOME = "-"
"""The outcome of a call rejected before it ran (``Policy.record_rejection``): the same every time."""

VOLATILE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # a UUID
    r"|(?<![0-9a-fA-F])[0-9a-fA-F]{16,}(?![0-9a-fA-F])"  # 16+ hex digits
    r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"  # an ISO date-time
    r"|\d{4}, \d{1,2}, \d{1,2}, \d{1,2}, \d{1,2}(?:, \d{1,2})?(?:, \d{1,6})?"  # datetime.datetime(...)'s repr
)
"""The volatile tokens masked in results before digesting (see the module's docstring)."""
_CANDIDATE = re.compile(r"[0-9a-fA-F][0-9a-fA-F:+.,TZ -]{15,}")
"""Runs of the characters volatile tokens are made of, 16 or more long: ``VOLATILE`` is tried only inside
them (its own scan costs ~100 ns a character; this one a tenth of that), with the same result."""


_TEMP_NAME = re.compile(r"(?<![A-Za-z0-9_])tmp(?:(?=[a-z_]{0,7}[0-9])[a-z0-9_]{8}|\.[A-Za-z0-9]{10})(?![A-Za-z0-9_])")
"""A temporary file's or folder's random name: Python's ``tempfile`` (``tmp`` and 8 of ``[a-z0-9_]``, a digit among
them: ``tmp_results`` is a name someone chose) and ``mktemp``'s default (``tmp.`` and 10 letters or digits)."""
_REPR_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{4,16}>")
"""A default ``repr``'s memory address, as it ends the repr (``<Thing object at 0x7f3a2b1c9d00>``)."""
_EPOCH_VALUE = re.compile(r'":1\d{9}(?:\d{3})?(?:\.\d+)?(?=[,}\]])')
"""An epoch-sized number (10 digits of seconds, 13 of milliseconds, 2001-2033) as a key's value (found by its
literal ``":1``, fast; the key is read back from the text)."""
_TIME_KEY = re.compile(
    r"ts|time|timestamp|now|(?:server|request|response|current)_?[tT]ime"
    r"|(?:checked|fetched|generated|retrieved|requested|served|queried|polled|sent|received)(?:_at|At)"
)
"""A key that names the moment of the answer itself (``checked_at``, ``generatedAt``, ``server_time``, ``timestamp``),
not an entity's own time (``last_run_at``, ``expires_at``, ``updated_at``: a new one there is news)."""


def _mask_epochs(text: str) -> str:
    """``text`` with each epoch time under a time's key replaced by ``~``."""
    pieces: list[str] = []
    done = 0
    for value in _EPOCH_VALUE.finditer(text):
        opened = text.rfind('"', 0, value.start())  # the key's opening quote: keys hold no quote of their own
        if opened >= 0 and _TIME_KEY.fullmatch(text, opened + 1, value.start()):
            pieces += [text[done : value.start() + 2], "~"]
            done = value.end()
    return "".join(pieces) + text[done:] if pieces else text


_DURATION_UNDER_KEY = re.compile(
    r'("(?:took|elapsed|elapsed_?[tT]ime|time_?[tT]aken|query_?[tT]ime)(?:_?(?:ms|s|sec|secs|seconds|Ms|Seconds))?":)'
    r"\d+(?:\.\d+)?(?=[,}\]])"
)
"""A number under a key that says how long the call itself took (``"took": 5``, a search engine's; ``"elapsed_ms"``,
``"query_time"``). Not ``duration``, ``latency`` or ``response_time``: a job's, a route's or a monitored endpoint's
time is often the answer."""
_DURATION_HINT = re.compile(
    r"took|Took|elapsed|Elapsed|passed|failed|error|skipped|warning|Ran |Done in|Finished in|BUILD|Time:|Total time:"
)
"""Where a duration said in text may start."""
_SUMMARY_WORD = r"(?:passed|failed|errors?|skipped|warnings?|xfailed|xpassed|deselected)"
_DURATION_LEAD = re.compile(
    r"(?:(?:[Tt]ook|[Ee]lapsed(?: time)?)[ ]{0,3}(?:[:=][ ]{0,3})?"
    rf"|{_SUMMARY_WORD}(?:, \d+ {_SUMMARY_WORD})* in |Ran \d+ tests? in "
    r"|(?:Done|Finished|BUILD (?:SUCCESSFUL|FAILED)) in |(?:Total )?[Tt]ime:[ ]{1,12})(?=\d)"
)
"""What says that the call's own duration follows: ``took``, ``elapsed:``, a test run's summary ``5 passed, 1
warning in`` (its count before it), ``Ran 5 tests in``, a build tool's ``Done in`` (yarn), ``Finished in`` (rspec),
``BUILD SUCCESSFUL in`` (gradle), ``Time:`` (jest, psql), ``Total time:`` (maven)."""
_DURATION_AMOUNT = re.compile(r"\d+(?:\.\d+)?[ ]{0,2}(?:ms|s|secs?|seconds?|milliseconds?|µs|us)(?![\w-])")
"""A duration: a number and its unit (not ``us-east-1``)."""
_COUNT_BEFORE = re.compile(r"(?<!\w)\d+ \Z")
"""A test summary's count, just before its word (searched up to the word: ``\\Z`` is where the search stops)."""
_SUMMARY_HINTS = frozenset({"passed", "failed", "error", "skipped", "warning"})
MAX_DURATIONS = 64
"""Hint words looked at in one result: past them its durations are left (a text full of hints costs no more)."""


def _mask_durations(text: str) -> str:
    """``text`` with each duration said in it (``took 0.23s``, ``5 passed in 0.23s``) replaced by ``~``: matched
    where a hint word starts a word (a line's first word too: JSON writes its line break as ``\\n``), never by
    scanning the whole text with the full pattern."""
    pieces: list[str] = []
    done = 0
    for seen, hint in enumerate(_DURATION_HINT.finditer(text)):
        if seen == MAX_DURATIONS:
            break
        at = hint.start()
        escaped = at >= 2 and text[at - 2] == "\\" and text[at - 1] in "ntr"
        if at < done or (at and text[at - 1].isalnum() and not escaped):
            continue  # inside a word, or inside what was just masked
        if hint.group() in _SUMMARY_HINTS and not _COUNT_BEFORE.search(text, max(done, at - 12), at):
            continue  # a test run's summary has its count just before the word
        lead = _DURATION_LEAD.match(text, at)
        amount = None if lead is None else _DURATION_AMOUNT.match(text, lead.end())
        if lead is not None and amount is not None:
            pieces += [text[done : lead.end()], "~"]
            done = amount.end()
    return "".join(pieces) + text[done:] if pieces else text


def mask_volatile_tokens(text: str) -> str:
    """``text`` with every ``VOLATILE`` token replaced by ``~``, every default repr's address by ``0x~``, every
    temporary file's random name by ``tmp~``, and every epoch time under a time's key and duration (under a
    duration's key, or said in text) by ``~``."""
    text = _CANDIDATE.sub(_mask_run, text)
    if " at 0x" in text:
        text = _REPR_ADDRESS.sub(" at 0x~>", text)
    if "tmp" in text:
        text = _TEMP_NAME.sub("tmp~", text)
    if '":1' in text:
        text = _mask_epochs(text)
    # Parts of the words that say a duration follows, in text or as a key: a test or build summary's " in " (5 passed
    # in, Ran 5 tests in, Done in), took, elapsed, time_taken, query_time, Time:. With none of them in a result (most),
    # no duration to look for: six substring searches (written out: a loop costs more than they do) for a pattern's.
    if " in " in text or "ook" in text or "lapsed" in text or "aken" in text or "uery" in text or "ime:" in text:
        text = _DURATION_UNDER_KEY.sub(r"\1~", text)
        text = _mask_durations(text)
    return text


def _mask_run(run: re.Match[str]) -> str:
    return VOLATILE.sub("~", run.group())


NO_STABLE_FORM = object()
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""A ``repr`` naming a memory address (the default ``<Type object at 0x...>``) is no stable form."""
STAND_IN = re.compile(r'"<[A-Za-z_][\w.]*\.[\w.<>]+>"')


def model_view(result: Any) -> Any:
    """``result`` as plain JSON values, the way pydantic writes it for a model; ``NO_STABLE_FORM`` parts stay marked.

    Sets are sorted (by their canonical JSON) so that their order never makes two equal results differ.
    Never raises: a value pydantic cannot convert, or a hostile one, falls back to its stable text form
    (a ``repr`` of its own) or to the marker of a value with no stable form.
    """
    try:
        return to_jsonable_python(_plain_sets(result, 0), fallback=_fallback, serialize_unknown=False)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError, OverflowError):
        return NO_STABLE_FORM
    except Exception:  # a hostile object whose conversion raised something else
        return NO_STABLE_FORM


MAX_DEPTH = 200
"""Containers nested deeper than this in a result make it a result with no stable form."""


def _plain_sets(value: Any, depth: int) -> Any:
    """``value`` with its sets (in dicts, lists and tuples) as sorted lists and its bytes as digests."""
    kind = type(value)
    if kind is str or kind is int or kind is float or value is None or kind is bool:
        return value
    if depth > MAX_DEPTH:
        raise RecursionError("result nested too deep")
    if kind is dict:
        return {k: _plain_sets(v, depth + 1) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_plain_sets(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable_python(_plain_sets(v, depth + 1), fallback=_fallback) for v in value]
        return sorted(items, key=canonical_arguments)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "<bytes:" + hashlib.blake2b(bytes(value), digest_size=8).hexdigest() + ">"
    return value


class _NoStableForm(Exception):
    """Raised out of pydantic's conversion: the result holds a value with no stable form."""


def _fallback(value: Any) -> Any:
    """A value pydantic cannot convert: its own ``repr``, or (raised) no stable form at all. Never returns
    a value pydantic would hand back here again."""
    try:
        text = repr(value)
    except Exception:
        raise _NoStableForm from None
    if type(text) is not str or _ADDRESS.search(text):
        raise _NoStableForm
    return f"<{type(value).__qualname__}:{text}>"


def outcome_digest(
    ok: bool, result: Any, ignore: Iterable[str] = (), *, mask_volatile: bool = True, key: bytes = b""
) -> str:
    """A 16-character digest of a run's outcome: whether it succeeded, and its ``result`` as the model reads it.

    ``ignore`` names result fields left out at any depth (a timestamp, a new order id); ``mask_volatile``
    masks the volatile tokens (``VOLATILE``); ``key`` makes it a keyed digest (see ``call_key``). A result
    with no stable form gives ``UNKNOWN_OUTCOME``.
    """
    text: str | None = None
    kind = type(result)
    if kind is str:
        text = canonical_arguments(result, ignore)  # JSON text is parsed: key order never matters
    elif (kind is dict or kind is list) and not ignore:
        try:  # plain JSON values, the common case: one pass in C
            text = json_text(result)
        except Exception:  # a value JSON lacks (a datetime, a set...), or a hostile key, somewhere inside
            text = None
    if text is None:
        view = model_view(result)
        if view is NO_STABLE_FORM:
            return UNKNOWN_OUTCOME
        text = canonical_arguments(view, ignore)
    if '"<' in text and STAND_IN.search(text):
        return UNKNOWN_OUTCOME  # a stand-in for an object canonical_arguments could not write
    if mask_volatile:
        text = mask_volatile_tokens(text)
    return keyed_digest(f"{'ok' if ok else 'failed'}\x00{text}", key, 8)


def error_text(error: BaseException) -> str:
    """What a call that raised ``error`` returned, as the model usually reads it: ``"Type: message"``."""
    message = getattr(error, "message", None)
    if not isinstance(message, str):
        try:
            message = str(error)
        except Exception:
            message = ""
    return f"{type(error).__name__}: {message}"
