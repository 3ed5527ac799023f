"""The conformance kit: what every adapter must do on its SDK's real loop, written once.

A ``Scenario`` is a conversation: tools with scripted results, the user's turns, and for each turn the
model's scripted responses. An adapter proves itself by writing a ``Driver``: it builds the SDK's agent
with the guard, turns each ``Tool`` into an SDK tool that calls ``ToolBox.run`` (which counts the runs and
returns the scripted result, or raises ``ToolFailed``), replaces the model at the SDK's own model seam with
one that answers from the script, runs each turn through the SDK's real loop, and reports what happened
(``TurnOutcome``). ``check`` then compares it with what the scenario expects::

    from repeat_hooks.kit.conformance import SCENARIOS, ToolBox, check

    UNSUPPORTED = {"isolated_branches_count_apart": "my SDK has no sub-agents (file:line of the SDK fact)"}

    @pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda s: s.name)
    def test_conformance(scenario):
        box = ToolBox(scenario)
        check(scenario, box, MyDriver().run(scenario, box))

``UNSUPPORTED`` (by convention a module-level ``dict`` in the adapter's ``testing.py``, scenario name to the SDK
fact why) is the driver's own: ``check`` never reads it, and each entry should have a test of the SDK's own
behaviour instead.

The scripted model's rules, the same for every driver: in turn ``t``, its ``i``-th model call (0-based)
answers ``turn.script[i]``; past the script it answers ``FINAL``. A ``Response`` is a text (the model's
answer) or a tuple of ``Call`` (tool calls in one response, run as the SDK runs parallel calls). Each
kit tool takes one string argument, ``query``. A call's id is ``call_<t>_<i>_<k>`` (``k``: its index in
the response) unless the ``Call`` gives one (``""``: an empty id, for SDKs that carry one).

``TurnOutcome.seen`` is every tool result of the turn as the conversation holds it for the model, in
order, as text (refusals included): read it from the SDK's own history, not from the guard.
``TurnOutcome.model_calls`` is how many model calls the scripted model answered in the turn (``Cursor.step``):
none may follow a stop, in the agent or in anything the SDK runs around it.

Three kinds of scenario need an SDK construct some SDKs lack; a driver whose SDK lacks it lists the scenario
in its ``UNSUPPORTED`` with the SDK fact why:

- ``Scenario.rounds > 1``: the SDK's own construct around the agent (a loop agent, a graph cycling through the
  agent's node) runs it ``rounds`` times in the turn, each round ending at the model's text answer, the
  scripted model's cursor going on from round to round. A stop ends the turn: no later round runs.
- ``Scenario.branches > 1``: the turn runs the agent in ``branches`` isolated branches (a parallel agent,
  sub-agents called at once), each with its own scripted model and ``Cursor`` answering the turn's script,
  none seeing another's results: their calls count apart (``model_calls`` is their sum; ``rounds`` stays 1,
  branches are not rounds). ``final`` and ``stop`` are the last branch's, as the SDK hands the caller the last
  word; ``seen`` is every branch's results. The ``ToolBox`` is the one world the branches share: its run
  numbers count over all branches, as a real tool's would.
- ``Tool.needs_approval``: the SDK's own human approval guards the tool; the driver's human is
  ``ToolBox.ask``, which approves every call it is asked about (``Tool.rejects``: rejects every one, and the
  driver hands the SDK the rejection). Asking is not running, an approved call runs exactly once, a call the
  guard refused is never asked about, a rejected call counts toward its repeats, and the approval round goes
  on with the turn's counts.

``check(..., stop_lag=N)`` is for an SDK with no hook before a model call: the stop lands at the next
response's first tool call, so that response's model call is the ``N`` extra one counted in ``model_calls``
(a ``Mapping`` gives ``N`` per stop reason; a reason not named: 0). That response's calls must not run, and
what they return must not read as a refusal (``Expect.refusals`` counts texts starting ``REFUSED`` only): hand
them the stop's message, as the Claude Agent SDK adapter does.
``TurnOutcome.stop_messages`` counts what reached the caller: final answers, and the messages or events the
SDK hands the caller as the turn's result, not partial stream chunks of one message.

Make the kit tools yield to the event loop where the SDK runs tools as tasks (an ``await asyncio.sleep(0)``
before ``ToolBox.run``): ``parallel_calls_are_one_batch`` then catches an adapter that decides each call
only when it runs, after the results of its neighbours came in.

**Two processes, one conversation** (``RETRIED``, a scenario apart): a conversation served by processes that share
a store, one killed mid-turn and the request retried. ``run_retried`` runs the scenario's first turn in a fresh
process (``python -m repeat_hooks.kit.conformance``) with the driver's ``run_turn`` and a ``SQLiteStore``; that
process dies (``os._exit``) right after the tool run ``Scenario.crash`` names, before its outcome reaches the
guard; then a second process runs the same turn again: the same user message, conversation id and turn id, the
same store. ``check_retried`` then asserts what the two did together: the write that ran before the crash is
not run again, and the calls keep counting where the first process left them. A driver's ``run_turn`` gives the
guard ``store`` and names the conversation and the turn the way that SDK's users name a retried request's
(``repeat_hooks.kit.request`` where the SDK has no spelling of its own).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..decision import Stop, StopReason
from ..policy import Policy
from ..stores import StateStore

FINAL = "done"
"""What the scripted model answers past its script: the turn's final text when the guard did not stop it."""
REFUSED = "Refused"
"""Every refusal text the guard hands the model starts with this."""
STOPPED = "I stopped"
"""Every stop message the guard hands the caller starts with this."""
WARNED = "the same call again will be refused"
"""Every note the guard hands the model after a result (``Policy(warn=True)``) holds this."""


class ToolFailed(Exception):
    """Raised by ``ToolBox.run`` for a scripted failure: the SDK must hand the model a failed result
    (its error text), and the adapter must record the call as failed."""


@dataclass(frozen=True)
class Call:
    """One tool call in a scripted response."""

    tool: str
    query: str = "FR-7731"
    """The tool's one argument."""
    id: str | None = None
    """The call's id: ``None`` for the driver's own unique id, else this one (``""``: empty)."""


Response = str | tuple[Call, ...]
"""One scripted model response: a text answer, or tool calls."""


@dataclass(frozen=True)
class Tool:
    """A kit tool: ``results(run, query)`` is what its ``run``-th run (1-based, all queries) returns."""

    name: str
    results: Callable[[int, str], Any]
    """Returns the result, or raises ``ToolFailed`` to fail."""
    read_only: bool | None = None
    """Passed to the guard as the SDK's read-only hint, where the SDK can carry one; otherwise put the
    tool in the policy's ``read_only`` (the scenarios do both)."""
    description: str = "A kit tool."
    needs_approval: bool = False
    """A human approves each run, through the SDK's own approval (``ToolBox.ask`` is the human)."""
    rejects: bool = False
    """With ``needs_approval``: the human rejects every call asked about (the SDK hands the model its own
    rejection text, and the call does not run)."""


@dataclass(frozen=True)
class UserTurn:
    """One user message and the model's scripted responses in that turn."""

    message: str
    script: tuple[Response, ...]


@dataclass(frozen=True)
class Expect:
    """What a scenario must show, whatever the SDK."""

    runs: Mapping[str, int]
    """How many times each tool really ran, over the whole scenario (a tool not named: 0)."""
    refusals: int
    """Tool results the model received that were refusals, over the whole scenario."""
    stops: tuple[StopReason | None, ...]
    """Per turn: the reason the guard stopped it, or ``None`` (the turn ended with ``FINAL``)."""
    model_calls: tuple[int, ...]
    """Per turn: the model calls the scripted model answered (all branches'); none after a stop."""
    rounds: tuple[int, ...] | None = None
    """Per turn: the rounds the construct around the agent ran (a stop ends it); ``None``: ``Scenario.rounds``."""
    asked: Mapping[str, int] = field(default_factory=dict)
    """For a tool whose human ``rejects``: how many times the human was asked, over the whole scenario."""
    warnings: int = 0
    """Tool results the model received with the guard's note after them (``Policy(warn=True)``), over the whole
    scenario: each a result the tool returned, the note after it (holding ``WARNED``)."""


@dataclass(frozen=True)
class Crash:
    """The process serving the turn dies right after the ``run``-th real run of ``tool`` (before its outcome
    reaches the guard); another process retries the turn through the same store."""

    tool: str
    run: int = 1


@dataclass(frozen=True)
class Scenario:
    """A conversation every adapter must handle the same way."""

    name: str
    doc: str
    tools: tuple[Tool, ...]
    turns: tuple[UserTurn, ...]
    expect: Expect
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The policy's settings: ``Policy(**settings)``."""
    rounds: int = 1
    """Times the SDK's construct around the agent runs it in each turn (1: the agent alone)."""
    branches: int = 1
    """Isolated branches the agent runs in at once in each turn, each answering the script (1: one agent)."""
    crash: Crash | None = None
    """For ``run_retried``: the tool run right after which the first process dies."""

    @property
    def policy(self) -> Policy:
        """The scenario's policy."""
        return Policy(**self.settings)

    def tool(self, name: str) -> Tool:
        """The kit tool named ``name``."""
        return next(tool for tool in self.tools if tool.name == name)


@dataclass
class TurnOutcome:
    """What a driver saw in one turn, read from the SDK (never from the guard's own state)."""

    final: str
    """The final text the caller got: the model's answer, or the guard's stop message."""
    stop: Stop | None
    """The guard's stop of this turn, as the adapter's documented way of reading it returns it."""
    seen: list[str]
    """The tool results of this turn in the conversation, in order, as text (refusals included)."""
    model_calls: int
    """The model calls the scripted model answered in this turn (its ``Cursor.step``, summed over branches)."""
    stop_messages: int
    """How many times the guard's stop message reached the caller in this turn (final answers, events or
    messages the SDK hands the caller starting ``STOPPED``): 1 for a stopped turn, else 0."""
    rounds: int = 1
    """The rounds the SDK's construct around the agent ran in this turn, counted from the SDK (each time it
    started the agent): a loop that goes on after a stop, even doing nothing, shows here. 1: the agent alone."""


class ToolBox:
    """The tools of one scenario run: counts each real run and returns its scripted result."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.runs: dict[str, int] = {tool.name: 0 for tool in scenario.tools}
        """Runs so far, by tool."""
        self.asked: dict[str, int] = {tool.name: 0 for tool in scenario.tools}
        """Calls a human was asked to approve so far, by tool."""

    def ask(self, name: str, query: str) -> bool:
        """The human asked to approve a call of ``name``: count the ask, and approve it (``True``) unless the
        tool ``rejects`` (``False``: the driver hands the SDK a rejection)."""
        self.asked[name] += 1
        return not self.scenario.tool(name).rejects

    def run(self, name: str, query: str) -> Any:
        """Run tool ``name``: count it, then return its scripted result (or raise ``ToolFailed``)."""
        self.runs[name] += 1
        return self.scenario.tool(name).results(self.runs[name], query)


class Driver(Protocol):
    """An adapter's driver: runs a scenario on its SDK's real loop, the model scripted at the SDK's seam."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        """Run every turn of ``scenario`` with a fresh guarded agent (one conversation); one outcome per turn."""
        ...

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """Run the first turn of ``scenario`` with a fresh guarded agent whose states live in ``store``, serving
        conversation ``conversation_id`` in the turn ``turn_id``, named the way this SDK's users name a retried
        request's; its outcome."""
        ...


def call_id(turn: int, step: int, index: int, call: Call) -> str:
    """The id a driver's scripted model gives ``call``: its own, or ``call_<turn>_<step>_<index>``."""
    return call.id if call.id is not None else f"call_{turn}_{step}_{index}"


def response(scenario: Scenario, turn: int, step: int) -> Response:
    """The scripted model's ``step``-th response (0-based) in turn ``turn``: the script's, or ``FINAL``."""
    script = scenario.turns[turn].script
    return script[step] if step < len(script) else FINAL


class Cursor:
    """Where a driver's scripted model is in a scenario: the turn it is in, and its next response.

    ``start_turn(n)`` when the driver sends turn ``n``'s message; ``next()`` at each model call returns the
    response (``response``) with each call's id (``call_id``): a text, or a list of ``(Call, id)``. ``step``
    is then the model calls answered in the turn so far (``TurnOutcome.model_calls``).
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.turn = 0
        self.step = 0

    def start_turn(self, number: int) -> None:
        """The driver is about to send turn ``number``'s user message."""
        self.turn, self.step = number, 0

    def next(self) -> str | list[tuple[Call, str]]:
        """The scripted model's next response in the current turn."""
        turn, step = self.turn, self.step
        self.step += 1
        reply = response(self.scenario, turn, step)
        if isinstance(reply, str):
            return reply
        return [(call, call_id(turn, step, index, call)) for index, call in enumerate(reply)]


def check(
    scenario: Scenario, box: ToolBox, outcomes: Sequence[TurnOutcome], *, stop_lag: int | Mapping[StopReason, int] = 0
) -> None:
    """Raise ``AssertionError`` saying what differs between what the driver saw and what ``scenario`` expects.

    ``stop_lag``: for an SDK with no hook before a model call, the model calls it makes after a stop rule
    trips, before the stop lands (at the next response's first tool call); stated by its driver, with why,
    for every stop reason or per stop reason (a reason not named: 0).
    """
    expect = scenario.expect
    problems: list[str] = []
    if len(outcomes) != len(scenario.turns):
        problems.append(f"{len(outcomes)} turn outcomes for {len(scenario.turns)} turns")
    if not len(expect.stops) == len(expect.model_calls) == len(scenario.turns):
        problems.append(
            f"the scenario expects {len(expect.stops)} stops and {len(expect.model_calls)} model call counts"
        )
    runs = {name: count for name, count in box.runs.items() if count}
    wanted = {name: count for name, count in expect.runs.items() if count}
    if runs != wanted:
        problems.append(f"tool runs {runs}, expected {wanted}")
    refusals = sum(1 for outcome in outcomes for text in outcome.seen if text.startswith(REFUSED))
    if refusals != expect.refusals:
        seen = [outcome.seen for outcome in outcomes]
        problems.append(f"{refusals} refusals reached the model, expected {expect.refusals}; it saw {seen}")
    noted = [text for outcome in outcomes for text in outcome.seen if WARNED in text and not text.startswith(REFUSED)]
    if len(noted) != expect.warnings or any(text.find(WARNED) < 20 for text in noted):
        seen = [outcome.seen for outcome in outcomes]
        problems.append(
            f"{len(noted)} results reached the model with the guard's note after them, expected {expect.warnings} "
            f"(each the tool's result, then the note); it saw {seen}"
        )
    for tool in scenario.tools:
        if tool.rejects:
            if box.runs[tool.name] or box.asked[tool.name] != expect.asked.get(tool.name, 0):
                problems.append(
                    f"{tool.name}: a human was asked {box.asked[tool.name]} times and it ran "
                    f"{box.runs[tool.name]} times, expected {expect.asked.get(tool.name, 0)} asks and no run "
                    "(every ask is rejected; a call rejected max_calls times is refused without asking)"
                )
        elif tool.needs_approval and box.asked[tool.name] != box.runs[tool.name]:
            problems.append(
                f"{tool.name}: a human approved {box.asked[tool.name]} calls and {box.runs[tool.name]} ran "
                "(each approved call runs once; a call the guard refused is never asked about)"
            )
        elif not tool.needs_approval and box.asked[tool.name]:
            problems.append(
                f"{tool.name}: a human was asked about {box.asked[tool.name]} calls of a tool that needs none"
            )
    for number, (outcome, reason, calls) in enumerate(zip(outcomes, expect.stops, expect.model_calls, strict=False)):
        got = outcome.stop.reason if outcome.stop is not None else None
        if got != reason:
            problems.append(f"turn {number}: stop {got}, expected {reason}")
        lag = 0 if reason is None else stop_lag if isinstance(stop_lag, int) else stop_lag.get(reason, 0)
        wanted_calls = calls + lag
        if outcome.model_calls != wanted_calls:
            after = " (none may follow a stop, in the agent or around it)" if reason is not None else ""
            problems.append(f"turn {number}: {outcome.model_calls} model calls, expected {wanted_calls}{after}")
        wanted_rounds = expect.rounds[number] if expect.rounds is not None else scenario.rounds
        if outcome.rounds != wanted_rounds:
            problems.append(f"turn {number}: rounds run {outcome.rounds}, expected {wanted_rounds}")
        if outcome.stop_messages != (reason is not None):
            problems.append(
                f"turn {number}: the stop message reached the caller {outcome.stop_messages} times, "
                f"expected {int(reason is not None)}"
            )
        wanted_final = outcome.stop.message if outcome.stop is not None else FINAL
        if reason is not None and not outcome.final.startswith(STOPPED):
            problems.append(f"turn {number}: final text {outcome.final!r} is not the guard's stop message")
        if outcome.final != wanted_final:
            problems.append(f"turn {number}: final text {outcome.final!r}, expected {wanted_final!r}")
    if problems:
        raise AssertionError(f"scenario {scenario.name}: " + "; ".join(problems))


# -- tools' scripted results ------------------------------------------------------------------------------


def same(value: Any) -> Callable[[int, str], Any]:
    """Results: ``value`` every run."""
    return lambda run, query: value


def numbered(template: str = "{query}: run {run}") -> Callable[[int, str], Any]:
    """Results: a new text every run (progress)."""
    return lambda run, query: template.format(run=run, query=query)


def fails(template: str = "{query}: carrier timeout (attempt {run})") -> Callable[[int, str], Any]:
    """Results: a failure every run, its text new every run."""

    def result(run: int, query: str) -> Any:
        raise ToolFailed(template.format(run=run, query=query))

    return result


def fails_once(then: Any) -> Callable[[int, str], Any]:
    """Results: a failure on the first run, then ``then``."""

    def result(run: int, query: str) -> Any:
        if run == 1:
            raise ToolFailed(f"{query}: carrier timeout")
        return then

    return result


class Status(enum.Enum):
    """A kit Enum, as tools return them."""

    IN_TRANSIT = "in_transit"


@dataclass(frozen=True)
class Parcel:
    """A kit dataclass, as tools return them."""

    number: str
    status: Status
    weight_kg: decimal.Decimal


def typed_parcel(run: int, query: str) -> Any:
    """The same parcel every run, in types JSON lacks: a datetime, a date, a UUID, a Decimal, an Enum, a dataclass."""
    return {
        "parcel": Parcel(query, Status.IN_TRANSIT, decimal.Decimal("1.25")),
        "scanned_at": datetime.datetime(2026, 11, 30, 9, 15, tzinfo=datetime.timezone.utc),
        "due": datetime.date(2026, 12, 3),
        "carrier_id": uuid.UUID("5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"),
    }


def fresh_ids(run: int, query: str) -> Any:
    """The same answer every run, stamped with a fresh request id, a fresh trace id and the time of the run."""
    return {
        "status": f"{query}: in transit",
        "request_id": str(uuid.uuid4()),
        "trace": uuid.uuid4().hex + uuid.uuid4().hex[:8],
        "checked_at": (datetime.datetime(2026, 12, 1, 10, 0) + datetime.timedelta(seconds=run)).isoformat(),
    }


def order_placed(run: int, query: str) -> Any:
    """A write's receipt: a new order number every run (``ORD-1``, ``ORD-2``, ...)."""
    return {"order": f"ORD-{run}", "item": query}


# -- the catalogue ----------------------------------------------------------------------------------------

TRACK = Call("track_parcel")
"""The parcel tracker's call: ``track_parcel(query="FR-7731")``."""
LOOKUP = Call("lookup_address")
"""The address lookup's call: ``lookup_address(query="FR-7731")``."""


# These two run only while SCENARIOS is built, at import: mutation testing cannot switch a mutant on there.
def _track(results: Callable[[int, str], Any] | None = None, **hints: Any) -> Tool:  # pragma: no mutate
    results = results or same("FR-7731: in transit")  # pragma: no mutate
    return Tool("track_parcel", results, description="Where a parcel is now.", **hints)  # pragma: no mutate


def _calls(*calls: Call) -> tuple[Call, ...]:  # pragma: no mutate
    return calls  # pragma: no mutate


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "seed_004_story",
        "Seed 004: per tool, 2 calls a turn run; the 3rd is refused; after 3 refusals the turn ends with the "
        "guard's message; the next turn counts afresh.",
        (_track(),),
        (
            UserTurn("Keep checking FR-7731", (_calls(TRACK),) * 8),
            UserTurn("Check FR-7731 once more", (_calls(TRACK),)),
        ),
        Expect(runs={"track_parcel": 3}, refusals=3, stops=(StopReason.IGNORED_REFUSALS, None), model_calls=(5, 2)),
        {"match": "tool", "count": "per_turn", "max_calls": 2, "max_refusals": 3},
    ),
    Scenario(
        "same_result_is_refused",
        "The default: the same call with the same result runs twice; the 3rd is refused, and the model, told "
        "so, answers.",
        (_track(),),
        (UserTurn("Where is FR-7731?", (_calls(TRACK), _calls(TRACK), _calls(TRACK))),),
        Expect(runs={"track_parcel": 2}, refusals=1, stops=(None,), model_calls=(4,)),
    ),
    Scenario(
        "a_cycle_going_on_after_its_refusal_is_refused_throughout",
        "Track, look up, track, look up, the same results each time: the third pass is a cycle and refused, and so "
        "is every call going on with it (nothing ran that could change their results); after 3 refused responses "
        "the turn ends.",
        (_track(), Tool("lookup_address", same("12 Rue du Port"), description="The address of a parcel.")),
        (UserTurn("Where is FR-7731, and where does it go?", (_calls(TRACK), _calls(LOOKUP)) * 4),),
        Expect(
            runs={"track_parcel": 2, "lookup_address": 2},
            refusals=3,
            stops=(StopReason.IGNORED_REFUSALS,),
            model_calls=(7,),
        ),
    ),
    Scenario(
        "a_warning_comes_before_the_refusal",
        "With warn=True, the 2nd same call runs and its result reaches the model with the guard's note that the "
        "same call again will be refused; the 3rd is refused, as without the note.",
        (_track(),),
        (UserTurn("Where is FR-7731?", (_calls(TRACK), _calls(TRACK), _calls(TRACK))),),
        Expect(runs={"track_parcel": 2}, refusals=1, stops=(None,), model_calls=(4,), warnings=1),
        {"warn": True},
    ),
    Scenario(
        "new_results_are_progress",
        "A call whose result is new each time (a test rerun after each edit, a job's status) is never refused.",
        (_track(numbered()),),
        (UserTurn("Watch FR-7731", (_calls(TRACK),) * 6),),
        Expect(runs={"track_parcel": 6}, refusals=0, stops=(None,), model_calls=(7,)),
    ),
    Scenario(
        "a_change_restarts_counts",
        "A call that may change state (not read-only) between two repeats restarts their count.",
        (_track(), Tool("reroute_parcel", same("rerouted"), description="Send a parcel elsewhere.")),
        (
            UserTurn(
                "Reroute FR-7731 and check",
                (
                    _calls(TRACK),
                    _calls(TRACK),
                    _calls(Call("reroute_parcel")),
                    _calls(TRACK),
                    _calls(TRACK),
                ),
            ),
        ),
        Expect(runs={"track_parcel": 4, "reroute_parcel": 1}, refusals=0, stops=(None,), model_calls=(6,)),
    ),
    Scenario(
        "a_read_only_call_changes_nothing",
        "A read-only call between two repeats restarts nothing: the 3rd same call is still refused.",
        (_track(), Tool("parcel_history", same("FR-7731: 3 scans"), read_only=True, description="Past scans.")),
        (UserTurn("Check FR-7731", (_calls(TRACK), _calls(TRACK), _calls(Call("parcel_history")), _calls(TRACK))),),
        Expect(runs={"track_parcel": 2, "parcel_history": 1}, refusals=1, stops=(None,), model_calls=(5,)),
        {"read_only": {"parcel_history"}},
    ),
    Scenario(
        "results_in_types_json_lacks",
        "A tool returning the same value holding a datetime, a date, a UUID, a Decimal, an Enum and a dataclass "
        "is compared as the model reads it: the 3rd same call is refused.",
        (_track(typed_parcel),),
        (UserTurn("Where is FR-7731?", (_calls(TRACK),) * 3),),
        Expect(runs={"track_parcel": 2}, refusals=1, stops=(None,), model_calls=(4,)),
    ),
    Scenario(
        "volatile_tokens_are_not_progress",
        "The same answer stamped with a fresh request id, trace id and time each run is still the same answer.",
        (_track(fresh_ids),),
        (UserTurn("Where is FR-7731?", (_calls(TRACK),) * 3),),
        Expect(runs={"track_parcel": 2}, refusals=1, stops=(None,), model_calls=(4,)),
    ),
    Scenario(
        "parallel_calls_are_one_batch",
        "One response asks A, B, C, A, A: decided together before any runs, whatever the SDK's execution order "
        "and timing; the 3rd A is refused.",
        (
            _track(),
            Tool("parcel_history", same("3 scans"), description="Past scans."),
            Tool("carrier_status", same("all depots open"), description="The carrier's status."),
        ),
        (
            UserTurn(
                "Check everything on FR-7731",
                (_calls(TRACK, Call("parcel_history"), Call("carrier_status"), TRACK, TRACK),),
            ),
        ),
        Expect(
            runs={"track_parcel": 2, "parcel_history": 1, "carrier_status": 1},
            refusals=1,
            stops=(None,),
            model_calls=(2,),
        ),
    ),
    Scenario(
        "call_ids_reused_across_responses",
        "A model layer that answers call id call_0 in every response neither switches the guard off nor "
        "refuses a call that should run. (An SDK that itself drops a call whose id already ran, as the OpenAI "
        "Agents SDK does within a run, cannot express this: its driver lists it as unsupported.)",
        (_track(),),
        (UserTurn("Where is FR-7731?", (_calls(Call("track_parcel", id="call_0")),) * 4),),
        Expect(runs={"track_parcel": 2}, refusals=2, stops=(None,), model_calls=(5,)),
    ),
    Scenario(
        "one_call_id_for_different_calls",
        "One id used for three different calls in a response: all three are decided (and run) on their own.",
        (_track(),),
        (
            UserTurn(
                "Where are my three parcels?",
                (_calls(*(Call("track_parcel", query, id="call_0") for query in ("FR-1", "FR-2", "FR-3"))),),
            ),
        ),
        Expect(runs={"track_parcel": 3}, refusals=0, stops=(None,), model_calls=(2,)),
    ),
    Scenario(
        "failures_in_a_row_stop_the_turn",
        "Three failed calls in a row end the turn with too_many_errors; the caller gets the stop message.",
        (_track(fails()),),
        (UserTurn("Where are my parcels?", tuple(_calls(Call("track_parcel", f"FR-{n}")) for n in range(6))),),
        Expect(runs={"track_parcel": 3}, refusals=0, stops=(StopReason.TOO_MANY_ERRORS,), model_calls=(3,)),
        {"max_errors_in_a_row": 3},
    ),
    Scenario(
        "a_retry_after_a_failure_runs",
        "Seed 002: a call that failed (a timeout) may be retried, and its success is a new result.",
        (_track(fails_once("FR-7731: in transit")),),
        (UserTurn("Where is FR-7731?", (_calls(TRACK), _calls(TRACK))),),
        Expect(runs={"track_parcel": 2}, refusals=0, stops=(None,), model_calls=(3,)),
    ),
    Scenario(
        "a_tool_the_agent_lacks_fails_like_any_other",
        "The model calls a tool the agent does not have (hex), again and again: the SDK answers each with its "
        "error, and the guard counts it as a failed call of that name, so the same failure is refused at the 3rd "
        "call and, refused 3 times, the turn ends (langchain#37961: about $26 in one turn).",
        (_track(),),
        (UserTurn("Convert 255 to hex", (_calls(Call("hex", "255")),) * 8),),
        Expect(runs={}, refusals=3, stops=(StopReason.IGNORED_REFUSALS,), model_calls=(5,)),
    ),
    Scenario(
        "max_model_calls_ends_the_turn",
        "A step budget: after 3 model calls the turn ends with max_steps, though every call made progress.",
        (_track(numbered()),),
        (UserTurn("Watch FR-7731", (_calls(TRACK),) * 10),),
        Expect(runs={"track_parcel": 3}, refusals=0, stops=(StopReason.MAX_STEPS,), model_calls=(3,)),
        {"max_model_calls": 3},
    ),
    Scenario(
        "a_write_is_not_sent_twice",
        "A destructive write (place_order) that succeeded is refused when sent again unchanged, though its "
        "receipt (a new order number) differs every time.",
        (Tool("place_order", order_placed, description="Place an order."),),
        (UserTurn("Order a parcel box", (_calls(Call("place_order", "box")),) * 3),),
        Expect(runs={"place_order": 1}, refusals=2, stops=(None,), model_calls=(4,)),
        {"destructive": {"place_order"}},
    ),
    Scenario(
        "a_stop_ends_the_loop_around_the_agent",
        "The agent runs in the SDK's own loop (3 rounds): the guard's stop in round 1 ends the turn and the "
        "loop; no later round starts, and the caller gets the stop message once.",
        (_track(),),
        (UserTurn("Keep checking FR-7731", (_calls(TRACK),) * 8),),
        Expect(
            runs={"track_parcel": 2},
            refusals=3,
            stops=(StopReason.IGNORED_REFUSALS,),
            model_calls=(5,),
            rounds=(1,),
        ),
        {"match": "tool", "count": "per_turn", "max_calls": 2, "max_refusals": 3},
        rounds=3,
    ),
    Scenario(
        "the_loop_around_the_agent_runs_every_round",
        "Without a stop, the SDK's loop runs the agent all 3 rounds (each ends at the model's answer), the "
        "guard in place: 5 model calls, a call with a new result in each of the first two rounds.",
        (_track(numbered()),),
        (UserTurn("Watch FR-7731", (_calls(TRACK), FINAL, _calls(TRACK), FINAL)),),
        Expect(runs={"track_parcel": 2}, refusals=0, stops=(None,), model_calls=(5,)),
        rounds=3,
    ),
    Scenario(
        "the_same_answer_round_after_round_ends_the_loop",
        "The SDK's loop re-prompts the agent (5 rounds); after one call it answers the same text each round, nothing "
        "else happening: with max_same_answers=3, the 3rd same answer ends the turn at the next model call (round "
        "4's first), and no later round runs.",
        (_track(),),
        (UserTurn("Keep watching FR-7731", (_calls(TRACK),)),),
        Expect(
            runs={"track_parcel": 1},
            refusals=0,
            stops=(StopReason.REPEATED_ANSWER,),
            model_calls=(4,),
            rounds=(4,),
        ),
        {"max_same_answers": 3},
        rounds=5,
    ),
    Scenario(
        "isolated_branches_count_apart",
        "Three branches that never see each other's results each make the same call once: none is refused "
        '("you already called" must be true for the model that reads it).',
        (_track(),),
        (UserTurn("Where is FR-7731?", (_calls(TRACK),)),),
        Expect(runs={"track_parcel": 3}, refusals=0, stops=(None,), model_calls=(6,)),
        branches=3,
    ),
    Scenario(
        "approved_calls_run_once_and_keep_counts",
        "A refund a human approves: the approved call runs once; its repeats are refused without anyone being "
        "asked, the approval round having kept the turn's counts; then the next turn's refund is asked and runs.",
        (Tool("refund_order", order_placed, needs_approval=True, description="Refund an order."),),
        (
            UserTurn("Refund order 7731", (_calls(Call("refund_order", "7731")),) * 3),
            UserTurn("Refund order 7732", (_calls(Call("refund_order", "7732")),)),
        ),
        Expect(runs={"refund_order": 2}, refusals=2, stops=(None, None), model_calls=(4, 2)),
        {"destructive": {"refund_order"}},
    ),
    Scenario(
        "a_rejected_call_is_not_put_to_a_human_again_and_again",
        "A refund the human rejects every time: the model asks for it again and again; after max_calls "
        "rejections the guard refuses it without anyone being asked (a rejection counts toward its repeats).",
        (Tool("refund_order", order_placed, needs_approval=True, rejects=True, description="Refund an order."),),
        (UserTurn("Refund order 7731", (_calls(Call("refund_order", "7731")),) * 4),),
        Expect(runs={}, refusals=2, stops=(None,), model_calls=(5,), asked={"refund_order": 2}),
        {"max_refusals": 3},
    ),
)
"""Every scenario; each adapter runs them all on its SDK's real loop."""


def scenario(name: str) -> Scenario:
    """The scenario named ``name``."""
    return next(item for item in SCENARIOS if item.name == name)


RETRIED = Scenario(
    "a_turn_retried_after_a_crash_runs_no_write_again",
    "Two processes serve one conversation through a shared store. The first tracks the parcel, then places the "
    "order and dies before telling the guard how it went; the retry of the same turn (the same request: the same "
    "conversation and turn ids) in a second process tracks again (its count goes on: 2 of 2), and the order is "
    "refused: it may have been placed (no outcome came), and placing it again would do it twice.",
    (_track(), Tool("place_order", order_placed, description="Place an order.")),
    (UserTurn("Order a parcel box and track FR-7731", (_calls(TRACK), _calls(Call("place_order", "box")))),),
    Expect(runs={"track_parcel": 2, "place_order": 1}, refusals=1, stops=(None,), model_calls=(3,)),
    {"destructive": {"place_order"}, "read_only": {"track_parcel"}},
    crash=Crash("place_order", 1),
)
"""The two-process scenario (``run_retried``); apart from ``SCENARIOS``, which one process runs."""

CRASH_EXIT = 75
"""The exit code of the process that dies at a scenario's crash."""
CONVERSATION = "conv-retried"
"""The conversation id both processes of ``run_retried`` serve."""
TURN = "turn-retried"
"""The turn id both processes of ``run_retried`` name (the retried request's)."""


class SharedToolBox(ToolBox):
    """A ``ToolBox`` whose runs are counted in a file (``runs.json``), shared by the processes of ``run_retried``;
    with ``crash``, the run the scenario's ``Crash`` names ends the process at once (``os._exit``: nothing after
    it runs, nothing is flushed), after its run is counted."""

    def __init__(self, scenario: Scenario, folder: Path, *, crash: bool) -> None:
        super().__init__(scenario)
        self.path = folder / "runs.json"
        self.crash = scenario.crash if crash else None
        self._load()

    def run(self, name: str, query: str) -> Any:
        """Count the run in the file (under a lock), then crash there if it is the crash's, else return the result."""
        import fcntl  # POSIX: the two processes of a retry take turns

        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._load()
            self.runs[name] += 1
            self.path.write_text(json.dumps(self.runs))
        if self.crash is not None and (name, self.runs[name]) == (self.crash.tool, self.crash.run):
            os._exit(CRASH_EXIT)
        return self.scenario.tool(name).results(self.runs[name], query)

    def _load(self) -> None:
        if self.path.exists():
            self.runs.update(json.loads(self.path.read_text()))


def run_retried(
    driver: str, scenario: Scenario, folder: Path, *, path: Sequence[str] = (), timeout: float = 300
) -> tuple[int, TurnOutcome, ToolBox]:
    """Run ``scenario``'s first turn in a process that dies at its crash, then its retry in a second process, both
    with ``driver`` (``"package.module:Class"``, built with no arguments; ``path``: folders to import it from) and
    one ``SQLiteStore`` in ``folder``. Returns the first process's exit code, the retry's outcome, and the runs
    both made."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*path, *filter(None, [env.get("PYTHONPATH")])])
    codes = []
    for role in ("crash", "retry"):
        command = [sys.executable, "-m", "repeat_hooks.kit.conformance", driver, scenario.name, str(folder), role]
        codes.append(subprocess.run(command, timeout=timeout, check=False, env=env).returncode)
    if codes[1] != 0:
        raise AssertionError(f"scenario {scenario.name}: the retry's process exited {codes[1]}")
    saved = json.loads((folder / "outcome.json").read_text())
    stop = saved.pop("stop")
    outcome = TurnOutcome(stop=None if stop is None else Stop.model_validate(stop), **saved)
    return codes[0], outcome, SharedToolBox(scenario, folder, crash=False)


def check_retried(scenario: Scenario, exit_code: int, outcome: TurnOutcome, box: ToolBox) -> None:
    """Raise ``AssertionError`` saying what differs from what ``scenario`` expects of a crash and its retry: the
    first process died at the crash, and the runs of both and the retry's turn are the scenario's."""
    if exit_code != CRASH_EXIT:
        raise AssertionError(f"scenario {scenario.name}: the first process exited {exit_code}, not at the crash")
    check(scenario, box, [outcome])


def _main(argv: Sequence[str]) -> int:
    """``python -m repeat_hooks.kit.conformance DRIVER SCENARIO FOLDER crash|retry``: one process of ``run_retried``."""
    from ..stores.sqlite import SQLiteStore

    driver_path, name, folder_text, role = argv
    module, _, attribute = driver_path.partition(":")
    driver = getattr(importlib.import_module(module), attribute)()
    retried = next(item for item in (RETRIED, *SCENARIOS) if item.name == name)
    folder = Path(folder_text)
    box = SharedToolBox(retried, folder, crash=role == "crash")
    store = SQLiteStore(folder / "states.db")
    outcome = driver.run_turn(retried, box, store=store, conversation_id=CONVERSATION, turn_id=TURN)
    saved = asdict(outcome)
    saved["stop"] = None if outcome.stop is None else outcome.stop.model_dump(mode="json")
    (folder / "outcome.json").write_text(json.dumps(saved))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
