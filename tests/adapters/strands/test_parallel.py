"""One model response's tool uses, run by Strands' concurrent executor, decided as one batch before any runs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from repeat_hooks_strands import RepeatGuardHooks, read_state
from repeat_hooks_strands.testing import ScriptedModel, tool_results, tool_use
from strands import Agent, tool
from strands.session import FileSessionManager
from strands.tools.executors import ConcurrentToolExecutor

ARGS = {"tracking_number": "FR-7731"}


def test_concurrent_calls_are_decided_before_any_runs(tmp_path: Path) -> None:
    """A, B, A, A in one response, run at the same time: the 3rd A is refused, and the batch's counts are on
    disk before any call runs. (With the sequential executor, B's success would restart A's count before the
    3rd A if calls were decided one at a time: ``test_conformance`` runs the batch scenarios with both.)"""
    running: list[str] = []
    overlapped = threading.Event()
    stored: list[dict[str, Any]] = []
    agent_file = tmp_path / "session_s1" / "agents" / "agent_default" / "agent.json"

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now (slow)."""
        running.append("track")
        stored.append(json.loads(json.loads(agent_file.read_text())["state"]["repeat_hooks"]))
        time.sleep(0.2)
        if len(running) > 1:
            overlapped.set()
        return "in transit"

    @tool
    def reroute_parcel(tracking_number: str) -> str:
        """Send a parcel elsewhere (fast)."""
        return "rerouted"

    track = tool_use("track_parcel", ARGS)
    agent = Agent(
        model=ScriptedModel([track, tool_use("reroute_parcel", ARGS), track, track], "Done."),
        tools=[track_parcel, reroute_parcel],
        hooks=[RepeatGuardHooks()],
        tool_executor=ConcurrentToolExecutor(),
        session_manager=FileSessionManager(session_id="s1", storage_dir=str(tmp_path)),
        callback_handler=None,
    )

    agent("Track FR-7731 and reroute it")

    assert overlapped.is_set()  # the calls really ran at the same time
    assert len(running) == 2
    seen = tool_results(agent)
    assert seen[:3] == ["in transit", "rerouted", "in transit"]
    assert seen[3].startswith("Refused: you already called track_parcel")
    # The batch's counts were saved by the session manager before any call ran (a crash mid-batch loses none).
    assert all(state["turn"]["refusals"] == 1 and state["turn"]["responses"] == 1 for state in stored)
    assert read_state(agent).turn.refusals == 1


def test_a_response_may_use_one_id_for_several_calls() -> None:
    runs: list[str] = []

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        runs.append(tracking_number)
        return f"{tracking_number}: in transit"

    calls = [tool_use("track_parcel", {"tracking_number": n}, "call_0") for n in ("FR-1", "FR-2", "FR-1", "FR-1")]
    agent = Agent(
        model=ScriptedModel(calls, "Done."),
        tools=[track_parcel],
        hooks=[RepeatGuardHooks()],
        callback_handler=None,
    )

    agent("Where are FR-1 and FR-2?")

    assert sorted(runs) == ["FR-1", "FR-1", "FR-2"]
    assert sum(text.startswith("Refused") for text in tool_results(agent)) == 1
