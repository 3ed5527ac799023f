"""``repeat-hooks tune``: propose a policy from your own recordings, each suggestion measured by replay.

Three kinds of suggestion, each read from what the recordings show (digest or full: both are analysed as
digests, ``recording.as_digests``), never from tool names:

- ``read_only``: a tool that ran, successfully, between two runs of another call whose result did not
  change at least ``MIN_EVIDENCE`` times, counting only calls of tools whose results do change (between two
  runs of one of their calls, somewhere in the recordings: a tool that always returns the same says nothing
  of what runs between its runs: positive contrast), and never between two runs whose result changed.
  Knowing it changes nothing, the guard stops restarting other calls' counts when it runs (an A-B-A-B loop
  with B a lookup is caught).
- ``ignore_results``: a top-level result field that changed on every pair of runs of the same call that had
  it, and was the only change at least ``MIN_EVIDENCE`` times: a clock, a latency, a counter the volatile
  mask does not catch (a test run's duration, a poll's ``checked_at`` in seconds). Two runs differing only
  there are then the same result.
- ``limits`` (``{tool: 1}``): a tool whose repeats (a call run again in its turn) never returned anything
  new, at least ``MIN_EVIDENCE`` times: a second identical call is refused unless something changed since.

Evidence is what ran: a call the live guard refused (``RecordedCall.refused``) or whose result was never
recorded (``replay.UNRECORDED``) returned nothing anyone saw, and is left out of every analysis.

The ignore_results suggestions come first (a field new on every run hides every other pattern); the others
are then read, and measured, with the kept fields ignored. Each suggestion is replayed on the recordings it
concerns, beside the default, and rejected when it:

- adds a harmful refusal, or cannot be replayed exactly (a field that also occurs nested);
- prevents nothing more (but a field of noise: ignoring it may be what lets the other suggestions prevent
  anything; it is kept only beside a suggestion of another kind, never proposed alone);
- gives successful runs a refusal or a stop they did not have (``touched``: false alarms) without preventing
  at least ``ALARM_COST`` wasted calls for each such run.

An ``ignore_results`` suggestion is judged on the results without its field (else every refusal it allows
would count as harmful: the field is new on every run, which is why it is noise). The kept ones are then
replayed together; while together they add a harmful refusal, the one preventing least is dropped. Field
names: a full trajectory's are known; a digest recording holds only their digests, so a field found there
is proposed as ``"#<digest>"`` (replace it with the name whose ``recording.field_digest`` it is). Pure: no
I/O (``repeat_hooks.offline.cli`` reads the files).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..policy import Policy
from ..result import outcome_digest
from .reading import DigestTrajectory, as_digests
from .recording import REST
from .replay import UNRECORDED, NotReplayable, RecordedCall, Tally, Trajectory, replay, replay_one

MIN_EVIDENCE = 3
"""How many times a pattern must be seen before it becomes a suggestion."""
ALARM_COST = 2
"""Wasted calls a suggestion must prevent for each successful run it gives a refusal or a stop (a false
alarm: the run succeeded without help) that it did not have."""


@dataclass(frozen=True)
class Run:
    """One recorded call as the analysis sees it: its tool, its call (tool and arguments), its outcome."""

    tool: str
    call: str
    ok: bool
    outcome: str
    """The outcome as the default policy compares it (volatile tokens masked)."""
    fields: dict[str, str] | None
    """The result's top-level fields (masked digests) when it is a mapping, else ``None``."""
    hinted: bool = False
    """The recording gave the call a read-only hint (true or false): the tool's effect is known."""


@dataclass(frozen=True)
class Suggestion:
    """One setting proposed, why, and what it did on the recordings (beside the default)."""

    setting: str
    """``"read_only"``, ``"ignore_results"`` or ``"limits"``."""
    name: str
    """The tool (``read_only``, ``limits``) or the result field (``ignore_results``: its name, or ``"#<digest>"``
    when only its digest is known)."""
    evidence: str
    harmful: int = 0
    """Harmful refusals it adds (0 for every suggestion kept)."""
    prevented: int = 0
    """Wasted calls it prevents beyond the default."""
    touched: int = 0
    """Successful trajectories it adds a refusal or a stop to (each refusal waste, else it would be harmful)."""
    kept: bool = False
    why_not: str | None = None


@dataclass
class Proposal:
    """The policy proposed, its suggestions (kept and rejected), and the figures beside the default's."""

    policy: Policy
    suggestions: list[Suggestion] = field(default_factory=list)
    default: Tally = field(default_factory=Tally)
    proposed: Tally = field(default_factory=Tally)

    def kept(self) -> list[Suggestion]:
        """The suggestions in the proposed policy."""
        return [suggestion for suggestion in self.suggestions if suggestion.kept]


# -- reading the runs --------------------------------------------------------------------------------------


def runs_by_turn(trajectories: Iterable[DigestTrajectory]) -> list[list[Run]]:
    """Every turn's runs, in order (the calls of a response in their order): the calls that ran and whose
    result was recorded (a refused call, or one with no recorded result, is no evidence)."""
    return [
        [_run(call) for response in turn for call in response if call.refused is None and call.result is not UNRECORDED]
        for trajectory in trajectories
        for turn in trajectory.turns
    ]


def _run(call: RecordedCall) -> Run:
    fields: dict[str, str] | None = None
    if isinstance(call.result, dict) and not {"~", "!"} & set(call.result):
        fields = {name: part["~"] if isinstance(part, dict) else "?" for name, part in call.result.items()}
    arguments = json.dumps(call.arguments, sort_keys=True)
    outcome = outcome_digest(call.ok, call.result)
    return Run(call.name, f"{call.name}\x00{arguments}", call.ok, outcome, fields, call.read_only is not None)


def _pairs(runs: list[Run]) -> Iterator[tuple[Run, Run, list[Run]]]:
    """Each two consecutive runs of one call in a turn, with the runs between them."""
    last: dict[str, int] = {}
    for index, run in enumerate(runs):
        before = last.get(run.call)
        if before is not None:
            yield runs[before], run, runs[before + 1 : index]
        last[run.call] = index


# -- the three analyses -------------------------------------------------------------------------------------


def read_only_tools(by_turn: Sequence[list[Run]], known: frozenset[str] = frozenset()) -> dict[str, str]:
    """Tools that look read-only, each with its evidence: never between two runs of a call whose result changed,
    and at least ``MIN_EVIDENCE`` times between unchanged runs of a call whose result changed at other times
    of a tool whose results change at other times (positive contrast: a tool that never changes tells nothing).
    A tool with a read-only hint is known."""
    changing: set[str] = set()  # tools a call of which returned a new result on a rerun, somewhere
    for runs in by_turn:
        changing.update(second.tool for first, second, _ in _pairs(runs) if first.outcome != second.outcome)
    between: Counter[str] = Counter()
    blamed: set[str] = set()
    hinted: set[str] = set()
    for runs in by_turn:
        hinted.update(run.tool for run in runs if run.hinted)
        for first, second, middle in _pairs(runs):
            tools = {run.tool for run in middle if run.ok and run.tool != first.tool}
            if first.outcome != second.outcome:
                blamed |= tools
            elif first.tool in changing:
                between.update(tools)
    return {
        tool: f"ran {count} times between two runs of a call whose tool's results change, never changing it"
        for tool, count in sorted(between.items())
        if count >= MIN_EVIDENCE and tool not in blamed and tool not in known and tool not in hinted
    }


def volatile_fields(by_turn: Iterable[list[Run]], known: frozenset[str] = frozenset()) -> dict[str, str]:
    """Result fields (their digests) that changed on every pair of runs of one call that had them, and alone at
    least ``MIN_EVIDENCE`` times; each with its evidence. ``known``: digests of the fields already ignored."""
    present: Counter[str] = Counter()
    changed: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    for runs in by_turn:
        for first, second, _ in _pairs(runs):
            if first.fields is None or second.fields is None or first.ok != second.ok:
                continue
            shared = first.fields.keys() & second.fields.keys()
            differ = {name for name in shared if first.fields[name] != second.fields[name]}
            present.update(shared)
            changed.update(differ)
            if len(differ) == 1 and first.fields.keys() == second.fields.keys():
                alone.update(differ)
    return {
        name: f"changed on all {present[name]} reruns of a call that returned it; the only change in {alone[name]}"
        for name in sorted(alone)
        if alone[name] >= MIN_EVIDENCE and changed[name] == present[name] and name not in known and name != REST
    }


def fruitless_tools(by_turn: Iterable[list[Run]], limited: Iterable[str] = ()) -> dict[str, str]:
    """Tools whose repeats never returned anything new, at least ``MIN_EVIDENCE`` of them; with evidence."""
    repeats: Counter[str] = Counter()
    fruitful: set[str] = set()
    for runs in by_turn:
        seen: dict[str, set[str]] = defaultdict(set)
        for run in runs:
            outcomes = seen[run.call]
            if outcomes:
                repeats[run.tool] += 1
                if run.outcome not in outcomes:
                    fruitful.add(run.tool)
            outcomes.add(run.outcome)
    skip = set(limited)
    return {
        tool: f"{count} repeats, none returned anything new"
        for tool, count in sorted(repeats.items())
        if count >= MIN_EVIDENCE and tool not in fruitful and tool not in skip
    }


# -- measuring -------------------------------------------------------------------------------------------


def with_setting(policy: Policy, setting: str, name: str) -> Policy:
    """``policy`` with one suggestion added."""
    if setting == "limits":
        return policy.model_copy(update={"limits": {**policy.limits, name: 1}})
    current: frozenset[str] = getattr(policy, setting)
    return policy.model_copy(update={setting: current | {name}})


def rebuild(policy: Policy) -> Policy:
    """``policy`` with the settings that differ from the default, validated afresh; its ``digest_key`` is left
    out (digests are compared for equality only: a replay needs no key)."""
    default = Policy()
    settings = {name: getattr(policy, name) for name in Policy.model_fields if name != "digest_key"}
    return Policy.model_validate({k: v for k, v in settings.items() if v != getattr(default, k)})


def measure(
    policy: Policy, suggestion: Suggestion, trajectories: Sequence[DigestTrajectory], default: Sequence[Tally]
) -> Suggestion:
    """``suggestion`` replayed on the trajectories it concerns, beside ``default`` (their tallies under
    ``policy``, one each). An ``ignore_results`` suggestion is judged on the results without that field."""
    try:
        changed = rebuild(with_setting(policy, suggestion.setting, suggestion.name))
    except ValueError as error:
        return _rejected(suggestion, f"not a valid policy: {error}")
    ignored = frozenset({suggestion.name}) if suggestion.setting == "ignore_results" else frozenset()
    before, after = Tally(), Tally()
    for trajectory, tally in zip(trajectories, default, strict=True):
        if not _concerns(trajectory, suggestion):
            continue
        try:
            replay_one(changed, without(trajectory, ignored), after)
        except NotReplayable as error:
            return _rejected(suggestion, str(error))
        _add(before, tally)
    measured = replace(
        suggestion,
        harmful=after.harmful - before.harmful,
        prevented=after.waste_prevented - before.waste_prevented,
        touched=after.successful_with_refusal - before.successful_with_refusal,
    )
    if measured.harmful > 0:
        plural = "" if measured.harmful == 1 else "s"
        return _rejected(measured, f"adds {measured.harmful} harmful refusal{plural}")
    if measured.prevented <= 0 and not ignored:  # a field of noise is kept: it hides the other patterns
        return _rejected(measured, "prevents nothing more on these recordings")
    if measured.touched > 0 and measured.prevented < ALARM_COST * measured.touched:
        return _rejected(
            measured,
            f"gives {measured.touched} more successful runs a refusal or stop, for {measured.prevented} wasted calls "
            f"prevented (at least {ALARM_COST} per run needed)",
        )
    return replace(measured, kept=True)


def without(trajectory: DigestTrajectory, fields: frozenset[str]) -> DigestTrajectory:
    """``trajectory`` with these top-level fields left out of every result: the replay then judges a refusal
    harmful only when something else in the result was new (a field ignored as noise is new every run)."""
    if not fields:
        return trajectory
    digests = {trajectory.field_digest(name) for name in fields}

    def strip(call: RecordedCall) -> RecordedCall:
        if not isinstance(call.result, dict) or not digests & call.result.keys():
            return call
        return replace(call, result={name: part for name, part in call.result.items() if name not in digests})

    stripped = [[[strip(call) for call in response] for response in turn] for turn in trajectory.turns]
    return replace(trajectory, turns=stripped)


def _rejected(suggestion: Suggestion, why: str) -> Suggestion:
    return replace(suggestion, kept=False, why_not=why)


def _concerns(trajectory: DigestTrajectory, suggestion: Suggestion) -> bool:
    """Whether ``suggestion`` can change anything in ``trajectory``: a tool it names ran, a field it names
    was in a result."""
    calls = (call for turn in trajectory.turns for response in turn for call in response)
    if suggestion.setting == "ignore_results":
        name = trajectory.field_digest(suggestion.name)
        return name in trajectory.deep_results or any(isinstance(c.result, dict) and name in c.result for c in calls)
    return any(call.name == suggestion.name for call in calls)


def _add(total: Tally, one: Tally) -> None:
    total.harmful += one.harmful
    total.waste_prevented += one.waste_prevented
    total.successful_with_refusal += one.successful_with_refusal


# -- proposing -------------------------------------------------------------------------------------------


def tune(trajectories: Sequence[Trajectory], base: Policy | None = None) -> Proposal:
    """Propose a policy for ``trajectories`` (full or digest), each suggestion measured by replay.

    Everything is replayed as digests (``recording.as_digests``: the same figures as the full trajectories);
    the proposed policy's figures judge results without the fields it ignores (see ``without``)."""
    base = Policy() if base is None else base
    digests = [as_digests(trajectory) for trajectory in trajectories]
    names = {digest: name for trajectory in digests for digest, name in trajectory.names.items()}
    # First the noise: result fields new on every run hide every other pattern.
    default = [replay(base, [trajectory]) for trajectory in digests]
    known = frozenset(t.field_digest(name) for t in digests for name in base.ignore_results)
    fields = volatile_fields(runs_by_turn(digests), known)
    noise = [
        measure(base, Suggestion("ignore_results", names.get(digest, f"#{digest}"), why), digests, default)
        for digest, why in fields.items()
    ]
    quiet = [suggestion.name for suggestion in noise if suggestion.kept]
    if quiet:  # then the rest, read and measured beside the default with those fields ignored
        base_quiet = rebuild(base.model_copy(update={"ignore_results": base.ignore_results | set(quiet)}))
        digests_quiet = [without(trajectory, frozenset(quiet)) for trajectory in digests]
        default = [replay(base_quiet, [trajectory]) for trajectory in digests_quiet]
    else:
        base_quiet, digests_quiet = base, digests
    quiet_turns = runs_by_turn(digests_quiet)
    candidates = [
        *(Suggestion("read_only", tool, why) for tool, why in read_only_tools(quiet_turns, base.read_only).items()),
        *(Suggestion("limits", tool, why) for tool, why in fruitless_tools(quiet_turns, base.limits).items()),
    ]
    measured = [*noise, *(measure(base_quiet, candidate, digests_quiet, default) for candidate in candidates)]
    kept = sorted((s for s in measured if s.kept), key=lambda s: -s.prevented)
    proposal = Proposal(base, measured, replay(base, digests), Tally())
    while True:
        if all(s.setting == "ignore_results" for s in kept):  # noise ignored for nothing: never proposed alone
            alone = [s for s in kept if s.prevented <= 0]
            kept = [s for s in kept if s not in alone]
            proposal.suggestions = [
                _rejected(s, "prevents nothing, and no other suggestion needs it") if s in alone else s
                for s in proposal.suggestions
            ]
        policy = base
        for suggestion in kept:
            policy = with_setting(policy, suggestion.setting, suggestion.name)
        policy = rebuild(policy)
        ignored = policy.ignore_results - base.ignore_results
        proposed = replay(policy, [without(trajectory, ignored) for trajectory in digests])
        if proposed.harmful <= proposal.default.harmful or not kept:
            break
        dropped = kept.pop()  # the one preventing least
        proposal.suggestions = [
            _rejected(s, "adds harmful refusals together with the others") if s is dropped else s
            for s in proposal.suggestions
        ]
    if base.digest_key is not None:  # replayed without it (``rebuild``); the policy to use keeps it
        policy = policy.model_copy(update={"digest_key": base.digest_key})
    proposal.policy, proposal.proposed = policy, proposed
    return proposal


# -- the report ------------------------------------------------------------------------------------------


def policy_text(policy: Policy) -> str:
    """``policy`` as Python to paste: the settings that differ from the default, in ``Policy``'s order, each
    set of names sorted."""
    default = Policy()
    parts = []
    for name, value in policy.model_dump().items():
        if getattr(policy, name) == getattr(default, name):
            continue
        if isinstance(value, list):  # a set of names
            parts.append(f"{name}={{{', '.join(json.dumps(item) for item in sorted(value))}}}")
        else:
            parts.append(f"{name}={_python(value)}")
    return f"Policy({', '.join(parts)})"


def _python(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_python(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    return json.dumps(value)


def report(proposal: Proposal) -> str:
    """The proposed policy, to paste, then each suggestion with its evidence and its replayed figures."""
    lines = ["Proposed policy (paste it):", "", f"    {policy_text(proposal.policy)}", ""]
    unnamed = sorted(name for name in proposal.policy.ignore_results if name.startswith("#"))
    if unnamed:
        lines.append(
            f"({', '.join(unnamed)}: result fields a digest recording names by digest only: replace each with the "
            "name whose repeat_hooks.offline.recording.field_digest(name, key) it is)"
        )
        lines.append("")
    if not proposal.suggestions:
        lines.append("Nothing in these recordings suggests a change from the default.")
        return "\n".join(lines)
    rows = [("suggestion", "harmful", "prevented", "touched", "evidence")]
    for suggestion in proposal.suggestions:
        what = (
            f"{suggestion.setting} += {suggestion.name}"
            if suggestion.setting != "limits"
            else (f"limits[{suggestion.name}] = 1")
        )
        status = suggestion.evidence if suggestion.kept else f"REJECTED ({suggestion.why_not}); {suggestion.evidence}"
        figures = (f"{suggestion.harmful:+d}", f"{suggestion.prevented:+d}", f"{suggestion.touched:+d}")
        rows.append((what, *figures, status))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        cells = [
            row[0].ljust(widths[0]),
            *(cell.rjust(width) for cell, width in zip(row[1:4], widths[1:], strict=True)),
        ]
        lines.append("  ".join([*cells, row[4]]))
    lines.append("")
    lines.append("(what each suggestion adds, replayed beside the default, with the ignore_results kept for the")
    lines.append(" others: harmful refusals, wasted calls prevented, successful runs given a refusal or a stop)")
    return "\n".join(lines)
