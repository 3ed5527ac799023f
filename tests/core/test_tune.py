"""``repeat-hooks tune``: a policy proposed from recordings, each suggestion measured by replay."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from repeat_hooks import Policy, StopRepeatedCalls, ToolCall
from repeat_hooks.observe import scope
from repeat_hooks.offline.cli import main
from repeat_hooks.offline.reading import read_folder
from repeat_hooks.offline.recording import DigestRecorder, field_digest
from repeat_hooks.offline.replay import RecordedCall, Trajectory, replay
from repeat_hooks.offline.tune import ALARM_COST, Proposal, Suggestion, policy_text, report, tune

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "corpora" / "tau2.jsonl.gz"


def steps(*calls: RecordedCall) -> list[list[RecordedCall]]:
    """One turn, one call per model response."""
    return [[call] for call in calls]


def pytest_output(passed: int, failed: int, ms: int) -> str:
    return json.dumps({"passed": passed, "failed": failed, "duration_ms": ms})


def coding_session(number: int, idle_reruns: int = 3) -> Trajectory:
    """A coding agent: it reruns the tests after every edit (new results: useful), and sometimes without one
    (``idle_reruns`` times: the same results, but a new duration every run)."""
    ms = iter(range(100 + number, 10_000, 7))
    pytest_ = {"cmd": "pytest -q"}
    idle = [
        (RecordedCall("git_status", {"form": form}, "clean"), RecordedCall("run_tests", pytest_, None))
        for form in ("long", "short", "porcelain")[:idle_reruns]
    ]  # nothing changed: each rerun a waste
    turn = steps(
        RecordedCall("read_file", {"path": "app.py"}, "v1"),
        RecordedCall("run_tests", pytest_, pytest_output(3, 2, next(ms))),
        RecordedCall("edit_file", {"path": "app.py", "patch": "a"}, "ok"),
        RecordedCall("run_tests", pytest_, pytest_output(4, 1, next(ms))),
        *(
            call if call.result is not None else RecordedCall("run_tests", pytest_, pytest_output(4, 1, next(ms)))
            for pair in idle
            for call in pair
        ),
        RecordedCall("edit_file", {"path": "app.py", "patch": "b"}, "ok"),
        RecordedCall("run_tests", pytest_, pytest_output(5, 0, next(ms))),
    )
    return Trajectory(f"coding-{number}", [turn], success=True)


def kept(proposal: Proposal) -> list[tuple[str, str]]:
    return [(suggestion.setting, suggestion.name) for suggestion in proposal.kept()]


def test_a_field_new_on_every_rerun_is_ignored_and_reruns_after_edits_stay_allowed() -> None:
    sessions = [coding_session(n) for n in range(4)]
    proposal = tune(sessions)
    assert kept(proposal) == [("ignore_results", "duration_ms"), ("read_only", "git_status")]
    assert proposal.policy == Policy(ignore_results={"duration_ms"}, read_only={"git_status"})
    names = {(s.setting, s.name) for s in proposal.suggestions}
    assert ("read_only", "edit_file") not in names  # its runs changed what the tests returned
    assert ("limits", "run_tests") not in names  # its reruns after an edit returned something new
    # Only the third and fourth runs with no edit since are refused (the limit is 2): two a session.
    assert (proposal.default.refused, proposal.proposed.refused) == (0, 8)
    assert proposal.proposed.harmful == 0 and proposal.proposed.waste_prevented == 8
    noise, lookup = (s for s in proposal.suggestions if s.kept and s.setting in ("ignore_results", "read_only"))
    assert (noise.harmful, noise.prevented) == (0, 0)  # alone it prevents nothing: every rerun follows a change...
    assert (lookup.harmful, lookup.prevented, lookup.touched) == (0, 8, 4)  # ...until git_status changes nothing
    assert noise.evidence == "changed on all 20 reruns of a call that returned it; the only change in 12"
    assert lookup.evidence == "ran 12 times between two runs of a call whose tool's results change, never changing it"


def test_a_lookup_that_never_changes_anything_becomes_read_only() -> None:
    def session(number: int) -> Trajectory:
        return Trajectory(
            f"s{number}",
            [
                steps(
                    RecordedCall("track", {"order": number}, "label created"),
                    RecordedCall("track", {"order": number}, "in transit"),  # track's results do change
                    RecordedCall("get_order", {"order": number, "part": 1}, "pending"),
                    RecordedCall("track", {"order": number}, "in transit"),
                    RecordedCall("get_order", {"order": number, "part": 2}, "pending"),
                    RecordedCall("track", {"order": number}, "in transit"),  # refused once get_order is read-only
                )
            ],
        )

    sessions = [session(n) for n in range(3)]
    proposal = tune(sessions)
    assert kept(proposal) == [("read_only", "get_order")]
    (suggestion,) = proposal.kept()
    assert (suggestion.harmful, suggestion.prevented) == (0, 3)
    assert replay(Policy(read_only={"get_order"}), sessions).waste_prevented == proposal.proposed.waste_prevented == 3


def test_a_suggestion_that_adds_a_harmful_refusal_is_rejected() -> None:
    # get_order never changes track's result, but knowing it read-only makes three refusals in a row,
    # the turn stops, and the new calls after it (the answer the user needed) are refused.
    def session(number: int) -> Trajectory:
        lookups = [RecordedCall("get_order", {"part": part}, "pending") for part in range(4)]
        track = RecordedCall("track", {"order": number}, "in transit")
        created = RecordedCall("track", {"order": number}, "label created")
        turn = steps(created, track, lookups[0], track, lookups[1], track, lookups[2], track, lookups[3], track)
        return Trajectory(f"s{number}", [[*turn, *steps(RecordedCall("refund", {"order": number}, "done"))]])

    proposal = tune([session(n) for n in range(2)])
    rejected = {(s.setting, s.name): s for s in proposal.suggestions if not s.kept}
    assert rejected[("read_only", "get_order")].why_not == "adds 2 harmful refusals"
    assert ("read_only", "get_order") not in kept(proposal)
    assert proposal.proposed.harmful == 0


def test_a_tool_whose_repeats_never_told_anything_new_gets_a_limit_of_one() -> None:
    def session(number: int) -> Trajectory:
        transfer = RecordedCall("transfer_to_human", {"reason": "refund"}, "Transferred")
        return Trajectory(f"s{number}", [steps(RecordedCall("lookup", {"n": number}, "x"), transfer, transfer)])

    proposal = tune([session(n) for n in range(3)])
    assert kept(proposal) == [("limits", "transfer_to_human")]
    assert proposal.policy == Policy(limits={"transfer_to_human": 1})
    assert (proposal.default.waste_prevented, proposal.proposed.waste_prevented, proposal.proposed.harmful) == (0, 3, 0)


def test_too_little_evidence_suggests_nothing() -> None:
    transfer = RecordedCall("transfer_to_human", {}, "Transferred")
    proposal = tune([Trajectory("one", [steps(transfer, transfer)])])
    assert proposal.suggestions == [] and proposal.policy == Policy()
    assert "Nothing in these recordings suggests a change" in report(proposal)


def test_the_policy_text_pastes_back_as_the_same_policy() -> None:
    policy = Policy(read_only={"b", "a"}, ignore_results={"t"}, limits={"x": 1}, max_cycle_period=None)
    text = policy_text(policy)
    assert text == 'Policy(read_only={"a", "b"}, max_cycle_period=None, ignore_results={"t"}, limits={"x": 1})'
    assert eval(text, {"Policy": Policy}) == policy
    assert policy_text(Policy()) == "Policy()"


def test_tune_reads_a_digest_recording_as_it_reads_the_full_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = [coding_session(n) for n in range(4)]
    full = tmp_path / "full.jsonl"
    full.write_text(
        "".join(
            json.dumps(
                {
                    "id": session.id,
                    "success": session.success,
                    "turns": [[call.__dict__ for response in turn for call in response] for turn in session.turns],
                }
            )
            + "\n"
            for session in sessions
        )
    )
    recorder = DigestRecorder(tmp_path / "digests")
    for session in sessions:
        recorder.write_trajectory(session)
    assert main(["tune", str(full)]) == 0
    from_full = capsys.readouterr().out
    assert main(["tune", str(tmp_path / "digests")]) == 0
    from_digests = capsys.readouterr().out
    # A recording holds the field's name as a digest only: the proposal names it so, and says so.
    unnamed = f"#{field_digest('duration_ms')}"
    assert "duration_ms" not in from_digests and f"({unnamed}: result fields a digest recording names" in from_digests
    named = "\n".join(line for line in from_digests.splitlines() if not line.startswith(f"({unnamed}"))
    assert named.replace(unnamed, "duration_ms").split() == from_full.split()
    assert 'Policy(read_only={"git_status"}, ignore_results={"duration_ms"})' in from_full
    assert re.search(r"read_only \+= git_status\s+\+0\s+\+8\s+\+4\s+ran 12 times", from_full)
    assert re.search(r"waste prevented\s+0\s+8\n", from_full)


@pytest.mark.slow
def test_tune_on_the_tau2_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(CORPUS)]) == 0
    out = capsys.readouterr().out
    (pasted,) = re.findall(r"^    (Policy\(.*\))$", out, re.MULTILINE)
    proposed = eval(pasted, {"Policy": Policy})
    assert proposed != Policy()
    from repeat_hooks.offline.cli import read_trajectories

    trajectories = list(read_trajectories(CORPUS))
    default, tuned = replay(Policy(), trajectories), replay(proposed, trajectories)
    assert tuned.harmful == 0 and tuned.waste_prevented >= default.waste_prevented
    assert re.search(rf"waste prevented\s+{default.waste_prevented}\s+{tuned.waste_prevented}\n", out)


def test_the_help_names_record_and_tune(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "record write trajectories as a digest-only recording (no values)" in text
    assert "tune propose a policy from recordings (digest or full), measured" in text
    with pytest.raises(SystemExit):
        main(["record", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the folder to write it in" in text and "a file whose bytes (16 or more) key every digest" in text
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "or a DigestRecorder's folder (its files read together)" in text and "--policy JSON" in text
    with pytest.raises(SystemExit):
        main(["record", "x.jsonl"])  # --out is required
    assert "--out" in capsys.readouterr().err


def test_a_tool_between_runs_that_never_change_is_no_evidence() -> None:
    # A green coding agent: it edits docs, and the tests pass the same every time. That the edits never changed
    # the tests' result says nothing: the tests never change at all.
    def session(number: int) -> Trajectory:
        calls = []
        for step in range(3):
            calls.append(RecordedCall("edit_file", {"path": f"docs/page{number}.md", "patch": f"p{step}"}, "applied"))
            calls.append(RecordedCall("run_tests", {"cmd": "pytest -q"}, "20 passed"))
        return Trajectory(f"green-{number}", [steps(*calls)], success=True)

    proposal = tune([session(n) for n in range(10)])
    assert ("read_only", "edit_file") not in {(s.setting, s.name) for s in proposal.suggestions}
    assert proposal.policy == Policy() and proposal.proposed.successful_with_refusal == 0


def test_false_alarms_must_be_outweighed_and_noise_is_never_proposed_alone() -> None:
    # One wasted rerun a session, each session successful: read_only git_status would refuse it, but it gives
    # every successful run a refusal for one call saved. Without it, ignoring duration_ms prevents nothing.
    sessions = [coding_session(n, idle_reruns=2) for n in range(4)]
    proposal = tune(sessions)
    why = {(s.setting, s.name): s.why_not for s in proposal.suggestions}
    assert why[("read_only", "git_status")] == (
        f"gives 4 more successful runs a refusal or stop, for 4 wasted calls prevented (at least {ALARM_COST} per "
        "run needed)"
    )
    assert why[("ignore_results", "duration_ms")] == "prevents nothing, and no other suggestion needs it"
    assert proposal.kept() == [] and proposal.policy == Policy()
    assert "duration_ms" not in policy_text(proposal.policy)


def test_calls_the_live_guard_refused_are_no_evidence(tmp_path: Path) -> None:
    # The tracker ran twice (the same answer), then the model asked three more times: refused, nothing ran.
    with DigestRecorder(tmp_path), scope(conversation_id="c1"):
        guard = StopRepeatedCalls(policy=Policy(max_refusals=None))
        guard.pre_agent_turn()
        for _ in range(5):
            guard.pre_llm_call()
            call = ToolCall("track", {"id": 1})
            if guard.pre_tool_call(call) is None:
                guard.post_tool_call(call, result="in transit")
    (recording,) = read_folder(tmp_path, pytest.fail)
    assert [call.refused for turn in recording.turns for response in turn for call in response] == [
        None,
        None,
        "repeat",
        "repeat",
        "repeat",
    ]
    assert tune([recording]).suggestions == []  # one repeat that ran is too little evidence


def test_tune_from_a_policy_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sessions = [coding_session(n) for n in range(4)]
    path = tmp_path / "runs.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"id": s.id, "success": s.success, "turns": [[c.__dict__ for r in t for c in r] for t in s.turns]}
            )
            + "\n"
            for s in sessions
        )
    )
    assert main(["tune", str(path), "--policy", '{"read_only": ["git_status"], "max_calls": 3}']) == 0
    out = capsys.readouterr().out
    assert "read_only += git_status" not in out  # known already
    (pasted,) = re.findall(r"^    (Policy\(.*\))$", out, re.MULTILINE)
    assert eval(pasted, {"Policy": Policy}).max_calls == 3 and '"git_status"' in pasted


def test_output_cut_short_ends_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "runs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"s{n}", "turns": [[{"name": "get", "arguments": {"n": n}, "result": "x"}] * 3]}) + "\n"
            for n in range(200)
        )
    )
    for command in (["replay", str(path), "--json"], ["tune", str(path)]):
        script = "from repeat_hooks.offline.cli import main; raise SystemExit(main())"
        child = subprocess.Popen(
            [sys.executable, "-c", script, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.read(10)
        child.stdout.close()  # as `| head` does
        assert child.wait(timeout=60) == 0 and child.stderr.read() == b"", command


# -- each suggestion's figures, and why one is rejected ------------------------------------------------------


def by_name(proposal: Proposal) -> dict[tuple[str, str], Suggestion]:
    return {(suggestion.setting, suggestion.name): suggestion for suggestion in proposal.suggestions}


def tracking(number: int, lookups: int = 2, success: bool | None = None, hint: bool | None = None) -> Trajectory:
    """track's result changes once, then ``lookups`` lookups each between two runs of track that return the same:
    with lookup read-only, every third run of track in a row is refused (waste: it returned the same).
    ``hint``: the lookups' read-only hint, as an SDK that knows the tool records it."""
    track = RecordedCall("track", {"order": number}, "in transit")
    calls = [RecordedCall("track", {"order": number}, "label created"), track]
    for part in range(lookups):
        calls += [RecordedCall("lookup", {"part": part}, "pending", read_only=hint), track]
    return Trajectory(f"t{number}", [steps(*calls)], success=success)


def test_each_suggestion_is_judged_on_what_it_adds_to_the_default_summed_over_recordings() -> None:
    # The default already refuses a third status check, harmfully (it returned something new), and that gives
    # each successful session a refusal; a limit on transfer refuses one more call a session, a waste only.
    def session(number: int) -> Trajectory:
        status = RecordedCall("status", {"order": number}, "pending")
        shipped = RecordedCall("status", {"order": number}, "shipped")
        transfer = RecordedCall("transfer", {"to": "human"}, "Transferred")
        return Trajectory(f"s{number}", [steps(status, status, shipped, transfer, transfer)], success=True)

    sessions = [Trajectory("other", [steps(RecordedCall("weather", {}, "sunny"))]), *map(session, range(3))]
    proposal = tune(sessions)
    default = replay(Policy(), sessions)
    assert (default.harmful, default.waste_prevented, default.successful_with_refusal) == (3, 0, 3)
    assert (proposal.default.trajectories, proposal.default.harmful) == (4, 3)
    limit = by_name(proposal)[("limits", "transfer")]
    assert (limit.harmful, limit.prevented, limit.touched, limit.kept, limit.why_not) == (0, 3, 0, True, None)
    assert limit.evidence == "3 repeats, none returned anything new"
    assert proposal.policy == Policy(limits={"transfer": 1})
    assert (proposal.proposed.harmful, proposal.proposed.waste_prevented) == (3, 3)  # the default's 3, no more

    # A base policy's digest key stays on the proposed policy (replays need none; the guard does).
    keyed = tune(sessions, base=Policy(digest_key="k" * 32))
    assert keyed.policy == Policy(limits={"transfer": 1}, digest_key="k" * 32)
    assert (keyed.proposed.harmful, keyed.proposed.waste_prevented) == (3, 3)


def test_a_suggestion_that_adds_one_harmful_refusal_is_rejected() -> None:
    # One session: lookup read-only makes three refusals of track, the turn stops, and the refund is refused.
    session = tracking(0, lookups=4)
    session = replace(session, turns=[[*session.turns[0], *steps(RecordedCall("refund", {"order": 0}, "done"))]])
    proposal = tune([session])
    lookup = by_name(proposal)[("read_only", "lookup")]
    assert (lookup.harmful, lookup.kept, lookup.why_not) == (1, False, "adds 1 harmful refusal")
    assert proposal.policy == Policy() and proposal.proposed.harmful == 0


def test_a_suggestion_that_prevents_exactly_one_wasted_call_is_kept() -> None:
    transfer = RecordedCall("transfer", {"to": "human"}, "Transferred")
    note = RecordedCall("add_note", {"text": "called"}, "ok")  # a change: the repeat after it is allowed
    sessions = [
        Trajectory("a", [steps(transfer, transfer)]),
        Trajectory("b", [steps(transfer, note, transfer, note, transfer)]),
    ]
    proposal = tune(sessions)
    limit = by_name(proposal)[("limits", "transfer")]
    assert (limit.harmful, limit.prevented, limit.touched, limit.kept) == (0, 1, 0, True)
    assert proposal.policy == Policy(limits={"transfer": 1})


def test_a_suggestion_that_prevents_nothing_more_is_rejected() -> None:
    # lookup never changes track's result, but track never runs three times in a row: nothing to refuse.
    proposal = tune([tracking(n, lookups=1) for n in range(3)])
    lookup = by_name(proposal)[("read_only", "lookup")]
    assert (lookup.harmful, lookup.prevented, lookup.touched) == (0, 0, 0)
    assert (lookup.kept, lookup.why_not) == (False, "prevents nothing more on these recordings")
    assert proposal.policy == Policy()


def test_a_suggestion_that_is_no_valid_policy_is_rejected() -> None:
    proposal = tune([tracking(n) for n in range(3)], base=Policy(destructive={"lookup"}))
    lookup = by_name(proposal)[("read_only", "lookup")]
    assert lookup.kept is False and lookup.why_not is not None
    assert lookup.why_not.startswith("not a valid policy: ")
    assert "lookup is both in read_only and in destructive" in lookup.why_not
    assert proposal.policy == Policy(destructive={"lookup"})


@pytest.mark.parametrize(
    ("sessions", "figures", "why_not"),
    [
        ([(2, None), (1, None)], (1, 0), None),  # no false alarm: one wasted call saved is enough
        ([(2, True), (2, None)], (2, 1), None),  # one false alarm, two wasted calls saved: just enough
        (
            [(2, True), (1, None)],  # one false alarm for one wasted call saved
            (1, 1),
            "gives 1 more successful runs a refusal or stop, for 1 wasted calls prevented (at least 2 per run needed)",
        ),
    ],
)
def test_each_false_alarm_must_be_outweighed_by_two_wasted_calls_prevented(
    sessions: list[tuple[int, bool | None]], figures: tuple[int, int], why_not: str | None
) -> None:
    # Each session as (lookups, success): two lookups make one wasted run of track, refused with lookup read-only.
    proposal = tune([tracking(n, lookups, success) for n, (lookups, success) in enumerate(sessions)])
    lookup = by_name(proposal)[("read_only", "lookup")]
    assert (lookup.harmful, lookup.prevented, lookup.touched) == (0, *figures)
    assert (lookup.kept, lookup.why_not) == (why_not is None, why_not)
    assert proposal.policy == (Policy() if why_not else Policy(read_only={"lookup"}))


def test_suggestions_harmful_together_drop_the_one_preventing_least() -> None:
    # Alone, lookup read-only refuses one track a session, and a limit on transfer one transfer more than the
    # default: together three refusals stop each turn, and the refund after is refused.
    transfer = RecordedCall("transfer", {"to": "human"}, "Transferred")

    def session(number: int) -> Trajectory:
        turn = [*tracking(number).turns[0], *steps(transfer, transfer, transfer, RecordedCall("refund", {}, "done"))]
        return Trajectory(f"s{number}", [turn])

    sessions = [*map(session, range(3)), Trajectory("short", [steps(transfer, transfer)])]
    proposal = tune(sessions)
    lookup, limit = by_name(proposal)[("read_only", "lookup")], by_name(proposal)[("limits", "transfer")]
    assert (lookup.harmful, lookup.prevented, limit.harmful, limit.prevented) == (0, 3, 0, 4)
    assert (lookup.kept, lookup.why_not) == (False, "adds harmful refusals together with the others")
    assert (limit.kept, limit.why_not) == (True, None)
    assert proposal.policy == Policy(limits={"transfer": 1})
    assert replay(Policy(read_only={"lookup"}, limits={"transfer": 1}), sessions).harmful == 3  # what was avoided
    assert (proposal.proposed.harmful, proposal.proposed.waste_prevented) == (0, 7)


# -- what the analyses read from the recordings --------------------------------------------------------------


def test_a_lookup_needs_three_runs_of_evidence_to_be_suggested_read_only() -> None:
    assert tune([tracking(n, lookups=1) for n in range(2)]).suggestions == []  # ran twice between: too little
    (suggestion,) = tune([tracking(n, lookups=1) for n in range(3)]).suggestions
    assert (suggestion.setting, suggestion.name) == ("read_only", "lookup")
    assert (
        suggestion.evidence == "ran 3 times between two runs of a call whose tool's results change, never changing it"
    )


def test_a_tool_that_once_ran_between_two_runs_whose_result_changed_is_never_suggested_read_only() -> None:
    # In the first session the tracker's result changed across a run of lookup: lookup may well have changed it.
    track = RecordedCall("track", {"order": 9}, "in transit")
    blamed = Trajectory(
        "first", [steps(track, RecordedCall("lookup", {"part": 9}, "pending"), replace(track, result="delivered"))]
    )
    proposal = tune([blamed, *(tracking(n, lookups=3) for n in range(3))])
    assert ("read_only", "lookup") not in by_name(proposal)
    assert proposal.policy == Policy()


def test_a_failed_run_between_two_runs_whose_result_changed_is_not_blamed() -> None:
    track = RecordedCall("track", {"order": 9}, "in transit")
    failed = RecordedCall("lookup", {"part": 9}, "Error: timeout", ok=False)
    sessions = [
        Trajectory("first", [steps(track, failed, replace(track, result="delivered"))]),
        *map(tracking, range(3)),
    ]
    lookup = by_name(tune(sessions))[("read_only", "lookup")]
    assert (lookup.prevented, lookup.kept) == (3, True)
    assert lookup.evidence.startswith("ran 6 times between")


@pytest.mark.parametrize("hint", [True, False])
def test_a_tool_the_recording_hints_is_left_as_the_sdk_said(hint: bool) -> None:
    proposal = tune([tracking(n, hint=hint) for n in range(3)])
    assert ("read_only", "lookup") not in by_name(proposal)


def test_settings_the_base_policy_has_are_not_suggested_again() -> None:
    transfer = RecordedCall("transfer", {"to": "human"}, "Transferred")
    sessions = [*(tracking(n) for n in range(3)), *(Trajectory(f"x{n}", [steps(transfer, transfer)]) for n in range(3))]
    assert set(by_name(tune(sessions))) == {("read_only", "lookup"), ("limits", "transfer")}
    assert tune(sessions, base=Policy(read_only={"lookup"}, limits={"transfer": 1})).suggestions == []
    noisy = [poll_session(n) for n in range(3)]
    assert ("ignore_results", "checked_at") in by_name(tune(noisy))
    assert tune(noisy, base=Policy(ignore_results={"checked_at"})).suggestions == []


def test_calls_are_told_apart_by_their_arguments_in_any_key_order() -> None:
    # Each session reads order 1, order 2, then order 1 again (its keys in another order): one repeat, nothing new.
    def session(number: int) -> Trajectory:
        get = [RecordedCall("get_order", {"id": n, "fields": "all"}, f"order {n}") for n in (1, 2)]
        again = RecordedCall("get_order", {"fields": "all", "id": 1}, "order 1")
        return Trajectory(f"s{number}", [steps(*get, again)])

    (suggestion,) = tune([session(n) for n in range(3)]).suggestions
    assert (suggestion.setting, suggestion.name, suggestion.evidence) == (
        "limits",
        "get_order",
        "3 repeats, none returned anything new",
    )


def test_a_retry_that_succeeded_where_the_first_run_failed_told_something_new() -> None:
    def session(number: int) -> Trajectory:
        deploy = RecordedCall("deploy", {"env": "prod"}, None)
        return Trajectory(f"s{number}", [steps(replace(deploy, ok=False), deploy)])

    assert tune([session(n) for n in range(3)]).suggestions == []


class Screenshot:
    """A result with no stable form: the model reads whatever its repr is."""


def poll(job: int, status: str, checked_at: int, ok: bool = True) -> RecordedCall:
    return RecordedCall("poll", {"job": job}, {"status": status, "checked_at": checked_at}, ok=ok)


def poll_session(number: int) -> Trajectory:
    """A job polled three times, its status the same, its ``checked_at`` new every time: once ``checked_at`` is
    ignored, the third poll is refused (a waste)."""
    return Trajectory(f"p{number}", [steps(*(poll(number, "running", at) for at in range(3)))])


def test_a_field_of_noise_preventing_one_wasted_call_is_proposed() -> None:
    # Three times checked_at alone changed (twice in the first session, once in the second), and every time it was
    # there; a job that finished shows poll's results do change. Results with no stable form show no noise.
    other = Trajectory(
        "other",
        [
            steps(
                poll(7, "running", 10),
                poll(7, "running", 11),
                poll(8, "running", 12),
                poll(8, "done", 13),
                RecordedCall("screenshot", {}, Screenshot()),
                RecordedCall("profile", {}, {"owner": "<app.User>", "id": 1}),
            )
        ],
    )
    proposal = tune([poll_session(0), other])
    noise = by_name(proposal)[("ignore_results", "checked_at")]
    assert noise.evidence == "changed on all 4 reruns of a call that returned it; the only change in 3"
    assert (noise.harmful, noise.prevented, noise.touched, noise.kept) == (0, 1, 0, True)
    assert list(by_name(proposal)) == [("ignore_results", "checked_at")]
    assert proposal.policy == Policy(ignore_results={"checked_at"})
    assert (proposal.proposed.waste_prevented, proposal.proposed.harmful) == (1, 0)


def test_a_field_is_noise_only_if_it_changed_every_time_and_alone_three_times() -> None:
    assert tune([poll_session(0)]).suggestions == []  # the only change twice: too little
    unchanged_once = Trajectory("once", [steps(poll(7, "running", 10), poll(7, "running", 10))])
    proposal = tune([poll_session(0), poll_session(1), unchanged_once])
    assert ("ignore_results", "checked_at") not in by_name(proposal)


def test_runs_that_cannot_show_a_fields_noise_are_skipped() -> None:
    # A run that failed beside one that succeeded, a result that is no mapping, a result with a field more:
    # none is a rerun whose only change is checked_at, and none contradicts it.
    turn = steps(
        poll(5, "running", 1),
        poll(5, "running", 1, ok=False),
        *(poll(6, "running", at) for at in range(3)),
        RecordedCall("poll", {"job": 7}, "timeout"),
        poll(7, "running", 4),
        RecordedCall("poll", {"job": 7}, {"status": "running", "checked_at": 5, "eta": 3}),
    )
    proposal = tune([Trajectory("odd", [turn]), poll_session(0)])
    noise = by_name(proposal)[("ignore_results", "checked_at")]
    assert noise.evidence == "changed on all 5 reruns of a call that returned it; the only change in 4"
    assert (noise.prevented, noise.kept) == (2, True)


def test_a_field_that_also_occurs_nested_cannot_be_replayed_exactly_and_is_rejected() -> None:
    nested = Trajectory(
        "nested", [steps(RecordedCall("poll", {"job": 9}, {"status": "done", "last": {"checked_at": 3}}))]
    )
    proposal = tune([poll_session(0), poll_session(1), nested])
    noise = by_name(proposal)[("ignore_results", "checked_at")]
    assert (noise.kept, noise.why_not) == (
        False,
        "ignore_results: 'checked_at' occurs below the top level in nested, and a digest recording can drop it only "
        "at the top level (replay full trajectories to tune it)",
    )
    assert proposal.policy == Policy()


# -- the report ----------------------------------------------------------------------------------------------


def test_the_report_prints_the_policy_to_paste_then_each_suggestion_and_its_figures() -> None:
    transfer = RecordedCall("transfer", {"to": "human"}, "Transferred")

    def session(number: int) -> Trajectory:
        turn = [*tracking(number).turns[0], *steps(transfer, transfer, transfer, RecordedCall("refund", {}, "done"))]
        return Trajectory(f"s{number}", [turn])

    proposal = tune([*map(session, range(3)), Trajectory("short", [steps(transfer, transfer)])])
    text = report(proposal)
    assert text == "\n".join(
        [
            "Proposed policy (paste it):",
            "",
            '    Policy(limits={"transfer": 1})',
            "",
            "suggestion            harmful  prevented  touched  evidence",
            "read_only += lookup        +0         +3       +0  REJECTED (adds harmful refusals together with the "
            "others); ran 6 times between two runs of a call whose tool's results change, never changing it",
            "limits[transfer] = 1       +0         +4       +0  7 repeats, none returned anything new",
            "",
            "(what each suggestion adds, replayed beside the default, with the ignore_results kept for the",
            " others: harmful refusals, wasted calls prevented, successful runs given a refusal or a stop)",
        ]
    )
    (pasted,) = re.findall(r"^    (Policy\(.*\))$", text, re.MULTILINE)
    assert eval(pasted, {"Policy": Policy}) == proposal.policy


def test_the_report_names_the_fields_a_digest_recording_knows_by_digest_only() -> None:
    first, second = f"#{field_digest('checked_at')}", f"#{field_digest('duration_ms')}"
    proposal = Proposal(Policy(ignore_results={second, first}))
    unnamed = ", ".join(sorted([first, second]))
    assert report(proposal) == "\n".join(
        [
            "Proposed policy (paste it):",
            "",
            f"    {policy_text(proposal.policy)}",
            "",
            f"({unnamed}: result fields a digest recording names by digest only: replace each with the name whose "
            "repeat_hooks.offline.recording.field_digest(name, key) it is)",
            "",
            "Nothing in these recordings suggests a change from the default.",
        ]
    )


def test_the_policy_text_writes_every_kind_of_setting_as_python() -> None:
    policy = Policy(limits={"b": 2, "a": 1}, mask_volatile=False, count_failures=False, max_cost_usd=0.5)
    text = policy_text(policy)
    assert text == 'Policy(mask_volatile=False, limits={"a": 1, "b": 2}, count_failures=False, max_cost_usd=0.5)'
    assert eval(text, {"Policy": Policy}) == policy
