"""The conformance kit on the core itself: a reference driver (the simplest agent loop an adapter could
drive) runs every scenario, so the catalogue is known to be consistent before any SDK meets it."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from pathlib import Path

import pytest

from repeat_hooks import GuardState, Refusal, StateStore, Stop, StopRepeatedCalls, ToolCall
from repeat_hooks.kit import GuardCore
from repeat_hooks.kit.conformance import (
    FINAL,
    RETRIED,
    SCENARIOS,
    STOPPED,
    Call,
    Cursor,
    Scenario,
    ToolBox,
    ToolFailed,
    TurnOutcome,
    call_id,
    check,
    check_retried,
    fails,
    fails_once,
    fresh_ids,
    numbered,
    order_placed,
    run_retried,
    same,
    typed_parcel,
)
from repeat_hooks.result import model_view

HERE = Path(__file__).parent


class ReferenceDriver:
    """An agent loop in a few lines: the guard's hooks at the five points, parallel calls as one batch; a loop
    around the agent (``rounds``) that a stop ends; isolated ``branches``, a guard each; a human asked about
    each call of a tool that needs approval once the guard lets it through."""

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        branches = [(StopRepeatedCalls(policy=scenario.policy), Cursor(scenario)) for _ in range(scenario.branches)]
        outcomes = []
        for number, _turn in enumerate(scenario.turns):
            seen: list[str] = []
            finals: list[str] = []
            rounds = 0
            for guard, cursor in branches:
                guard.pre_agent_turn(turn_id=f"t{number}")
                cursor.start_turn(number)
                for _round in range(scenario.rounds):
                    rounds += 1
                    finals.append(self.agent(scenario, box, guard, cursor, seen))
                    if guard.stop is not None:
                        break
            stops = [guard.stop for guard, _ in branches if guard.stop is not None]
            outcomes.append(
                TurnOutcome(
                    final=finals[-1],
                    stop=stops[0] if stops else None,
                    seen=seen,
                    model_calls=sum(cursor.step for _, cursor in branches),
                    stop_messages=sum(final.startswith(STOPPED) for final in finals),
                    rounds=rounds if scenario.rounds > 1 else 1,
                )
            )
        return outcomes

    def agent(self, scenario: Scenario, box: ToolBox, guard: StopRepeatedCalls, cursor: Cursor, seen: list[str]) -> str:
        """One run of the agent, to its answer or the guard's stop: the final text."""
        tools = {tool.name: tool for tool in scenario.tools}
        for _step in range(50):
            stop = guard.pre_llm_call()
            if stop is not None:
                return stop.message
            reply = cursor.next()
            guard.post_llm_call(answer=reply if isinstance(reply, str) else None)
            if isinstance(reply, str):
                return reply
            calls = [
                ToolCall(c.tool, {"query": c.query}, call_id=i, read_only=getattr(tools.get(c.tool), "read_only", None))
                for c, i in reply
            ]
            for call, decision in zip(calls, guard.pre_tool_calls(calls), strict=True):
                if decision is not None:
                    seen.append(decision.message)
                    continue
                if call.name not in tools:  # a tool the agent lacks: the loop's error, as a failed call
                    guard.post_tool_call(call, False, result=f"Error: {call.name} is not a tool")
                    seen.append(f"Error: {call.name} is not a tool")
                    continue
                if tools[call.name].needs_approval and not box.ask(call.name, call.arguments["query"]):
                    guard.policy.record_rejection(guard.state, call)  # the human rejected it: it does not run
                    seen.append("The reviewer rejected this call.")
                    continue
                try:
                    result, ok = box.run(call.name, call.arguments["query"]), True
                except ToolFailed as error:
                    result, ok = str(error), False
                note = guard.post_tool_call(call, ok, result=result)
                seen.append(str(result) if note is None else f"{result}\n\n{note}")
        raise AssertionError("50 steps without an answer")

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        """The first turn, its state in ``store`` (as an adapter given ``store=`` keeps it), the turn named."""
        guard = StoredGuard(GuardCore(scenario.policy, owner="Reference", store=store), conversation_id, turn_id)
        cursor = Cursor(scenario)
        cursor.start_turn(0)
        seen: list[str] = []
        final = self.agent(scenario, box, guard, cursor, seen)  # type: ignore[arg-type]  # the hook's methods
        stop = asyncio.run(guard.core.stop_of(conversation_id, turn_id))
        return TurnOutcome(final, stop, seen, model_calls=cursor.step, stop_messages=int(final.startswith(STOPPED)))


class StoredGuard:
    """The hook's methods on a conversation's state in a store: each one update of the store (``GuardCore``)."""

    def __init__(self, core: GuardCore, key: str, turn_id: str) -> None:
        self.core, self.key, self.turn_id = core, key, turn_id
        self.policy = core.policy

    def pre_llm_call(self) -> Stop | None:
        return self.core.update_now(
            self.key, lambda state: self.policy.decide_model_call(state, turn_id=self.turn_id), outage=self.core.ended
        )

    def post_llm_call(self, answer: str | None = None) -> None:
        self.core.update_now(
            self.key,
            lambda state: self.policy.record_model_call(state, answer=answer, turn_id=self.turn_id),
            outage=None,
        )

    def pre_tool_calls(self, calls: list[ToolCall]) -> list[Refusal | None]:
        return self.core.update_now(
            self.key,
            lambda state: self.policy.decide_tool_calls(state, calls, turn_id=self.turn_id),
            outage=[self.core.refused] * len(calls),
        )

    def post_tool_call(self, call: ToolCall, ok: bool, *, result: object) -> str | None:
        def record(state: GuardState) -> str | None:
            self.policy.record_tool_result(state, call, ok=ok, result=result, turn_id=self.turn_id)
            return self.policy.warning(state, call)

        return self.core.update_now(self.key, record, outage=None)


# Two fresh interpreters (a few seconds): kept in mutation testing, which then sees the harness that runs them.
def test_a_turn_retried_after_a_crash_runs_no_write_again(tmp_path: Path) -> None:
    """The reference loop with its state in a store: the first process dies right after the order ran, the
    retry in a second process refuses it (its outcome never came) and tracks on from where the first stopped."""
    code, outcome, box = run_retried("test_conformance:ReferenceDriver", RETRIED, tmp_path, path=[str(HERE)])
    check_retried(RETRIED, code, outcome, box)
    assert outcome.seen[0] == "FR-7731: in transit"
    assert outcome.seen[1].startswith("Refused: place_order with these exact arguments was already sent")


def test_check_retried_catches_a_retry_that_starts_the_turn_afresh(tmp_path: Path) -> None:
    """A driver that names a new turn on the retry (every count afresh): the order runs twice, and check says so."""
    code, outcome, box = run_retried("test_conformance:ForgetfulDriver", RETRIED, tmp_path, path=[str(HERE)])
    with pytest.raises(AssertionError, match=r"tool runs \{'track_parcel': 2, 'place_order': 2\}"):
        check_retried(RETRIED, code, outcome, box)
    with pytest.raises(AssertionError, match="the first process exited 0, not at the crash"):
        check_retried(RETRIED, 0, outcome, box)


class ForgetfulDriver(ReferenceDriver):
    """Names the turn anew in each process, as an adapter that ignores the retried request's turn id would."""

    def run_turn(
        self, scenario: Scenario, box: ToolBox, *, store: StateStore, conversation_id: str, turn_id: str
    ) -> TurnOutcome:
        return super().run_turn(scenario, box, store=store, conversation_id=conversation_id, turn_id=uuid.uuid4().hex)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_holds_on_the_reference_loop(scenario: Scenario) -> None:
    box = ToolBox(scenario)
    check(scenario, box, ReferenceDriver().run(scenario, box))


def test_check_names_what_differs() -> None:
    scenario = SCENARIOS[1]
    box = ToolBox(scenario)
    box.runs["track_parcel"] = 3
    with pytest.raises(AssertionError, match=r"tool runs \{'track_parcel': 3\}, expected \{'track_parcel': 2\}"):
        check(scenario, box, [TurnOutcome(FINAL, None, ["Refused: ..."], model_calls=4, stop_messages=0)])


def by_name(name: str) -> Scenario:
    return next(scenario for scenario in SCENARIOS if scenario.name == name)


def test_check_lists_every_difference_in_one_message() -> None:
    from repeat_hooks import StopReason

    scenario = by_name("seed_004_story")  # two turns; the first stopped for ignored refusals
    stop = Stop(message="I stopped: the same call was refused 3 times.", reason=StopReason.IGNORED_REFUSALS)
    with pytest.raises(AssertionError) as raised:
        check(scenario, ToolBox(scenario), [TurnOutcome("my answer", None, ["Refused: no", "x"], 7, stop_messages=0)])
    assert str(raised.value) == (
        "scenario seed_004_story: 1 turn outcomes for 2 turns; tool runs {}, expected {'track_parcel': 3}; "
        "1 refusals reached the model, expected 3; it saw [['Refused: no', 'x']]; "
        "turn 0: stop None, expected ignored_refusals; "
        "turn 0: 7 model calls, expected 5 (none may follow a stop, in the agent or around it); "
        "turn 0: the stop message reached the caller 0 times, expected 1; "
        "turn 0: final text 'my answer' is not the guard's stop message; "
        "turn 0: final text 'my answer', expected 'done'"
    )
    box = ToolBox(scenario)
    box.runs["track_parcel"] = 3
    seen = ["FR-7731: in transit"] * 2 + ["Refused: again"] * 3
    stopped = TurnOutcome(final=stop.message, stop=stop, seen=seen, model_calls=5, stop_messages=1)
    check(scenario, box, [stopped, TurnOutcome(FINAL, None, ["FR-7731: in transit"], model_calls=2, stop_messages=0)])
    with pytest.raises(AssertionError, match=r"turn 0: final text 'done', expected 'I stopped: the same call"):
        check(scenario, box, [TurnOutcome(FINAL, stop, seen, model_calls=5, stop_messages=1), stopped])


def test_a_tool_box_counts_runs_and_passes_the_query() -> None:
    scenario = by_name("new_results_are_progress")
    box = ToolBox(scenario)
    assert [box.run("track_parcel", query) for query in ("FR-1", "FR-2")] == ["FR-1: run 1", "FR-2: run 2"]
    assert box.runs == {"track_parcel": 2}


def test_call_ids_are_the_calls_own_or_numbered_by_position() -> None:
    assert call_id(1, 2, 3, Call("track_parcel")) == "call_1_2_3"
    assert call_id(1, 2, 3, Call("track_parcel", id="c9")) == "c9"
    assert call_id(1, 2, 3, Call("track_parcel", id="")) == ""


def test_the_scripted_results() -> None:
    assert [same("x")(run, "FR-1") for run in (1, 2)] == ["x", "x"]
    assert numbered()(2, "FR-1") == "FR-1: run 2"
    assert numbered("{query}/{run}")(3, "FR-1") == "FR-1/3"
    with pytest.raises(ToolFailed, match=r"^FR-1: carrier timeout \(attempt 4\)$"):
        fails()(4, "FR-1")
    with pytest.raises(ToolFailed, match=r"^FR-1 down 2$"):
        fails("{query} down {run}")(2, "FR-1")
    once = fails_once("delivered")
    with pytest.raises(ToolFailed, match=r"^FR-1: carrier timeout$"):
        once(1, "FR-1")
    assert once(2, "FR-1") == once(3, "FR-1") == "delivered"
    assert order_placed(3, "FR-1") == {"order": "ORD-3", "item": "FR-1"}


def test_a_typed_parcel_as_the_model_reads_it() -> None:
    assert model_view(typed_parcel(1, "FR-1")) == {
        "parcel": {"number": "FR-1", "status": "in_transit", "weight_kg": "1.25"},
        "scanned_at": "2026-11-30T09:15:00Z",
        "due": "2026-12-03",
        "carrier_id": "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f",
    }
    assert typed_parcel(2, "FR-1") == typed_parcel(1, "FR-1")


def test_fresh_ids_change_only_their_ids_and_time() -> None:
    first, second = fresh_ids(1, "FR-1"), fresh_ids(2, "FR-1")
    assert first["status"] == second["status"] == "FR-1: in transit"
    assert (first["checked_at"], second["checked_at"]) == ("2026-12-01T10:00:01", "2026-12-01T10:00:02")
    assert first["request_id"] != second["request_id"] and str(uuid.UUID(first["request_id"])) == first["request_id"]
    assert first["trace"] != second["trace"] and re.fullmatch("[0-9a-f]{40}", first["trace"])
    assert set(first) == {"status", "request_id", "trace", "checked_at"}


def test_the_retry_harness_in_one_process_a_crash_then_its_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each role of ``python -m repeat_hooks.kit.conformance`` run here, the crash's ``os._exit`` caught: the first
    role dies right after the order's run is counted, the retry tracks on and refuses the order, and what it
    wrote is what ``run_retried`` reads back."""
    import json

    from repeat_hooks.kit import conformance

    class Died(BaseException):
        pass

    def exit_now(code: int) -> None:
        raise Died(code)

    monkeypatch.setattr(conformance.os, "_exit", exit_now)
    monkeypatch.syspath_prepend(str(HERE))
    roles = ["test_conformance:ReferenceDriver", RETRIED.name, str(tmp_path)]
    with pytest.raises(Died) as died:
        conformance._main([*roles, "crash"])
    assert died.value.args == (conformance.CRASH_EXIT,)
    assert json.loads((tmp_path / "runs.json").read_text()) == {"track_parcel": 1, "place_order": 1}
    assert conformance._main([*roles, "retry"]) == 0
    saved = json.loads((tmp_path / "outcome.json").read_text())
    assert saved["stop"] is None and saved["seen"][1].startswith("Refused: place_order with these exact arguments")
    box = conformance.SharedToolBox(RETRIED, tmp_path, crash=False)
    assert box.runs == {"track_parcel": 2, "place_order": 1}
    outcome = TurnOutcome(**{**saved, "stop": None})
    check_retried(RETRIED, conformance.CRASH_EXIT, outcome, box)
    with pytest.raises(AssertionError, match="the first process exited 0, not at the crash"):
        check_retried(RETRIED, 0, outcome, box)
    assert box.run("track_parcel", "FR-7731") == "FR-7731: in transit" and box.runs["track_parcel"] == 3


def test_check_counts_the_asks_of_a_tool_whose_human_rejects_every_call() -> None:
    """``a_rejected_call_is_not_put_to_a_human_again_and_again``: two asks, both rejected, then refused unasked."""
    scenario = by_name("a_rejected_call_is_not_put_to_a_human_again_and_again")
    box = ToolBox(scenario)
    outcomes = ReferenceDriver().run(scenario, box)
    assert box.asked["refund_order"] == 2
    check(scenario, box, outcomes)
    box.asked["refund_order"] = 3  # asked once too often
    with pytest.raises(AssertionError, match=r"refund_order: a human was asked 3 times and it ran 0 times, expected 2"):
        check(scenario, box, outcomes)
    box.asked["refund_order"], box.runs["refund_order"] = 2, 1  # the right asks, but one ran
    with pytest.raises(AssertionError, match=r"asked 2 times and it ran 1 times, expected 2 asks and no run \(every"):
        check(scenario, box, outcomes)
    box.runs["refund_order"] = 0
    no_asks = dataclasses.replace(scenario, expect=dataclasses.replace(scenario.expect, asked={}))
    with pytest.raises(AssertionError, match=r"asked 2 times and it ran 0 times, expected 0 asks"):
        check(no_asks, box, outcomes)  # a scenario naming no asks expects none


def test_a_stop_lag_is_one_figure_or_one_per_stop_reason() -> None:
    """An SDK with no hook before a model call states how many calls follow a stop: for every reason, or per reason
    (a reason it does not name: none)."""
    from repeat_hooks import StopReason

    scenario = by_name("seed_004_story")
    box = ToolBox(scenario)
    outcomes = ReferenceDriver().run(scenario, box)
    late = [dataclasses.replace(outcomes[0], model_calls=outcomes[0].model_calls + 1), outcomes[1]]
    check(scenario, box, late, stop_lag=1)
    check(scenario, box, late, stop_lag={StopReason.IGNORED_REFUSALS: 1})
    with pytest.raises(AssertionError, match="turn 0: 6 model calls, expected 5"):
        check(scenario, box, late, stop_lag={StopReason.MAX_STEPS: 1})  # another reason's lag: none for this one
    with pytest.raises(AssertionError, match="turn 0: 6 model calls, expected 5"):
        check(scenario, box, late)
    check(scenario, box, outcomes, stop_lag={StopReason.MAX_STEPS: 1})  # the second turn has no stop: no lag
