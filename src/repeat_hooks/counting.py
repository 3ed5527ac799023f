"""How the policy counts a turn's calls: the repeat rules, as small pure functions over a ``Turn``.

``Policy`` decides; these count. Each takes the policy (for its settings) and the turn it changes, and touches
nothing else: no clock, no I/O, no randomness.

- ``count`` counts a call of a key (from 1 again on ``restart``), keeping the sliding window and ``max_keys``;
- ``count_progress`` is ``count="progress"``: a call's count restarts when something that could change its
  result ran since its last run, and says which rule refuses it (repeat, same failure, rejected, duplicate
  write, no stable result);
- ``record_progress`` records a run's outcome: a new result restarts its own count, a change the others';
- ``cycle_period`` finds a cycle whose third pass a call would start; ``continue_cycle`` keeps it in the history
  once refused, so the calls that go on with it are refused too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .call import ToolCall
from .decision import RefusalKind
from .result import REJECTED_OUTCOME, UNKNOWN_OUTCOME, outcome_digest
from .state import Mark, Turn

if TYPE_CHECKING:
    from .policy import Policy


def is_read_only(policy: Policy, call: ToolCall) -> bool:
    """The call changes nothing: the SDK's hint, else the policy's ``read_only``."""
    return call.read_only if call.read_only is not None else call.name in policy.read_only


def writes_once(policy: Policy, call: ToolCall) -> bool:
    """The call acts on the world so that a repeat does it twice (destructive and not idempotent)."""
    if call.destructive is True and call.idempotent is False:
        return True
    return call.name in policy.destructive and call.read_only is not True and call.idempotent is not True


def count(policy: Policy, turn: Turn, key: str, restart: bool) -> int:
    """Count a call of ``key`` (from 1 again if ``restart``), keeping the window and ``max_keys``; its number."""
    counts = turn.counts
    previous = counts.pop(key, 0)
    window = policy.window
    if window is not None:
        recent = turn.recent
        if restart and previous:
            recent[:] = [k for k in recent if k != key]  # its earlier calls no longer count
        while len(recent) >= window:  # the window is the last ``window`` calls, this one included
            oldest = recent.pop(0)
            if oldest == key:
                previous -= 1
            else:
                decrement(turn, oldest)
        recent.append(key)
    number = 1 if restart else max(previous, 0) + 1
    counts[key] = number  # re-inserted: the most recently used key is last
    if len(counts) > policy.max_keys:
        oldest = next(iter(counts))
        del counts[oldest]
        turn.marks.pop(oldest, None)
        if window is not None:
            turn.recent[:] = [k for k in turn.recent if k != oldest]
    return number


def next_number(policy: Policy, turn: Turn, key: str) -> int:
    """The number ``count`` would give the next call of ``key``, nothing restarting it (pure: counts nothing)."""
    number = max(turn.counts.get(key, 0), 0) + 1
    window = policy.window
    if window is not None and len(turn.recent) >= window and turn.recent[0] == key:
        number -= 1  # its oldest call leaves the window as this one comes in
    return number


def uncount(policy: Policy, turn: Turn, key: str) -> None:
    """Take one call of ``key`` back out of its count (a failure, with ``count_failures=False``)."""
    if policy.window is not None:
        recent = turn.recent
        for index in range(len(recent) - 1, -1, -1):
            if recent[index] == key:
                del recent[index]
                break
        else:
            return  # already out of the window
    decrement(turn, key)


def decrement(turn: Turn, key: str) -> None:
    """One call of ``key`` fewer; a key no longer counted keeps no mark, so the marks stay bounded."""
    counts = turn.counts
    number = counts.get(key)
    if number is None:
        return
    if number <= 1:
        del counts[key]
        turn.marks.pop(key, None)
    else:
        counts[key] = number - 1


def seen(turn: Turn) -> int:
    """The changes the model had seen when it chose the calls being decided: ``changes`` as the current response began;
    in a turn with no response begun (no ``decide_model_call``: each call its own response), every change so far."""
    return turn.changes_seen if turn.responses else turn.changes


def count_progress(policy: Policy, turn: Turn, call: ToolCall, key: str, limit: int) -> tuple[bool, RefusalKind, int]:
    """``count="progress"``: count a call, restarting its count if something changed since its last run that the model
    had seen when it chose it (``seen``); returns whether it is refused, by which rule, and the number the refusal
    reports."""
    mark = turn.marks.get(key)
    visible = turn.changes_seen if turn.responses else turn.changes  # seen(turn), written out: every decision's path
    if mark is None:
        number = count(policy, turn, key, restart=True)
        turn.marks[key] = Mark(changes=visible, outcome=None, ok=None)
        return number > limit, RefusalKind.REPEAT, number
    # A mark's changes include its own run's (record_progress), which may be past what the response began with.
    restart = visible > mark.changes
    if not restart and mark.ok is not False and writes_once(policy, call):
        # It succeeded, or it was let through and no outcome came (it runs in this very batch, or its process died
        # before telling): either way it may have happened, and another would do it twice. Not counted: it does not
        # run, so a later "failed N times" counts only the runs.
        return True, RefusalKind.DUPLICATE_WRITE if mark.ok else RefusalKind.UNKNOWN_WRITE, turn.counts.get(key, 0)
    number = count(policy, turn, key, restart)
    if restart:  # something changed since: its count, and its runs with no stable result, start again
        mark = turn.marks[key] = Mark(visible, mark.outcome, mark.ok, 0)  # _replace costs a microsecond more
    if policy.max_opaque_runs is not None and mark.opaque >= policy.max_opaque_runs:
        return True, RefusalKind.OPAQUE, mark.opaque
    if number > limit:
        if restart or mark.ok is not False:
            return True, RefusalKind.REPEAT, number
        return True, RefusalKind.REJECTED if mark.outcome == REJECTED_OUTCOME else RefusalKind.FAILURE, number
    return False, RefusalKind.REPEAT, number


def record_progress(policy: Policy, turn: Turn, call: ToolCall, key: str, ok: bool, result: Any, secret: bytes) -> None:
    """``count="progress"``: record a run's outcome; a new result restarts its count, a change the others'."""
    outcome = outcome_digest(ok, result, policy.ignore_results, mask_volatile=policy.mask_volatile, key=secret)
    mark = turn.marks.get(key)
    changes = turn.changes if mark is None else mark.changes
    opaque = 0 if mark is None else mark.opaque
    if outcome == UNKNOWN_OUTCOME:
        opaque += 1
    new = mark is not None and mark.outcome is not None and (mark.outcome != outcome or outcome == UNKNOWN_OUTCOME)
    if new and key in turn.counts and not writes_once(policy, call):
        turn.counts[key] = 1  # it returned something new: progress, so its count restarts
        if policy.window is not None:
            recent = turn.recent
            recent[:] = [k for k in recent if k != key]
            recent.append(key)
    repeat = mark is not None and mark.ok is True and changes == turn.changes
    if ok and not is_read_only(policy, call) and not (repeat and call.idempotent is True):
        if changes == turn.changes:
            changes += 1  # its own change does not restart its own count
        turn.changes += 1
    if key in turn.counts:
        turn.marks[key] = Mark(changes, outcome, ok, opaque)  # by position (once a call): changes, outcome, ok, opaque
    if policy.max_cycle_period is not None:
        runs = turn.runs
        runs.append(key + outcome)
        if len(runs) > 2 * policy.max_cycle_period:
            del runs[0]


def record_rejected(turn: Turn, key: str) -> None:
    """A call of ``key`` was rejected before it ran: marked as a rejection, which its repeats count toward."""
    if key in turn.counts:  # marks are kept for counted keys only: the state stays bounded
        mark = turn.marks.get(key)
        changes, opaque = (seen(turn), 0) if mark is None else (mark.changes, mark.opaque)
        turn.marks[key] = Mark(changes=changes, outcome=REJECTED_OUTCOME, ok=False, opaque=opaque)


def continue_cycle(policy: Policy, turn: Turn, period: int) -> None:
    """A call that would start a cycle's third pass was refused: its run goes in the history as the one it would
    repeat, so the history keeps showing the cycle and the calls that go on with it are refused too (nothing ran
    that could change their results). Without it the refused call left a hole that broke the pattern, and most of
    a cycle going on after its refusal ran: 12 of 15 calls, over 20 responses."""
    runs = turn.runs
    runs.append(runs[len(runs) - period])
    if len(runs) > 2 * (policy.max_cycle_period or 0):
        del runs[0]


def cycle_period(runs: list[str], key: str, longest: int) -> int | None:
    """The period (2 to ``longest``) of a cycle whose third pass a call of ``key`` would start, or ``None``:
    the last ``period`` runs repeat the ``period`` before them with the same results, start with ``key``, hold
    another call too, and every result had a stable form."""
    size = len(runs)
    if size < 4 or runs.count(runs[-1]) == size:  # one call, one result, over and over: a repeat, no cycle
        return None
    for period in range(2, min(longest, size // 2) + 1):
        start = size - period
        first = runs[start]
        if first != runs[start - period] or not first.startswith(key):
            continue
        last = runs[start:]
        if (
            last == runs[start - period : start]
            and any(not run.startswith(key) for run in last)
            and not any(run.endswith(UNKNOWN_OUTCOME) for run in last)
        ):
            return period
    return None
