"""``RedisStore``: a session's ``GuardState`` in Redis, shared by every process that serves the session.

Install the extra: ``pip install 'repeat-hooks[redis]'`` (redis-py, asyncio API).

How an update stays atomic: each session is one Redis hash, ``{t: token, s: state JSON}``, where ``t`` is
a random token replaced on every write. ``update`` runs ``change`` on the state it knows, then a Lua
script writes the result only if the stored token is still the one that state came with
(compare-and-set), and sets the TTL in the same step. On a conflict the script answers with the current
token and state, so the retry needs no extra read. The store remembers the last token and state it
wrote per session (a small LRU), so a process that keeps serving a session decides in **one** round
trip. A session not seen before takes **two** (a read, then the write), and so does one that other
processes write too: once the store has seen someone else's write to a session, it reads before
deciding, rather than decide on a state that is likely stale (until a read shows nobody else wrote).

Under contention, optimism wastes work: every lost attempt parses, decides and serializes for nothing,
and an unlucky writer could lose forever. So an update that loses ``LEASE_AFTER`` times in a row, or
meets a lease, takes the session's **lease** instead: a script grants it to one writer at a time (with
the current state) and holds off the others' writes until that writer's compare-and-set releases it,
or ``LEASE_MS`` passes if the writer died. Waiters poll with a tiny request and compute nothing until
it is their turn. ``change`` may still run more than once, which the ``StateStore`` protocol allows: it
must depend only on its argument.

Within one process, updates of a session that arrive while a write of it is in flight are queued and
written together by the next write, in the order they came (a group commit): ten parallel tool calls
of a session cost one or two round trips, not ten, and never race each other.

Needs Redis >= 5 (the scripts read the server's clock before writing). Works against one server, a Redis
Cluster (each session is one hash key, so one slot: every update stays on one node) and a Sentinel-managed
primary; ``RedisStore.from_url`` says how each is reached.

Failures: an unreachable, timed-out or erroring Redis raises ``StoreUnavailable`` (whatever the client
raised: a bug inside redis-py too, never a bare ``TypeError``); a session too
contended to update (``max_attempts`` lost compare-and-sets, or ``max_wait`` seconds waiting for
leases) raises ``StoreContention``, a ``StoreUnavailable``. The adapters decide what a failed decision
means (fail open or fail closed); the store never guesses.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar, cast
from urllib.parse import unquote, urlsplit

try:
    from redis.asyncio import Redis, RedisCluster
    from redis.asyncio.cluster import ClusterNode
    from redis.asyncio.connection import SSLConnection, parse_url
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel
    from redis.backoff import ExponentialBackoff, NoBackoff
    from redis.exceptions import AskError, NoScriptError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "repeat_hooks.stores.redis needs redis-py (>= 5.0): install it with pip install 'repeat-hooks[redis]'"
    ) from error


from .. import observe
from ..errors import GuardSetupError, StateCorrupt, StoreContention, StoreUnavailable
from ..observation import Observation
from ..state import GuardState, load_state

__all__ = ["DEFAULT_PREFIX", "DEFAULT_TTL", "RedisStore", "StateCorrupt", "StoreContention", "StoreUnavailable"]

T = TypeVar("T")
Client: TypeAlias = "Redis | RedisCluster"
"""What the store talks through: a ``redis.asyncio.Redis`` (one server, or a Sentinel's ``master_for``) or a
``redis.asyncio.RedisCluster``."""
_Waiting = tuple[Callable[[GuardState], Any], "asyncio.Future[Any]"]
"""A queued update: its change, and the future its caller awaits."""

DEFAULT_PREFIX = "repeat-hooks:"
"""Prepended to every session key."""
DEFAULT_TTL = 86400.0
"""Seconds a session's state lives after its last write (one day)."""

LEASE_AFTER = 2
"""Compare-and-sets an update may lose in a row before it asks for the session's lease."""
LEASE_MS = 500
"""The longest a lease holds off other writers, in milliseconds (if its holder died, say)."""
LEASE_POLL = 0.001
"""Seconds (at most; at least half) between two requests for a lease another writer holds."""
LATE = 0.05
"""Seconds past its due time after which a timeout counts as late: the event loop was busy elsewhere when it
was due (a CPU-bound handler, a blocking call), so Redis may well have answered in time."""
LATE_RETRIES = 2
"""Late timeouts a request may meet before ``StoreUnavailable``: each one asks again (safe: see ``_ask``)."""
SENTINEL_PORT = 26379
"""A Sentinel's port when a ``redis+sentinel://`` URL names none."""
_HOST = re.compile(r"(?P<address>\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::(?P<port>[0-9]{1,5}))?")
"""One Sentinel of a URL: a name, an IPv4 address or a bracketed IPv6 one, and maybe a port."""

RECENT_TOKENS = 8
"""Write tokens the hash keeps (its current one first), so that a write asked again after its reply was lost (a
dropped connection, a late timeout) is found to have landed even when others wrote after it."""

# Both scripts work on KEYS[1], the session's hash: {t: token, s: state JSON, r: the last RECENT_TOKENS write
# tokens, comma-separated, l: lease owner, x: lease expiry in ms of the server's clock}. A lease whose expiry has
# passed counts as no lease.
_PREAMBLE = """
if redis.replicate_commands then redis.replicate_commands() end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local current = redis.call('HMGET', KEYS[1], 't', 's', 'l', 'x', 'r')
local lease = current[3]
if lease and tonumber(current[4]) <= ms then lease = false end
"""
# ARGV: the token the state came with ('' = none stored), a new token, the new state JSON, TTL ms, the
# caller's lease owner id ('' = none). Answers {1}: written, TTL set, any lease released. {3}: this very write
# (its new token) landed already: nothing written again. {0, token, state}: the token changed (a conflict): the
# current token and state, to retry from. {2}: another writer holds the lease: nothing written.
_COMPARE_AND_SET = (
    _PREAMBLE
    + """
local recent = current[5] or ''
if string.find(',' .. recent .. ',', ',' .. ARGV[2] .. ',', 1, true) then return {3} end
if lease and lease ~= ARGV[5] then return {2} end
local token = current[1] or ''
if token ~= ARGV[1] then return {0, token, current[2] or ''} end
local kept = ARGV[2]
local n = 1
for old in string.gmatch(recent, '[^,]+') do
  if n >= """
    + str(RECENT_TOKENS)
    + """ then break end
  kept = kept .. ',' .. old
  n = n + 1
end
redis.call('HSET', KEYS[1], 't', ARGV[2], 's', ARGV[3], 'r', kept)
if current[3] then redis.call('HDEL', KEYS[1], 'l', 'x') end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1}
"""
)
# ARGV: the caller's lease owner id, lease ms, TTL ms. Answers {1, token, state}: the caller holds the
# lease now, and this is the state to decide on. {2}: another writer holds it.
_TAKE_LEASE = (
    _PREAMBLE
    + """
if lease and lease ~= ARGV[1] then return {2} end
redis.call('HSET', KEYS[1], 'l', ARGV[1], 'x', ms + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, current[1] or '', current[2] or ''}
"""
)
_SHA = {script: hashlib.sha1(script.encode()).hexdigest() for script in (_COMPARE_AND_SET, _TAKE_LEASE)}


class RedisStore:
    """A ``StateStore`` in Redis: atomic read-modify-write of one session's ``GuardState`` across processes.

    Build it from a URL (``RedisStore.from_url``: one server, a cluster or a Sentinel) or from a client: a
    ``redis.asyncio.Redis`` (one server, or ``Sentinel(...).master_for(...)``) or a
    ``redis.asyncio.RedisCluster``. A given client's own timeouts and retries apply; ``from_url`` sets short
    ones so that a dead Redis fails fast. A redis-py asyncio client works on the event loop it first ran on
    only: a store built by ``from_url`` makes a client per event loop (so one store serves an adapter's async
    hooks on the application's loop and its sync hooks on the guard's own); a store given a client refuses,
    with a ``GuardSetupError``, to use it on a second loop.

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster``; either ``decode_responses`` setting works.
        prefix: prepended to every key (``"repeat-hooks:"``).
        ttl: seconds the state lives after its last write; every write sets it again.
        max_attempts: compare-and-sets an update may lose before ``StoreContention``.
        max_wait: seconds an update may wait for other writers' leases before ``StoreContention``.
        cache_size: sessions whose last seen state is kept for one-round-trip updates; ``0`` turns it off.

    Raises:
        ValueError: ``ttl`` or ``max_wait`` is not positive, ``max_attempts`` is below 1 or ``cache_size``
            is negative.
        GuardSetupError: ``client`` is not a redis-py asyncio client (a ``redis.Redis``, say).
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float = DEFAULT_TTL,
        max_attempts: int = 16,
        max_wait: float = 5.0,
        cache_size: int = 1024,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive (seconds), got {ttl!r}")
        if not max_wait > 0:
            raise ValueError(f"max_wait must be positive (seconds), got {max_wait!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if cache_size < 0:
            raise ValueError(f"cache_size must be 0 or more, got {cache_size}")
        if not isinstance(client, (Redis, RedisCluster)):
            raise GuardSetupError(
                f"RedisStore needs a redis.asyncio client (redis.asyncio.Redis or RedisCluster), got "
                f"{type(client).__module__}.{type(client).__qualname__}: build it with redis.asyncio.Redis(...), "
                "or use RedisStore.from_url(url)"
            )
        self._client: Client = client
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = weakref.WeakKeyDictionary()
        """The client of each event loop that used this store (the given client: the first loop only)."""
        self._make: Callable[[], Client] | None = None
        """``from_url``: makes the client of another event loop."""
        self._make_cluster: Callable[[], Client] | None = None
        """``from_url`` of a ``redis://`` URL: makes a cluster client, once a node answered ``MOVED``."""
        self._retired: list[tuple[asyncio.AbstractEventLoop | None, Client]] = []
        """Clients replaced by cluster clients, still to close (``aclose``)."""
        self._nodes: list[tuple[str, int]] = []
        """The cluster's node addresses, once a cluster client of ``from_url`` read them."""
        self._companions: weakref.WeakKeyDictionary[Client, list[Redis]] = weakref.WeakKeyDictionary()
        """The clients a ``from_url`` client needs closed with it (a Sentinel primary's: the Sentinels')."""
        self._first = False
        """Whether the first client was handed to a loop yet."""
        self._lock = threading.Lock()
        self.prefix = prefix
        self.ttl = ttl
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.cache_size = cache_size
        self.conflicts = 0
        """Compare-and-sets lost to another writer since this store was made (for monitoring and tests)."""
        self.leases = 0
        """Leases this store took because a session was contended (for monitoring and tests)."""
        self.late_timeouts = 0
        """Requests asked again after a late timeout (a busy event loop, not a slow Redis; for monitoring)."""
        self._timeout = _socket_timeout(client)
        self._ttl_ms = max(1, round(ttl * 1000))
        self._loaded: set[str] = set()
        self._cache: OrderedDict[str, tuple[str, str, bool]] = OrderedDict()
        """Per session: the token and state JSON last seen, and whether others write it too (``shared``)."""
        self._queues: dict[tuple[asyncio.AbstractEventLoop, str], list[_Waiting]] = {}
        self._writers: set[asyncio.Task[None]] = set()
        self._owns_client = False

    @classmethod
    def from_url(
        cls,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float = DEFAULT_TTL,
        max_attempts: int = 16,
        max_wait: float = 5.0,
        cache_size: int = 1024,
        timeout: float = 1.0,
        **client_options: Any,
    ) -> RedisStore:
        """A store with its own clients for ``url``. Connects lazily (nothing is sent yet); ``aclose()`` closes them.

        - ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or ``unix://path``: one server, or
          one node of a **Redis Cluster**: the first ``MOVED`` reply turns the store into a cluster client
          (``redis.asyncio.RedisCluster``, which finds the other nodes from this one) and the request goes on
          there, so any node's address will do (one that answers when the store starts).
        - ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]`` (``rediss+sentinel://``
          for TLS): the primary that these **Sentinels** name for ``service`` (port 26379 when none is given),
          found again after a failover. The credentials and TLS are the primary's; Sentinels that need their own
          go in ``client_options["sentinel_kwargs"]``.

        ``timeout`` bounds connecting and each reply, in seconds. A timeout that fires on time means Redis did
        not answer: ``StoreUnavailable`` after ``timeout`` seconds, never retried. A timeout that fires late
        (more than ``LATE`` past due: the event loop was busy elsewhere, so the reply may have been waiting)
        asks again, up to ``LATE_RETRIES`` times, so a CPU-bound worker with a healthy Redis does not fail
        open or refuse wrongly. A connection found closed (Redis restarted, an idle connection dropped) is
        retried once, at once, on a new connection; a cluster client retries nothing inside a request and reads
        the cluster's layout again at the next one (a failover), and a Sentinel URL's Sentinels are asked once
        each. Each round trip has its own ``timeout``: an update makes one, or two for a session this store has
        not written lately.
        ``client_options`` go to redis-py's ``from_url`` (or ``Sentinel``) and override these defaults.

        Raises:
            ValueError: a Sentinel URL that names no Sentinel or no service, or has a query string.
        """
        options: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            # Retry a closed connection, never a timeout: a retried timeout doubles every hook call's wait.
            "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), retries=1, supported_errors=(RedisConnectionError,)),
        }
        options.update(client_options)
        scheme = url.partition("://")[0].lower()
        make_cluster: Callable[[], Client] | None = None
        companions: weakref.WeakKeyDictionary[Client, list[Redis]] = weakref.WeakKeyDictionary()
        if scheme in ("redis+sentinel", "rediss+sentinel"):
            make = _sentinel(url, options, companions)
        else:

            def make() -> Client:
                return Redis.from_url(url, **options)

            if scheme in ("redis", "rediss"):
                # No retry inside the cluster client: it would retry a timeout too. After a failure it reads the
                # cluster's layout again at the next request (a failover costs the request it met).
                cluster_options = {**options, "retry": Retry(NoBackoff(), retries=0)}

                def make_cluster() -> Client:
                    if not store._nodes:
                        return RedisCluster.from_url(url, **cluster_options)
                    # Another loop's client: from every node the first one found (the URL's may be gone since),
                    # with the URL's credentials and TLS.
                    given = {**parse_url(url), **cluster_options}
                    del given["host"], given["port"]
                    if given.pop("connection_class", None) is SSLConnection:
                        given["ssl"] = True
                    nodes = [ClusterNode(host, port) for host, port in store._nodes]
                    return RedisCluster(startup_nodes=nodes, **given)

        store = cls(make(), prefix=prefix, ttl=ttl, max_attempts=max_attempts, max_wait=max_wait, cache_size=cache_size)
        store._owns_client = True
        store._companions = companions
        store._make = make
        store._make_cluster = make_cluster
        store._timeout = options["socket_timeout"]
        return store

    @property
    def client(self) -> Client:
        """The redis-py client of the running event loop: the one given (or ``from_url``'s first) on the first loop
        that uses the store, then with ``from_url`` a new one per loop; outside any loop, the first one. A
        ``from_url`` store that found a cluster hands out cluster clients from then on.

        Raises:
            GuardSetupError: a given client, on any loop but its first (a redis.asyncio client's connections belong
                to the loop that opened them: on another they fail, even once the first loop is closed).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._client
        client = self._clients.get(loop)
        if client is not None:
            return client
        with self._lock:  # the application's loop and the guard's own may both ask first
            client = self._clients.get(loop)
            if client is None:
                if not self._clients and not self._first:
                    client, self._first = self._client, True
                elif self._make is not None:
                    client = self._make()
                else:
                    raise GuardSetupError(
                        "this RedisStore's client already ran on another event loop, and a redis.asyncio client works "
                        "on its first loop only (a sync hook's calls run on the guard's own loop): build the store "
                        "with RedisStore.from_url(...), which makes a client per loop, or give each loop a store"
                    )
                self._clients[loop] = client
        return client

    def _become_cluster(self) -> None:
        """A node answered ``MOVED``: from now on every loop gets a cluster client (``from_url``).

        The clients made so far are closed by ``aclose``; a loop whose client already is a cluster client
        (another request switched first) keeps it.
        """
        assert self._make_cluster is not None
        with self._lock:
            if self._make is self._make_cluster:
                return
            self._make = self._make_cluster
            self._retired += [(loop, client) for loop, client in self._clients.items()]
            if not self._clients:
                self._retired.append((None, self._client))
            self._clients.clear()
            self._client = self._make()
            self._first = False

    async def update(self, key: str, change: Callable[[GuardState], T]) -> T:
        """Apply ``change`` to the state under ``key`` (a new ``GuardState`` if none), save it, return its result.

        Atomic across processes: the state is written only if nobody wrote it since it was read, else
        ``change`` runs again on the newer state (so it must depend on nothing but its argument); a
        contended session is taken by lease (see the module doc). Each write sets the TTL. Uncontended:
        one round trip when this store alone has been writing the session, two otherwise (at most three
        after Redis restarted, to teach it the script again). Updates of one session made
        through one store while a write is in flight are queued and written together, in order, by the
        next write (a group commit), so parallel tool calls of a session cost one round trip, not N.

        Raises:
            StoreUnavailable: Redis is unreachable, timed out or answered an error, or the stored value
                is not a ``GuardState`` (``StateCorrupt``: not one, or not UTF-8 text, as ``load_state``
                refuses it). A write cut off by a timeout may still have happened.
            StoreContention: other writers kept the session busy past ``max_attempts`` or ``max_wait``.
            Exception: whatever ``change`` raises, with nothing written.
        """
        name = self.prefix + key
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        slot = (loop, name)
        queue = self._queues.get(slot)
        if queue is None:  # nobody is writing this session from this store: start a writer
            queue = self._queues[slot] = []
            writer = loop.create_task(self._drain(slot, queue))
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        queue.append((change, future))
        return cast(T, await future)

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
        """Close the clients ``from_url`` made (a client passed in is the caller's to close): this loop's here,
        a live loop's on that loop; one whose loop is closed went with it (its connections cannot be closed from
        another loop)."""
        if not self._owns_client:
            return
        running = asyncio.get_running_loop()
        with self._lock:
            clients = list(self._clients.items()) or [(running, self._client)]
            clients += [(running if loop is None else loop, client) for loop, client in self._retired]
            self._clients.clear()
            self._retired.clear()
            self._first = False
        for loop, client in clients:
            if loop is running:
                await self._close(client)
            elif loop.is_running():
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close(client), loop))

    async def _close(self, client: Client) -> None:
        """Close ``client`` and what it needs closed with it (a Sentinel primary's Sentinels), on its own loop."""
        await client.aclose()
        for companion in self._companions.pop(client, ()):
            await companion.aclose()

    async def __aenter__(self) -> RedisStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- helpers ---------------------------------------------------------------------------------

    async def _drain(self, slot: tuple[asyncio.AbstractEventLoop, str], queue: list[_Waiting]) -> None:
        """The one writer of a session for this store and loop: commits what is queued, batch after batch.

        Updates queued while a batch is in flight form the next batch (a group commit), applied in the
        order they came. Stops when the queue is empty; never leaves a caller waiting.
        """
        name = slot[1]
        batch: list[_Waiting] = []
        try:
            while queue:
                batch = [waiting for waiting in queue if not waiting[1].done()]  # skip cancelled callers
                queue.clear()
                if batch:
                    await self._commit(name, batch)
        except BaseException as error:  # cancelled (the loop is closing), or a bug: fail the waiters
            for _, future in [*batch, *queue]:
                if not future.done():
                    if isinstance(error, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(error)
            raise
        finally:
            del self._queues[slot]

    async def _commit(self, name: str, batch: list[_Waiting]) -> None:
        """Apply ``batch``'s changes in order, in one atomic write; settle each caller's future."""
        changes = [change for change, _ in batch]
        try:
            outcomes = await self._write(name, changes)
        except Exception as error:  # StoreUnavailable, StoreContention: every caller of the batch gets it
            outcomes = [(False, error)] * len(batch)
        for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    async def _write(self, name: str, changes: list[Callable[[GuardState], Any]]) -> list[tuple[bool, Any]]:
        """The optimistic loop, then the lease: write ``changes``' state; return each change's outcome.

        An outcome is ``(True, result)`` or ``(False, exception)``. Raises ``StoreUnavailable`` or
        ``StoreContention`` when nothing could be written.
        """
        known = self._cache.get(name)
        if known is not None and not known[2]:  # we wrote it last, and nobody else has lately: trust it
            token, raw, shared = known
        else:  # read first: deciding on a state that is likely stale would be wasted work
            token, raw = await self._read(name)
            shared = known is not None and known[0] != token
        owner = ""  # the lease owner id, once this update asks for the lease
        deadline = 0.0
        losses = 0
        for _ in range(self.max_attempts):
            if owner:  # wait for our turn: ask for the lease until we hold it, then decide once
                token, raw = await self._take_lease(name, owner, deadline)
            new_raw, outcomes, heard = self._apply(name, raw, changes)
            if new_raw is None:  # every change raised: nothing to write
                return outcomes
            new_token = secrets.token_hex(8)
            reply = await self._script(_COMPARE_AND_SET, name, token, new_token, new_raw, self._ttl_ms, owner)
            code = int(reply[0])
            if code in (1, 3):  # written; or (3) written already, and this was that write asked again
                self._remember(name, new_token, new_raw, shared or code == 3)
                observe.tell_all(heard)  # what the committed attempt decided; a lost attempt's is dropped
                return outcomes
            if code == 0:
                token, raw = self._pair(name, reply[1], reply[2])
                self.conflicts += 1
                shared = True
                losses += 1
            if not owner and (code == 2 or losses >= LEASE_AFTER):
                owner = secrets.token_hex(8)
                deadline = asyncio.get_running_loop().time() + self.max_wait
        self._cache.pop(name, None)
        raise StoreContention(f"{name!r}: lost {self.max_attempts} compare-and-sets to other writers")

    def _apply(
        self, name: str, raw: str, changes: list[Callable[[GuardState], Any]]
    ) -> tuple[str | None, list[tuple[bool, Any]], list[Observation]]:
        """Run ``changes`` in order on the state in ``raw``; return the new state JSON, the outcomes, and what
        observers are to hear once the state is written (the state listens while the changes run: an attempt
        that loses its compare-and-set is not heard).

        A change that raises is left out (its outcome is the exception) and the others run again from
        ``raw``, so its half-made changes are not written. The JSON is ``None`` if every change raised.
        """
        failed: dict[int, Exception] = {}
        while True:
            state = self._parse(name, raw)
            if observe.OBSERVERS:
                state.listen()
            outcomes: list[tuple[bool, Any]] = []
            for index, change in enumerate(changes):
                if index in failed:
                    outcomes.append((False, failed[index]))
                    continue
                try:
                    outcomes.append((True, change(state)))
                except Exception as error:
                    failed[index] = error
                    break
            else:
                heard = state.heard()
                return (None if len(failed) == len(changes) else state.model_dump_json()), outcomes, heard

    async def _take_lease(self, name: str, owner: str, deadline: float) -> tuple[str, str]:
        """Ask for the lease of ``name`` until ``owner`` holds it; return the state to decide on.

        Raises ``StoreContention`` once the loop's clock passes ``deadline``.
        """
        loop = asyncio.get_running_loop()
        while True:
            reply = await self._script(_TAKE_LEASE, name, owner, LEASE_MS, self._ttl_ms)
            if int(reply[0]) == 1:
                self.leases += 1
                return self._pair(name, reply[1], reply[2])
            if loop.time() >= deadline:
                self._cache.pop(name, None)
                raise StoreContention(f"{name!r}: other writers held it for {self.max_wait} s")
            await asyncio.sleep(random.uniform(LEASE_POLL / 2, LEASE_POLL))

    async def _script(self, script: str, name: str, *args: str | int) -> list[Any]:
        """Run ``script`` on key ``name``: by its SHA once the server knows it, else by its text (which
        teaches it), so a new store or a restarted server costs no extra round trip. Returns the reply.

        Raises ``StoreUnavailable`` for any failure of the client (see ``_ask``).
        """
        sha = _SHA[script]

        async def run(client: Client) -> list[Any]:
            if sha in self._loaded:
                try:
                    return list(await client.evalsha(sha, 1, name, *args))
                except NoScriptError:  # the server restarted or flushed its scripts (or a node never ran it)
                    self._loaded.discard(sha)
            reply = list(await client.eval(script, 1, name, *args))
            self._loaded.add(sha)
            return reply

        return await self._ask(name, "updating", run)

    async def _read(self, name: str) -> tuple[str, str]:
        """The stored ``(token, state JSON)`` of ``name``; ``("", "")`` if nothing is stored."""

        async def read(client: Client) -> list[Any]:
            return list(await client.hmget(name, ["t", "s"]))

        token, raw = await self._ask(name, "reading", read)
        if not token:
            self._cache.pop(name, None)
            return "", ""
        return self._pair(name, token, raw)

    async def _ask(self, name: str, doing: str, request: Callable[[Client], Awaitable[T]]) -> T:
        """``request`` through this loop's client, turning every failure of the client into ``StoreUnavailable``.

        Asked again (each request here is safe to repeat: a read, a lease asked by the same owner, a
        compare-and-set, which answers that it landed already if it did): after a late timeout, up to
        ``LATE_RETRIES`` times; and once after a ``MOVED`` reply of a ``from_url`` store, which becomes a
        cluster client. A timeout is late when the event loop was busy when it was due: a marker timer set to
        fire at the same moment fired more than ``LATE`` seconds after it. ``name`` is forgotten from the cache
        on any failure.
        """
        client = self.client  # outside the try: a GuardSetupError is the caller's mistake, not an outage
        loop = asyncio.get_running_loop()
        late = 0
        while True:
            due = loop.time() + (self._timeout or 0.0)
            fired: list[float] = []
            marker = loop.call_at(due, _stamp, fired, loop) if self._timeout is not None else None
            try:
                if isinstance(client, RedisCluster):
                    # Read the cluster's layout first, once (again after a failure), under the client's lock: the
                    # concurrent first commands of a cold cluster client break inside redis-py (a closed transport).
                    await client.initialize()
                    self._learn_nodes(client)
                return await request(client)
            except UnicodeDecodeError as error:  # a client that decodes replies (decode_responses=True)
                self._cache.pop(name, None)
                raise _not_text(name, error) from error
            except AskError as error:  # MOVED or ASK: a cluster node, reached by a client for one server
                self._cache.pop(name, None)
                if self._make_cluster is not None and not isinstance(client, RedisCluster):
                    self._become_cluster()
                    client = self.client
                    continue
                fix = (
                    "the cluster kept moving the slot"
                    if isinstance(client, RedisCluster)
                    else "a Redis Cluster node: pass a redis.asyncio.RedisCluster client, or use "
                    "RedisStore.from_url(url), which finds the cluster"
                )
                raise StoreUnavailable(
                    f"Redis failed while {doing} {name!r}: {type(error).__name__} {error} ({fix})"
                ) from error
            except RedisTimeoutError as error:
                self._cache.pop(name, None)
                if fired and fired[0] - due > LATE and late < LATE_RETRIES:
                    late += 1
                    self.late_timeouts += 1
                    continue
                raise StoreUnavailable(f"Redis failed while {doing} {name!r}: {_named(error)}") from error
            except Exception as error:  # a connection or server error, or a bug in the client: an outage all the same
                self._cache.pop(name, None)
                raise StoreUnavailable(f"Redis failed while {doing} {name!r}: {_named(error)}") from error
            finally:
                if marker is not None:
                    marker.cancel()

    def _learn_nodes(self, client: RedisCluster) -> None:
        """Keep the addresses of ``client``'s cluster nodes, so that the cluster clients made for other event loops
        start from all of them, not from the URL's node alone (which may be down by then)."""
        if self._make_cluster is not None and not self._nodes:
            self._nodes = [(node.host, int(node.port)) for node in client.get_nodes()]

    def _pair(self, name: str, token: Any, raw: Any) -> tuple[str, str]:
        """A stored token and state as text; ``StateCorrupt`` (and ``name`` forgotten) for bytes that are not
        UTF-8."""
        try:
            return _text(token), _text(raw)
        except UnicodeDecodeError as error:
            self._cache.pop(name, None)
            raise _not_text(name, error) from error

    def _parse(self, name: str, raw: str) -> GuardState:
        if not raw:
            return GuardState()
        try:
            return load_state(raw)
        except StateCorrupt as error:
            self._cache.pop(name, None)
            raise StateCorrupt(f"{name!r}: {error}") from error

    def _remember(self, name: str, token: str, raw: str, shared: bool) -> None:
        """Keep what this store just wrote to ``name`` (and whether others write it too), in the LRU."""
        if self.cache_size == 0:
            return
        cache = self._cache
        cache[name] = (token, raw, shared)
        cache.move_to_end(name)
        if len(cache) > self.cache_size:
            cache.popitem(last=False)


def _stamp(times: list[float], loop: asyncio.AbstractEventLoop) -> None:
    """A marker timer's callback: when it really fired (late if the loop was busy when it was due)."""
    times.append(loop.time())


def _named(error: Exception) -> str:
    """An error as text that names its kind: a bare ``TypeError('...')`` from inside a client says what it is."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _socket_timeout(client: Client) -> float | None:
    """The reply timeout of ``client``'s connections, or ``None`` if it has none (or it cannot be found)."""
    kwargs = getattr(client, "connection_kwargs", None)  # RedisCluster
    if kwargs is None:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None


def _sentinel(
    url: str, options: dict[str, Any], companions: weakref.WeakKeyDictionary[Client, list[Redis]]
) -> Callable[[], Client]:
    """What makes a client of the primary named by a ``redis+sentinel://`` URL (see ``RedisStore.from_url``)."""
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(
            f"a Sentinel URL takes no query string ({parts.query or parts.fragment!r}): pass options as "
            "keywords of RedisStore.from_url (the Sentinels' own in sentinel_kwargs={...})"
        )
    credentials, _, hosts = parts.netloc.rpartition("@")
    sentinels = []
    for host in filter(None, hosts.split(",")):
        found = _HOST.fullmatch(host)
        if found is None:
            raise ValueError(f"{host!r} in the Sentinel URL {url!r} is not host[:port]")
        sentinels.append((found["address"].strip("[]"), int(found["port"] or SENTINEL_PORT)))
    path = [part for part in parts.path.split("/") if part]
    if not sentinels or not path or len(path) > 2:
        raise ValueError(
            f"{url!r} is not a Sentinel URL: redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]"
        )
    connection = dict(options)
    if credentials:
        user, colon, password = credentials.partition(":")
        connection.setdefault("username", unquote(user) or None)
        if colon:
            connection.setdefault("password", unquote(password))
    if len(path) == 2:
        try:
            connection.setdefault("db", int(path[1]))
        except ValueError:
            raise ValueError(f"the database in {url!r} is not a number: {path[1]!r}") from None
    if parts.scheme.lower().startswith("rediss"):
        connection.setdefault("ssl", True)
    sentinel_options = connection.pop("sentinel_kwargs", None)
    if sentinel_options is None:
        sentinel_options = {key: value for key, value in connection.items() if key.startswith("socket_")}
        sentinel_options["ssl"] = connection.get("ssl", False)
        # One try per Sentinel, each within the timeout (redis-py's default retries thrice, backing off): a hung or
        # refusing Sentinel costs one timeout, then the next one is asked.
        sentinel_options["retry"] = Retry(NoBackoff(), retries=0)
    service = unquote(path[0])

    def make() -> Client:
        sentinel = Sentinel(sentinels, sentinel_kwargs=sentinel_options, **connection)  # type: ignore[no-untyped-call]
        primary = cast(Redis, sentinel.master_for(service))
        companions[primary] = list(sentinel.sentinels)
        return primary

    return make


def _text(value: Any) -> str:
    """A reply as ``str``, whatever the client's ``decode_responses``; ``None`` as ``""``. Bytes that are not
    UTF-8 raise ``UnicodeDecodeError``, as a client that decodes replies raises it (``_not_text`` names it)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8")  # strictly: replaced characters would make a state the guard never wrote
    return str(value)


def _not_text(name: str, error: UnicodeDecodeError) -> StateCorrupt:
    """What a stored value that is not UTF-8 text raises: ``StateCorrupt``, as ``load_state`` refuses such
    bytes (the guard writes JSON text only; someone else wrote these)."""
    return StateCorrupt(
        f"{name!r}: the stored guard state is not UTF-8 text ({error.reason} at byte {error.start}); delete it "
        "to start this conversation's counts afresh"
    )
