"""``GuardCore``: what every adapter's guard holds, written once.

An adapter's guard is its SDK's hook object (a plugin, a middleware, a hook provider...) built around one
``GuardCore``: the settings and the common keywords, checked once at construction; the one path from a hook to a
conversation's state (``update``: a store key or the SDK's own ``Slot``), with the outage policy and the observers
told after the commit; the per-request conversation and turn ids a caller gives (``request``); the tool-name
check; and the stop error the adapter raises with ``on_stop="raise"``.

The common keywords, the same in every adapter: ``policy`` (a ``Policy``, or its settings as keywords), ``store``
(a ``StateStore`` for the states, or ``None``: the SDK's own persistence), ``cost`` (a ``CostOf``), ``clock``
(a ``Clock``), ``is_failure`` (what the model reads -> ``True`` for a failed call), ``check_tools``, ``on_stop``
(``"reply"``: the stop message is the turn's answer; ``"raise"``: the run raises the adapter's
``GuardStopped``) and ``fail`` (``"open"``: a call or turn goes on when the state cannot be reached;
``"closed"``: it is refused or ended).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .. import observe
from ..call import as_text
from ..decision import Refusal, RefusalKind, Stop, StopReason
from ..errors import GuardSetupError
from ..messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from ..observation import Outage
from ..policy import Policy
from ..state import GuardState
from ..stop_rules import Feed, HookPoint
from ..stores import StateStore
from .clock import Clock, monotonic
from .setup import check_budgets, check_tool_names, policy_from
from .states import Slot
from .usage import CostOf

if TYPE_CHECKING:  # asyncio is loaded on first use: a hook command's process never needs it
    import asyncio

T = TypeVar("T")
OnStop = Literal["reply", "raise"]
"""What a stop does: ``"reply"``, the stop message is the turn's answer; ``"raise"``, the run raises."""
Fail = Literal["open", "closed"]
"""What the guard does when it cannot reach a conversation's state: ``"open"`` lets the call or the turn go on
(the error logged), ``"closed"`` refuses the call or ends the turn."""
FailureCheck = Callable[[Any], bool]
"""Says whether a call failed (``True``) from what the model reads of its result, beyond the SDK's own error."""
COMMON = ("policy", "store", "cost", "clock", "is_failure", "check_tools", "on_stop", "fail")
"""The keywords every adapter's guard takes, with the same values everywhere."""


def common(given: Mapping[str, Any]) -> dict[str, Any]:
    """The common keywords but ``policy`` out of a guard's parameters, as ``GuardCore`` takes them:
    ``GuardCore(policy, settings, owner=..., **common(locals()))`` at the top of the guard's ``__init__``."""
    return {name: given[name] for name in COMMON[1:]}


logger = logging.getLogger("repeat_hooks")


class GuardStopped(Exception):
    """The guard ended a run with ``on_stop="raise"`` (or one whose output cannot be its text): the base of every
    adapter's ``RepeatGuardStopped``. ``stop`` says why and what to tell the user."""

    def __init__(self, stop: Stop, *details: Any) -> None:
        super().__init__(f"repeat-hooks stopped the run ({stop.reason.value}): {stop.message}", *details)
        self.stop = stop
        """The guard's stop: ``reason`` (a ``StopReason``) and ``message`` (written for the user)."""
        self.message = stop.message
        """The stop's message."""

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.stop, *self.args[1:])

    @staticmethod
    def of(error: BaseException | None) -> Stop | None:
        """The stop of the ``GuardStopped`` that ``error`` is, or was raised from (an SDK that wraps what a hook
        raises chains it: ``__cause__``, ``__context__``); ``None`` if the guard raised none of it."""
        seen: set[int] = set()
        while error is not None and id(error) not in seen:
            if isinstance(error, GuardStopped):
                return error.stop
            seen.add(id(error))
            error = error.__cause__ or error.__context__
        return None


@dataclass(frozen=True)
class Request:
    """The conversation and turn a caller names for the runs in a ``request(...)`` block (``None``: not named)."""

    conversation_id: str | None = None
    turn_id: str | None = None


_REQUEST: ContextVar[Request | None] = ContextVar("repeat_hooks_request", default=None)
_NO_REQUEST = Request()


@contextlib.contextmanager
def request(*, conversation_id: str | None = None, turn_id: str | None = None) -> Iterator[Request]:
    """Within the block, the agent's runs serve conversation ``conversation_id`` and turn ``turn_id``: give the id
    of the request the user may retry (an idempotency key) as the turn id, and a retried request, in any process
    sharing the guard's store, continues that turn and its counts instead of starting one afresh. Every adapter
    reads it where its SDK names neither (see each adapter's README for its own spelling). A block inside another
    keeps what it does not name itself (``request(turn_id=...)`` inside ``request(conversation_id=...)``), but
    not the turn of another conversation (a turn id belongs to its conversation)."""
    outer, conversation = current_request(), _text(conversation_id)
    same = outer.conversation_id in (None, conversation) or conversation is None  # a turn is its conversation's
    token = _REQUEST.set(
        Request(conversation or outer.conversation_id, _text(turn_id) or (outer.turn_id if same else None))
    )
    try:
        yield _REQUEST.get() or _NO_REQUEST
    finally:
        _REQUEST.reset(token)


def current_request() -> Request:
    """The ``request(...)`` block this code runs in (empty fields outside any)."""
    return _REQUEST.get() or _NO_REQUEST


FEEDS: tuple[Feed, ...] = (Feed.OUTCOMES, Feed.MODEL_CALLS)
"""What every adapter feeds the guard: each call's outcome and each model call. One that also reads the model's
text answers feeds ``(*FEEDS, Feed.ANSWERS)`` (``GuardCore(feeds=...)``)."""


class GuardCore:
    """The settings, the state seam and the checks of one adapter's guard (see the module's docstring).

    ``owner`` names the adapter's guard in every message; ``feeds``: the figures the adapter always feeds
    (``Feed.OUTCOMES``, ``Feed.MODEL_CALLS``), with ``Feed.COST`` added for a ``cost`` and ``Feed.SECONDS`` for a
    ``clock``; ``why``: for a figure the SDK cannot feed, the SDK fact why (its guard's ``clock`` defaults to
    ``None``, and one given anyway raises); ``how``: the spelling that feeds a figure, where it is not the guard's
    keyword (a class variable, or the SDK's own budget besides);
    ``keywords``: the guard's keywords beyond ``COMMON``, suggested for a misspelt one (``stor`` -> ``store=``);
    ``error``: the adapter's ``GuardSetupError`` subclass, if its SDK must see one of its own. Every mistake raises
    at construction with the right spelling.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        settings: Mapping[str, Any] | None = None,
        *,
        owner: str,
        store: StateStore | None = None,
        cost: CostOf | None = None,
        clock: Clock | None = monotonic,
        is_failure: FailureCheck | None = None,
        check_tools: bool = True,
        on_stop: OnStop = "reply",
        fail: Fail = "open",
        feeds: Iterable[Feed] = FEEDS,
        why: Mapping[Feed, str] | None = None,
        how: Mapping[Feed, str] | None = None,
        spelling: str | None = None,
        keywords: Iterable[str] = (),
        error: type[GuardSetupError] = GuardSetupError,
    ) -> None:
        self.owner = owner
        self.error = error
        try:
            known = (*COMMON, *keywords)
            self.policy: Policy = policy_from(policy, settings, owner=owner, spelling=spelling, keywords=known)
        except GuardSetupError as mistake:
            raise error(str(mistake)) from None
        if Feed.SECONDS in (why or {}) and clock is not None:  # the adapter's default is then None
            raise error(f"{owner} cannot time model calls ({(why or {})[Feed.SECONDS]}): leave clock= unset")
        check_budgets(self.policy, owner=owner, cost=cost, clock=clock, feeds=feeds, why=why, how=how, error=error)
        _check_choice(owner, "on_stop", on_stop, ("reply", "raise"))
        _check_choice(owner, "fail", fail, ("open", "closed"))
        if type(check_tools) is not bool:
            raise TypeError(f"{owner}(check_tools=...) is True or False, not {check_tools!r}")
        if is_failure is not None and not callable(is_failure):
            raise TypeError(
                f"{owner}(is_failure=...) takes a function of what the model reads of a result, returning True for a "
                f"failed call; got {type(is_failure).__name__}"
            )
        if isinstance(store, type):
            raise TypeError(f"{owner}(store=...) takes a store, not the class: {owner}(store={store.__name__}(...))")
        if store is not None and not isinstance(store, StateStore):
            raise TypeError(
                f"{owner}(store=...) takes a repeat_hooks StateStore (MemoryStore, SQLiteStore, RedisStore), "
                f"not {type(store).__name__}"
            )
        self.store = store
        """Where the conversations' states live (``None``: in the SDK's own persistence)."""
        self.cost = cost
        self.clock = clock
        self.is_failure = is_failure
        self.check_tools = check_tools
        self.on_stop: OnStop = on_stop
        self.fail: Fail = fail
        points = self.policy.hook_points()
        self.records_outcomes = HookPoint.POST_TOOL_CALL in points
        """The policy needs each call's outcome (``post_tool_call``)."""
        self.records_model_calls = HookPoint.POST_LLM_CALL in points
        """The policy needs each model call counted (``post_llm_call``)."""
        self._checked: set[frozenset[str]] = set()
        self._is_failure_broke = False
        self._outages: OrderedDict[str, tuple[str | None, Stop]] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    # -- what the adapter's SDK reports ---------------------------------------------------------------------

    def ok(self, succeeded: bool, view: Any) -> bool:
        """Whether a call succeeded: the SDK says so and ``is_failure`` (of ``view``, what the model reads) does
        not say otherwise. An ``is_failure`` that raises (written for another shape of result, say) leaves the
        SDK's word standing: a success is no failure, so a broken check never ends a turn for "errors in a row".
        Logged with its traceback the first time, in one line after."""
        if not succeeded or self.is_failure is None:
            return succeeded
        try:
            return not self.is_failure(view)
        except Exception as error:
            first, self._is_failure_broke = not self._is_failure_broke, True
            logger.error(
                "repeat_hooks: %s's is_failure raised %s: %s on a %s result; the call counts as the SDK says "
                "(succeeded)",
                self.owner,
                type(error).__name__,
                error,
                type(view).__name__,
                exc_info=error if first else None,
            )
            return True

    def cost_of(self, usage: Any) -> float:
        """The US dollars of one model response's ``usage`` (0 without a ``cost``)."""
        return float(self.cost(usage)) if self.cost is not None else 0.0

    def check_tool_names(self, names: Iterable[str]) -> None:
        """Raise the adapter's ``GuardSetupError`` if the policy names a tool that is none of ``names``, the agent's
        tools (once per distinct set of names; never with ``check_tools=False``)."""
        if not self.check_tools:
            return
        known = frozenset(names)
        if known in self._checked:
            return
        check_tool_names(self.policy, known, owner=self.owner, error=self.error)
        if len(self._checked) < 64:
            self._checked.add(known)

    def scope(
        self, conversation_id: object = None, agent_name: object = None
    ) -> contextlib.AbstractContextManager[Any]:
        """``observe.scope(...)`` naming the conversation and the agent a hook call serves (as text; ``None`` or
        ``""`` names none), for the observers and the guard's log lines (each ends with
        ``[conversation=... agent=...]``): about a microsecond a hook call."""
        return observe.scope(conversation_id=_text(conversation_id), agent_name=_text(agent_name))

    def stopped(self, stop: Stop, error: type[GuardStopped], *details: Any) -> GuardStopped | None:
        """The error to raise for ``stop`` with ``on_stop="raise"``, or ``None`` (``"reply"``: answer with it)."""
        return error(stop, *details) if self.on_stop == "raise" else None

    # -- where the state lives ------------------------------------------------------------------------------

    def conversation_id(self, default: object = None) -> str | None:
        """The conversation the caller named (``request(conversation_id=...)``), else ``default`` as text, else
        ``None`` (for ``None`` or ``""``)."""
        return current_request().conversation_id or _text(default)

    @staticmethod
    def key(conversation: str | None, agent: object = None) -> str | None:
        """The store key of one guarded agent's state in ``conversation``: ``<conversation>/<agent>`` (the agent's
        name, as text), so that two guarded agents serving one conversation through one store (a router's two
        agents in one request) keep their counts apart; the conversation alone for an agent with no name (``None``
        or ``""``); ``None`` without a conversation. A conversation id with a ``/`` could meet another's key
        (``"a/b"``, and ``"a"`` with agent ``"b"``): name conversations without one, or agents apart."""
        if conversation is None:
            return None
        name = _text(agent)
        return conversation if name is None else f"{conversation}/{name}"

    def turn_id(self, default: object = None) -> str | None:
        """The turn the caller named (``request(turn_id=...)``), else ``default`` as text, else ``None``."""
        return current_request().turn_id or _text(default)

    @property
    def refused(self) -> Refusal | None:
        """A call's decision when its state cannot be reached: ``None`` (``fail="open"``) or a refusal."""
        if self.fail == "open":
            return None
        return Refusal(message=STORE_DOWN_REFUSAL, reason=RefusalKind.STORE_UNAVAILABLE)

    @property
    def ended(self) -> Stop | None:
        """A model call's decision when its state cannot be reached: ``None`` (``fail="open"``) or a stop."""
        if self.fail == "open":
            return None
        return Stop(message=STORE_DOWN_STOP, reason=StopReason.STORE_UNAVAILABLE)

    async def update(self, where: str | Slot, change: Callable[[GuardState], T], *, outage: T) -> T:
        """Apply ``change`` (the policy's verbs, synchronous) to one conversation's state and commit it: the store's
        atomic update under key ``where``, or the SDK's ``Slot``; then the observers hear what it decided.

        When the state cannot be reached (the store raised, a stored value is no guard state), the error is logged
        and observed (``Outage``) and ``outage`` returned: pass ``self.refused`` / ``self.ended`` for a decision,
        so ``fail`` decides. A ``GuardSetupError`` (a digest key other than the conversation's) is a mistake, not
        an outage: it is raised, as is any error ``change`` raises itself.
        """
        if isinstance(where, str):
            if self.store is None:
                raise self.error(f"{self.owner}: no store= to keep conversation {where!r} in")
            raising = _Raising(change)
            try:
                result: T = await self.store.update(where, raising)
            except _Raised as raised:
                raise raised.error from None
            except GuardSetupError:
                raise
            except Exception as failure:
                return self._outage(where, failure, outage)
            raising.tell()
            if self._outages:
                self._outages.pop(where, None)
            return result
        return self._in_slot(where, change, outage)

    def update_now(self, where: str | Slot, change: Callable[[GuardState], T], *, outage: T) -> T:
        """``update`` for a synchronous hook: a store with ``update_now`` (``MemoryStore``, ``SQLiteStore``) on this
        thread; an asynchronous-only store (``RedisStore``) on the guard's own event loop, in a thread of its own."""
        if not isinstance(where, str):
            return self._in_slot(where, change, outage)
        store = self.store
        direct = getattr(store, "update_now", None)
        if store is None or not callable(direct):
            return self._wait(self.update(where, change, outage=outage))
        raising = _Raising(change)
        try:
            result: T = direct(where, raising)
        except _Raised as raised:
            raise raised.error from None
        except GuardSetupError:
            raise
        except Exception as failure:
            return self._outage(where, failure, outage)
        raising.tell()
        if self._outages:
            self._outages.pop(where, None)
        return result

    def _in_slot(self, slot: Slot, change: Callable[[GuardState], T], outage: T) -> T:
        try:
            state = slot.read()
        except GuardSetupError:
            raise
        except Exception as failure:
            return self._outage(repr(slot), failure, outage)
        if not observe.OBSERVERS:
            result = change(state)
            slot.write(state)
            return result
        state.listen()
        try:
            result = change(state)
            slot.write(state)
        finally:
            heard = state.heard()
        observe.tell_all(heard)
        return result

    def _outage(self, where: str, failure: Exception, outage: T) -> T:
        """The state under ``where`` could not be reached: log it (with the conversation), tell the observers,
        and decide as ``fail`` says (``outage``)."""
        conversation = observe.current_scope().conversation_id or current_request().conversation_id
        with observe.scope(conversation_id=conversation):  # the line ends [conversation=...], as every line
            logger.error(
                "repeat_hooks: %s could not reach the state of %s: %s: %s; failing %s",
                self.owner,
                where,
                type(failure).__name__,
                failure,
                self.fail,
                exc_info=failure if logger.isEnabledFor(logging.DEBUG) else None,  # one line a call; the trace at DEBUG
            )
        if observe.OBSERVERS:
            observe.tell(Outage(where, f"{type(failure).__name__}: {failure}"[:500], self.fail, conversation))
        if isinstance(outage, Stop):  # a turn ended with no state to keep its stop in: kept here for stop_of
            self._outages[where] = (current_request().turn_id, outage)
            if len(self._outages) > 1024:
                self._outages.popitem(last=False)
        return outage

    async def stop_of(self, key: str, turn_id: str | None = None) -> Stop | None:
        """How the guard stopped the latest turn of the conversation under store key ``key`` (or turn ``turn_id``,
        while its stop is kept); ``None`` if it did not. A turn this process ended because the store failed
        (``fail="closed"``) reads as that stop, until the conversation's next update reaches the store; any other
        read while the store is down raises its error (the guard cannot know)."""
        down = self._outages.get(key)
        if down is not None and (turn_id is None or down[0] in (None, turn_id)):
            return down[1]
        if self.store is None:
            raise self.error(f"{self.owner}: no store= to read conversation {key!r} from")
        state = await self.store.load(key)
        return None if state is None else state.stop_of(turn_id)

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the guard's own event loop (started on first use, in a daemon thread) and wait for it."""
        import asyncio

        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name=f"repeat-hooks {self.owner}", daemon=True).start()
                self._loop = loop
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()


class _Raised(Exception):
    """What the change itself raised, carried out of the store so that it is not taken for the store's failure."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class _Raising:
    """``change``, its own errors wrapped in ``_Raised`` (a store may run it more than once: it stays the same).

    A store of ours listens to the state it hands ``change`` and tells the observers after its commit. A store
    that does not (one written to the bare ``StateStore`` protocol) hands over a state that is not listening:
    then this listens itself, and ``tell`` hands the observations of the last run on (the one the store kept)
    once the store's update has returned, i.e. committed."""

    __slots__ = ("change", "unheard")

    def __init__(self, change: Callable[[GuardState], Any]) -> None:
        self.change = change
        self.unheard: GuardState | None = None

    def __call__(self, state: GuardState) -> Any:
        self.unheard = None
        if observe.OBSERVERS and state.news is None:
            state.listen()
            self.unheard = state
        try:
            return self.change(state)
        except Exception as error:
            if self.unheard is not None:  # nothing is written: its observations go, and it listens no more
                self.unheard.heard()
                self.unheard = None
            raise _Raised(error) from error

    def tell(self) -> None:
        """After the store committed: the observations its own store did not hand on, if any."""
        if self.unheard is not None:
            observe.tell_all(self.unheard.heard())


def _check_choice(owner: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        spelled = " or ".join(repr(choice) for choice in choices)
        raise TypeError(f"{owner}({name}=...) is {spelled}, not {value!r}")


def _text(value: object) -> str | None:
    """An id as text (``42`` is ``"42"``, as the guard keeps every id: ``call.as_text``); ``None`` or ``""``: none."""
    if value is None or value == "":
        return None
    return value if type(value) is str and value.isascii() and len(value) <= 1000 else as_text(value)
