"""A tool call as the guard sees it, and the canonical key that says when two calls are the same.

Two calls are the same when they name the same tool and their arguments have the same canonical
JSON: object keys sorted at every depth, compact separators (``json.dumps(args, sort_keys=True,
separators=(",", ":"))``). ``{"a":1,"b":2}``, ``{"b":2,"a":1}`` and the text ``'{"b": 2, "a": 1}'``
are one call. The key is a digest: the guard's state never holds argument values.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import json.encoder
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

MAX_NAME_CHARS = 1_000
"""Tool names and ids longer than this are kept as their first 960 characters and a digest of the whole."""
MAX_ARGUMENT_CHARS = 1_000_000
"""Argument text longer than this is digested as it is, without parsing it as JSON."""

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _no_json_form(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} has no JSON form")


_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # CPython's C encoder (typeshed omits it)
_C_ENCODER: Any = (
    _make_encoder(None, _no_json_form, json.encoder.encode_basestring, None, ":", ",", True, False, True)
    if _make_encoder is not None
    else None
)


def json_text(value: Any) -> str:
    """``_ENCODER.encode(value)``, without building the C encoder again on every call (the hot path's
    largest cost): the same text; no check for cycles, which end in ``RecursionError`` instead."""
    if _C_ENCODER is None or type(value) is str:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


_CYCLE = '"<cycle>"'


@dataclass(frozen=True, init=False)
class ToolCall:
    """One call the model asked for.

    ``arguments`` is whatever the SDK hands over: a dict, JSON text, or any other value. The rest is
    keyword-only. ``call_id`` is the id the model gave the call: within one model response, a hook call
    delivered twice with the same ``call_id`` is decided once (the guard scopes it by turn and response,
    so an SDK reusing ``call_0`` in every response is fine; ``None`` or ``""``: no de-duplication).

    The effect hints are what the SDK knows of the tool, each ``None`` when unknown (only explicit
    annotations count: MCP's defaults for an unannotated tool say nothing here):
    ``read_only`` (MCP ``readOnlyHint``: it changes nothing; the policy's ``read_only`` decides when
    ``None``), ``destructive`` (``destructiveHint``) and ``idempotent`` (``idempotentHint``). A call that is
    ``destructive`` and not ``idempotent`` is not sent twice (``Policy.destructive``); an ``idempotent``
    call's repeat changes nothing.
    """

    name: str
    arguments: Any = None
    _: KW_ONLY
    call_id: str | None = None
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None

    def __init__(
        self,
        name: str,
        arguments: Any = None,
        *,
        call_id: str | None = None,
        read_only: bool | None = None,
        destructive: bool | None = None,
        idempotent: bool | None = None,
    ) -> None:
        # Written out, not the dataclass's own __init__: one write of the instance's dict instead of six frozen
        # setattrs and a __post_init__ (an adapter builds one a call: half the cost).
        # The state keeps names and ids as text: an int id must not come back as another value, and a lone
        # surrogate must not make the state unwritable.
        if type(name) is not str or not name.isascii() or len(name) > MAX_NAME_CHARS:
            name = as_text(name)
        if call_id is not None and (type(call_id) is not str or not call_id.isascii() or len(call_id) > MAX_NAME_CHARS):
            call_id = as_text(call_id)
        # A hint that is not an explicit True or False is unknown.
        if read_only is not None and type(read_only) is not bool:
            read_only = None
        if destructive is not None and type(destructive) is not bool:
            destructive = None
        if idempotent is not None and type(idempotent) is not bool:
            idempotent = None
        self.__dict__.update(
            name=name,
            arguments=arguments,
            call_id=call_id,
            read_only=read_only,
            destructive=destructive,
            idempotent=idempotent,
        )


for _default in ("arguments", "call_id", "read_only", "destructive", "idempotent"):
    delattr(ToolCall, _default)  # the fields keep their defaults; a class attribute would slow every read
del _default


def as_text(value: Any) -> str:
    """``value`` as text that JSON can always write and read back the same: ``str(value)`` (or its type's
    name if that raises), with lone surrogates written as ``\\udXXX`` escapes, and at most ``MAX_NAME_CHARS``
    long (distinct long values stay distinct). Ids and names go through it."""
    text: str
    if type(value) is str:
        text = value
    else:
        try:
            text = str.__str__(str(value))  # str.__str__: a plain str, even from a str subclass
        except Exception:
            text = f"<{_type_name(value)}>"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_NAME_CHARS:
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()
        text = f"{text[:960]}~{digest}"
    return text


def batch_call_ids(calls: Sequence[ToolCall]) -> list[str | None]:
    """The ids one model response's calls are decided under: each call's own, with the second and later
    uses of one id in the response told apart by position (``"call_0#3"``); an empty id is no id."""
    ids: list[str | None] = []
    used: set[str] = set()
    for index, call in enumerate(calls):
        call_id = call.call_id or None
        if call_id is not None:
            if call_id in used:
                call_id = f"{call_id}#{index}"
            else:
                used.add(call_id)
        ids.append(call_id)
    return ids


def canonical_arguments(arguments: Any, ignore: Iterable[str] = ()) -> str:
    """The canonical JSON text of ``arguments``, with the fields named in ``ignore`` dropped at any depth.

    Never raises. JSON text is parsed first (text that is not JSON stays a string); NaN and
    Infinity are kept as ``NaN``/``Infinity``; bytes are decoded as UTF-8; values JSON cannot hold
    (sets, models, objects) get a stable form; cycles become ``"<cycle>"``; nesting of any depth
    works. Text over ``MAX_ARGUMENT_CHARS`` is not parsed and stays one string.
    """
    ignored = ignore if type(ignore) is frozenset else frozenset(ignore)
    try:
        value = parsed_arguments(arguments)
        if not ignored:
            try:
                return json_text(value)
            except (TypeError, ValueError, RecursionError):
                pass
        return canonical_json(value, ignored)
    except Exception:  # a hostile container (items() or __len__ raising, ...): its type is all that is safe
        return json_text(f"<unreadable {_type_name(arguments)}>")


def _type_name(value: Any) -> str:
    kind = type(value)  # type() never consults a hostile __class__
    return f"{kind.__module__}.{kind.__qualname__}"


def digest_secret(key: bytes) -> bytes:
    """A digest key as BLAKE2b takes it: one longer than 64 bytes is hashed to 64 (the guard's ``Policy`` and the
    digest recordings key their digests with this)."""
    return key if len(key) <= 64 else hashlib.blake2b(key).digest()


def call_key(
    name: str, arguments: Any, *, by_arguments: bool = True, ignore: Iterable[str] = (), key: bytes = b""
) -> str:
    """A 32-character digest naming the call: the tool, and its canonical arguments if ``by_arguments``.

    With a ``key`` (``Policy.digest_key``) it is a keyed BLAKE2b (a MAC): nobody without the key can test
    guesses of the arguments against it. Without one, a short or guessable argument (a PIN, a date) can be
    recovered from the digest by trying every candidate.
    """
    return keyed_digest(f"{name}\x00{canonical_arguments(arguments, ignore)}" if by_arguments else name, key, 16)


def keyed_digest(text: str, key: bytes, size: int) -> str:
    """``blake2b(text, digest_size=size, key=key).hexdigest()`` (text as UTF-8, lone surrogates kept), continuing a
    copy of the key's hasher instead of hashing the key's block again: what every call key and outcome digest is."""
    hasher = blake2b_of(key, size).copy()
    hasher.update(text.encode("utf-8", "surrogatepass"))
    return hasher.hexdigest()


@functools.lru_cache(maxsize=32)
def blake2b_of(key: bytes, size: int) -> hashlib.blake2b:
    """BLAKE2b of ``size`` bytes keyed with ``key``, nothing hashed yet (a key BLAKE2b refuses raises here)."""
    return hashlib.blake2b(digest_size=size, key=key)


def parsed_arguments(arguments: Any) -> Any:
    if type(arguments) is dict:
        return arguments
    if isinstance(arguments, (bytes, bytearray, memoryview)):
        arguments = bytes(arguments).decode("utf-8", "replace")
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            return arguments
        stripped = arguments.strip()
        if stripped[:1] in ("{", "[", '"') or stripped in ("null", "true", "false"):
            try:
                return json.loads(stripped)
            except (ValueError, RecursionError):
                return arguments
    return arguments


def canonical_json(root: Any, ignored: frozenset[str]) -> str:
    """Canonical JSON without recursion: same text as ``json_text`` where ``json_text`` works."""
    out: list[str] = []
    # The stack holds values to encode, or _Text to emit; a _Text that closes a container takes it off the path.
    stack: list[Any] = [root]
    on_path: set[int] = set()
    while stack:
        item = stack.pop()
        if type(item) is _Text:
            out.append(item.text)
            if item.closes is not None:
                on_path.discard(item.closes)
            continue
        if type(item) is _Raw:
            out.append(item.text)
            continue
        value = plain_value(item)
        if not isinstance(value, (Mapping, list, tuple)):
            out.append(_scalar(value))
            continue
        ident = id(item)  # the original object: a stand-in built by plain_value is new on every visit
        if ident in on_path:
            out.append(_CYCLE)
            continue
        on_path.add(ident)
        if isinstance(value, Mapping):
            keyed = ((key_text(k), v) for k, v in value.items())
            items = sorted(((k, v) for k, v in keyed if k not in ignored), key=_first)
            stack.append(_Text("}", ident))
            for index in range(len(items) - 1, -1, -1):
                key, child = items[index]
                stack.append(child)
                stack.append(_Text(("," if index else "") + json_text(key) + ":"))
            out.append("{")
        else:
            stack.append(_Text("]", ident))
            for index in range(len(value) - 1, -1, -1):
                stack.append(value[index])
                if index:
                    stack.append(_Text(","))
            out.append("[")
    return "".join(out)


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]


class _Raw:
    """Canonical text already written (a set's member): emitted as it is, never escaped again."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Text:
    __slots__ = ("closes", "text")

    def __init__(self, text: str, closes: int | None = None) -> None:
        self.text = text
        self.closes = closes


def key_text(key: Any) -> str:
    """An object key as JSON writes it: strings as they are, ``1``, ``1.5``, ``true``, ``null``; any other key
    as its stable form (bytes decoded, a frozenset as its canonical list, an object as its type)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (int, float)):
        return _scalar(key)
    value = plain_value(key)
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        return canonical_json(key, frozenset())
    return _scalar(value)


def plain_value(value: Any) -> Any:
    """A JSON-like stand-in for values JSON cannot hold."""
    if value is None or isinstance(value, (str, int, float, dict, list, tuple)):
        return value
    if isinstance(value, Mapping):
        return value
    if isinstance(value, (set, frozenset)):
        try:  # members written once, in canonical order: nested sets grow linearly, not exponentially
            return [_Raw(text) for text in sorted(canonical_json(v, frozenset()) for v in value)]
        except RecursionError:
            return f"<{_type_name(value)} nested too deep>"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    try:
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return dump(mode="json")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    except Exception:  # a hostile object: its type is all that is safe to use
        pass
    return f"<{_type_name(value)}>"


def _scalar(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    try:
        return json_text(value)
    except (TypeError, ValueError):
        pass
    if isinstance(value, int):  # over the int-to-text digit limit: its hex form has no limit
        return json_text(f"<int {hex(value)}>")
    try:
        return json_text(repr(value))
    except Exception:
        return json_text(f"<{_type_name(value)}>")
