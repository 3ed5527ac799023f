"""``repeat-hooks tune``: a policy proposed from recordings, each suggestion measured by replay."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from repeat_hooks import Policy, StopRepeatedCalls, ToolCall
from repeat_hooks.cli import main
from repeat_hooks.observe import scope
from repeat_hooks.recording import DigestRecorder, field_digest, read_folder
from repeat_hooks.replay import RecordedCall, Trajectory, replay
from repeat_hooks.tune import ALARM_COST, Proposal, policy_text, report, tune

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
    from repeat_hooks.cli import read_trajectories

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
        script = "from repeat_hooks.cli import main; raise SystemExit(main())"
        child = subprocess.Popen(
            [sys.executable, "-c", script, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.read(10)
        child.stdout.close()  # as `| head` does
        assert child.wait(timeout=60) == 0 and child.stderr.read() == b"", command
