"""``RedisStore``: a session's ``GuardState`` in Redis, shared by every process that serves the session.

Install the extra: ``pip install 'repeat-hooks[redis]'`` (redis-py, asyncio API).

How an update stays atomic without locks: each session is one Redis hash, ``{t: token, s: state JSON}``,
where ``t`` is a random token replaced on every write. ``update`` runs ``change`` on the state it knows,
then a Lua script writes the result only if the stored token is still the one it read (compare-and-set),
and sets the TTL in the same step. On a conflict the script answers with the current token and state,
so the retry needs no extra read. The store remembers the last token and state it saw per session (a
small LRU), so a process that keeps serving a session decides in **one** round trip; a session last
written elsewhere, or not seen before, takes **two** (a read, then the write). ``change`` may therefore
run more than once, which the ``StateStore`` protocol allows: it must depend only on its argument.

Failures: an unreachable, timed-out or erroring Redis raises ``StoreUnavailable``; a session too
contended to update within ``max_attempts`` raises ``StoreContention`` (a ``StoreUnavailable``). The
adapters decide what a failed decision means (fail open or fail closed); the store never guesses.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.exceptions import RedisError
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "repeat_hooks.redis needs redis-py (>= 5.0): install it with pip install 'repeat-hooks[redis]'"
    ) from error

from pydantic import ValidationError

from .state import GuardState

__all__ = ["DEFAULT_PREFIX", "DEFAULT_TTL", "RedisStore", "StoreContention", "StoreUnavailable"]

T = TypeVar("T")

DEFAULT_PREFIX = "repeat-hooks:"
"""Prepended to every session key."""
DEFAULT_TTL = 86400.0
"""Seconds a session's state lives after its last write (one day)."""

# KEYS[1]: the session's hash. ARGV: the token read ('' = no state), a new token, the state JSON, TTL ms.
# Writes and sets the TTL only if the token is unchanged: returns {1}. Otherwise returns {0} (no state
# stored) or {0, token, state}, the current value, so the caller can retry without reading again.
_COMPARE_AND_SET = """
local current = redis.call('HMGET', KEYS[1], 't', 's')
local token = current[1]
if not token then token = '' end
if token ~= ARGV[1] then
  if token == '' then return {0} end
  return {0, token, current[2]}
end
redis.call('HSET', KEYS[1], 't', ARGV[2], 's', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1}
"""


class StoreUnavailable(RuntimeError):
    """The store could not decide: Redis is unreachable, timed out, answered an error, or holds a state
    that is not a ``GuardState``. The cause is chained (``__cause__``).

    After a timeout or a lost connection, the write may or may not have happened. Adapters catch this
    to fail open (let the call run, log the error) or fail closed (refuse it).
    """


class StoreContention(StoreUnavailable):
    """Other writers kept changing the session: ``max_attempts`` compare-and-set attempts all lost."""


class RedisStore:
    """A ``StateStore`` in Redis: atomic read-modify-write of one session's ``GuardState`` across processes.

    Build it from a client (``RedisStore(redis.asyncio.Redis(...))``) or a URL (``RedisStore.from_url``).
    The client's own timeouts and retries apply; ``from_url`` sets short ones so that a dead Redis fails
    fast. Use one store per event loop (as with the redis-py client it wraps).

    Args:
        client: a ``redis.asyncio.Redis``; either ``decode_responses`` setting works.
        prefix: prepended to every key (``"repeat-hooks:"``).
        ttl: seconds the state lives after its last write; every write sets it again.
        max_attempts: compare-and-set attempts per update before ``StoreContention``.
        cache_size: sessions whose last seen state is kept for one-round-trip updates; ``0`` turns it off.

    Raises:
        ValueError: ``ttl`` is not positive, ``max_attempts`` is below 1 or ``cache_size`` is negative.
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float = DEFAULT_TTL,
        max_attempts: int = 64,
        cache_size: int = 1024,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive (seconds), got {ttl!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if cache_size < 0:
            raise ValueError(f"cache_size must be 0 or more, got {cache_size}")
        self.client = client
        self.prefix = prefix
        self.ttl = ttl
        self.max_attempts = max_attempts
        self.cache_size = cache_size
        self.conflicts = 0
        """Compare-and-set attempts lost to another writer, since this store was made (for monitoring)."""
        self._ttl_ms = max(1, round(ttl * 1000))
        self._script = client.register_script(_COMPARE_AND_SET)
        self._cache: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._locks: weakref.WeakValueDictionary[tuple[asyncio.AbstractEventLoop, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._owns_client = False

    @classmethod
    def from_url(
        cls,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float = DEFAULT_TTL,
        max_attempts: int = 64,
        cache_size: int = 1024,
        timeout: float = 1.0,
        **client_options: Any,
    ) -> RedisStore:
        """A store with its own client for ``url`` (``redis://``, ``rediss://`` or ``unix://``).

        ``timeout`` bounds connecting and each reply, in seconds; a lost connection is retried once.
        ``client_options`` go to ``redis.asyncio.Redis.from_url`` and override these defaults. The client
        is closed by ``aclose()``. Returns the store; connects lazily (nothing is sent yet).
        """
        options: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.1), retries=1),
        }
        options.update(client_options)
        client = Redis.from_url(url, **options)
        store = cls(client, prefix=prefix, ttl=ttl, max_attempts=max_attempts, cache_size=cache_size)
        store._owns_client = True
        return store

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        """Apply ``change`` to the state under ``key`` (a new ``GuardState`` if none), save it, return its result.

        Atomic across processes: the state is written only if nobody wrote it since it was read, else
        ``change`` runs again on the newer state (so it must depend on nothing but its argument). Each
        write sets the TTL. Uncontended: one round trip when this store wrote the session last, two
        otherwise. Updates of one key from one store are queued, not raced.

        Raises:
            StoreUnavailable: Redis is unreachable, timed out or answered an error, or the stored value
                is not a ``GuardState``. A write cut off by a timeout may still have happened.
            StoreContention: ``max_attempts`` attempts lost to other writers.
            Exception: whatever ``change`` raises, with nothing written.
        """
        name = self.prefix + key
        async with self._lock(name):
            known = self._cache.get(name)
            if known is not None:
                token, raw = known
            else:
                token, raw = await self._read(name)
            for attempt in range(self.max_attempts):
                state = self._parse(name, raw)
                result = change(state)
                new_raw = state.model_dump_json()
                new_token = secrets.token_hex(8)
                try:
                    reply = await self._script(keys=[name], args=[token, new_token, new_raw, self._ttl_ms])
                except RedisError as error:
                    self._cache.pop(name, None)
                    raise StoreUnavailable(f"Redis failed while updating {name!r}: {error}") from error
                if int(reply[0]) == 1:
                    self._remember(name, new_token, new_raw)
                    return result
                token = _text(reply[1]) if len(reply) > 1 else ""
                if token == new_token:  # our write landed; the client resent it after losing the reply
                    self._remember(name, new_token, new_raw)
                    return result
                raw = _text(reply[2]) if len(reply) > 2 else ""
                self.conflicts += 1
                if attempt >= 1:  # a second loss in a row: back off a little, with jitter
                    await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
            self._cache.pop(name, None)
            raise StoreContention(f"{name!r} changed under every one of {self.max_attempts} attempts to update it")

    async def load(self, key: str) -> GuardState | None:
        """The state under ``key``, or ``None`` if there is none (never written, or expired): one round trip.

        For reading (dashboards, tests), never for deciding: decide inside ``update``.

        Raises:
            StoreUnavailable: as for ``update``.
        """
        name = self.prefix + key
        token, raw = await self._read(name)
        return None if not token else self._parse(name, raw)

    async def aclose(self) -> None:
        """Close the client if ``from_url`` made it (a client passed in is the caller's to close)."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> RedisStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- helpers ---------------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        """The lock that queues this store's updates of ``name`` within the running event loop."""
        slot = (asyncio.get_running_loop(), name)
        lock = self._locks.get(slot)
        if lock is None:
            lock = self._locks[slot] = asyncio.Lock()
        return lock

    async def _read(self, name: str) -> tuple[str, str]:
        """The stored ``(token, state JSON)`` of ``name``; ``("", "")`` if nothing is stored."""
        try:
            token, raw = await self.client.hmget(name, ["t", "s"])  # type: ignore[misc]
        except RedisError as error:
            self._cache.pop(name, None)
            raise StoreUnavailable(f"Redis failed while reading {name!r}: {error}") from error
        if not token:
            self._cache.pop(name, None)
            return "", ""
        token, raw = _text(token), _text(raw)
        self._remember(name, token, raw)
        return token, raw

    def _parse(self, name: str, raw: str) -> GuardState:
        if not raw:
            return GuardState()
        try:
            return GuardState.model_validate_json(raw)
        except ValidationError as error:
            self._cache.pop(name, None)
            raise StoreUnavailable(f"{name!r} does not hold a valid GuardState: {error}") from error

    def _remember(self, name: str, token: str, raw: str) -> None:
        if self.cache_size == 0:
            return
        cache = self._cache
        cache[name] = (token, raw)
        cache.move_to_end(name)
        if len(cache) > self.cache_size:
            cache.popitem(last=False)


def _text(value: Any) -> str:
    """A reply as ``str``, whatever the client's ``decode_responses``; ``None`` as ``""``."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
