"""``Batch``: one model response's calls as the guard decided them, until the SDK runs (or skips) each one.

An SDK that hands the guard a model response's calls at once, then fires a hook per call before and after it runs
(Strands, Google ADK, the OpenAI Agents SDK, Claude Code), needs to find each call's decision again, and to record
its outcome under the id its batch decided it by (``batch_call_ids``: a second use of one id in a response is told
apart by position). The SDK's per-call hook hands over its own object for the call, or a copy of it, or one a hook
of the user's replaced: it is found by that very object, else by its id, name and arguments, else by its id and
name, each decided call taken once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..call import ToolCall, batch_call_ids
from ..decision import Refusal

ANY: Any = object()
"""``arguments`` when the SDK's hook does not hand them over: only the id and the name match."""


@dataclass(eq=False)
class Decided:
    """One call of the current model response, from its batch decision to its outcome."""

    call: ToolCall
    """The call as its batch decided it (its id as ``batch_call_ids`` gave it): what to record its outcome as."""
    refusal: Refusal | None
    """Its decision: ``None``, it may run."""
    given: object = None
    """The SDK's own object for the call (its tool-use block, its tool context), matched by identity first."""
    tag: Any = None
    """Whatever else the adapter needs back for this call."""
    claimed: bool = False
    """Its pre-tool hook took the decision."""
    settled: bool = False
    """Its outcome was recorded (or it was withdrawn)."""
    model_id: str | None = None
    """The id the model gave it (``call.call_id`` may tell a reused id apart by position)."""
    outcome: Any = None
    """What to record for it once it is settled, for ``Batch.in_order`` (an adapter's own callable, or ``None``)."""


class Batch:
    """The decided calls of the current model response (a new response's replace them)."""

    def __init__(self) -> None:
        self.calls: list[Decided] = []
        self._ordered = 0  # how many of ``calls`` ``in_order`` handed out

    def decided(
        self,
        calls: Sequence[ToolCall],
        refusals: Sequence[Refusal | None],
        *,
        given: Sequence[object] = (),
        tags: Sequence[Any] = (),
    ) -> list[Decided]:
        """The response's ``calls`` (as the model gave them) with their ``refusals`` (``decide_tool_calls`` on the
        same calls), each under its batch id; ``given`` / ``tags`` per call, if any. Replaces the previous batch."""
        ids = batch_call_ids(calls)
        self.calls = [
            Decided(
                call if call.call_id == ident else replace(call, call_id=ident),
                refusal,
                given[index] if index < len(given) else None,
                tags[index] if index < len(tags) else None,
                model_id=call.call_id or None,
            )
            for index, (call, ident, refusal) in enumerate(zip(calls, ids, refusals, strict=True))
        ]
        self._ordered = 0
        return self.calls

    def add(self, call: ToolCall, refusal: Refusal | None, *, given: object = None, tag: Any = None) -> Decided:
        """A call decided on its own (not in the batch: a hook of the user's renamed it), claimed already."""
        entry = Decided(call, refusal, given, tag, claimed=True, model_id=call.call_id or None)
        self.calls.append(entry)
        return entry

    def find(self, name: str, call_id: str | None, arguments: Any = ANY, *, given: object = None) -> Decided | None:
        """The decided call an SDK's hook is about, taken or not (for a hook that only reads its decision)."""
        return self._find(name, call_id, arguments, given, lambda entry: True)

    def claim(self, name: str, call_id: str | None, arguments: Any = ANY, *, given: object = None) -> Decided | None:
        """The decision of the call a pre-tool hook fires for, taken once; ``None`` if the batch does not hold it.
        ``given`` (the SDK's object the hook fires with) becomes the entry's, so its post-tool hook finds it by it."""
        entry = self._find(name, call_id, arguments, given, lambda entry: not entry.claimed)
        if entry is not None:
            entry.claimed = True
            if given is not None:
                entry.given = given
        return entry

    def settle(
        self, name: str, call_id: str | None, arguments: Any = ANY, *, given: object = None, claimed: bool = True
    ) -> Decided | None:
        """The decided call a post-tool hook fires for (claimed first, unless ``claimed=False``), settled once;
        ``None`` if the batch does not hold it unsettled."""
        entry = self._find(
            name, call_id, arguments, given, lambda entry: entry.claimed >= claimed and not entry.settled
        )
        if entry is not None:
            entry.settled = True
        return entry

    def clear(self) -> None:
        """The response is over: nothing of it is pending."""
        self.calls, self._ordered = [], 0

    @property
    def over(self) -> bool:
        """Every call of the response is settled."""
        return all(entry.settled for entry in self.calls)

    def in_order(self, *, everything: bool = False) -> list[Any]:
        """The ``outcome``s to record now, in the response's order, for an SDK that runs a response's calls in
        parallel (they finish in any order, and the core's cycle rule reads the order): those of settled calls no
        unsettled call precedes, each once; ``everything``: the rest too (the response is over). ``None``s left out."""
        ready, calls = [], self.calls
        while self._ordered < len(calls) and (everything or calls[self._ordered].settled):
            ready += [] if calls[self._ordered].outcome is None else [calls[self._ordered].outcome]
            self._ordered += 1
        return ready

    def _find(self, name: str, call_id: str | None, arguments: Any, given: object, eligible: Any) -> Decided | None:
        calls = [entry for entry in self.calls if eligible(entry)]
        if given is not None:
            for entry in calls:
                if entry.given is given:
                    return entry
        ident = call_id or None
        matches = [entry for entry in calls if entry.call.name == name and entry.model_id == ident]
        if arguments is not ANY:
            exact = [entry for entry in matches if entry.call.arguments == arguments]
            if exact:
                return exact[0]
        return matches[0] if matches else None
