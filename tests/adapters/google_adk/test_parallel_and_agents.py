"""Parallel calls in one response, sub-agents and transfers: one invocation is one turn, counted exactly."""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.agent_tool import AgentTool
from repeat_hooks_google_adk import RepeatGuardPlugin, read_state
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call, keep_calling, text

from repeat_hooks import Policy, StopReason

from .conftest import ARGS, REFUSAL, STOPPED, TRACKED, USER, Carrier, new_session, run_turn, runner_for


async def test_parallel_identical_calls_are_counted_exactly(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS, parallel=3))
    plugin = RepeatGuardPlugin(Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), plugin)
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking FR-7731")

    # 3 calls at once: exactly 2 ran, the 3rd was refused; the next two responses' calls were all refused.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    first = model.responses_received(1)
    assert sorted(map(str, first.values())) == sorted(map(str, [{"status": TRACKED}] * 2 + [{"error": REFUSAL}]))
    assert turn.tool_responses[3:] == [{"error": REFUSAL}] * 6
    # Refusals count once per model response: 3 responses with refusals, so no 4th model call.
    assert model.calls == 3
    assert turn.final_text == STOPPED
    # What the session service persisted (ADK merges the parallel calls' state deltas) is the exact count.
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    state = read_state(session)
    assert list(state.turn.counts.values()) == [9]
    assert state.turn.refusals == 7 and state.turn.refused_responses == 3 and state.turn.responses == 3


async def test_parallel_calls_with_different_arguments_all_run(carrier: Carrier) -> None:
    numbers = ["FR-1", "FR-2", "FR-3"]
    batch = [function_call("track_parcel", {"tracking_number": n}, f"c{n}") for n in numbers]
    model = ScriptedLlm(batch, [text("All three are in transit.")])
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), RepeatGuardPlugin(Policy()))

    turn = await run_turn(runner, await new_session(runner), "Track FR-1, FR-2 and FR-3")

    assert sorted(carrier.calls) == numbers
    assert turn.final_text == "All three are in transit."


async def test_a_transfer_to_a_sub_agent_counts_in_the_same_turn(carrier: Carrier) -> None:
    tracker_model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    tracker = LlmAgent(name="parcel_tracker", model=tracker_model, tools=[carrier.tool])
    desk_model = ScriptedLlm(
        [function_call("track_parcel", ARGS, "d1")],
        [function_call("transfer_to_agent", {"agent_name": "parcel_tracker"}, "d2")],
    )
    desk = LlmAgent(name="front_desk", model=desk_model, tools=[carrier.tool], sub_agents=[tracker])
    # The default count="progress": a repeat counts while nothing that could change its result ran in
    # between. transfer_to_agent changes no data (the adapter says so), so it restarts no count.
    runner = runner_for(desk, RepeatGuardPlugin(Policy(match="tool", max_calls=2, max_refusals=3)))
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking FR-7731")

    # The desk's call and the tracker's first call make 2: the tracker's 2nd call is already refused.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert {e.author for e in turn.events} >= {"front_desk", "parcel_tracker"}
    assert tracker_model.responses_received(1) == {"call_1": {"status": TRACKED}}
    refused = tracker_model.responses_received(2)["call_2"]["error"]
    assert refused.startswith("Refused: you already called track_parcel 2 times")
    assert tracker_model.calls == 4
    assert turn.final.author == "parcel_tracker"
    assert turn.final_text == STOPPED
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    state = read_state(session)
    assert state.turn.number == 1 and state.turn.id == turn.invocation_id
    assert state.turn.responses == 2 + 4
    assert state.turn.stop is not None and state.turn.stop.reason is StopReason.IGNORED_REFUSALS


async def test_concurrent_sessions_on_one_runner_are_kept_apart() -> None:
    calls: list[str] = []

    async def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        calls.append(tracking_number)
        await asyncio.sleep(0.001)  # let the other sessions' invocations interleave
        return {"status": f"{tracking_number}: in transit"}

    def args(request: Any) -> dict[str, Any]:
        from repeat_hooks_google_adk.testing import user_text

        return {"tracking_number": user_text(request).split()[-1]}

    model = ScriptedLlm(then=keep_calling("track_parcel", args))  # one model, one plugin, one runner
    plugin = RepeatGuardPlugin(Policy(match="tool", max_calls=2, max_refusals=3))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel]), plugin)
    numbers = [f"FR-{n}" for n in range(1, 6)]
    sessions = [await new_session(runner, user=f"user-{n}") for n in numbers]

    turns = await asyncio.gather(
        *(
            run_turn(runner, session, f"Keep checking {n}", user=f"user-{n}")
            for session, n in zip(sessions, numbers, strict=True)
        )
    )

    assert sorted(calls) == sorted(numbers * 2)  # each session's 2 calls, none more, none fewer
    assert len(set(calls[:5])) > 1  # the invocations did interleave
    assert model.calls == 5 * len(numbers)
    for turn, session_id, n in zip(turns, sessions, numbers, strict=True):
        assert turn.final_text == STOPPED
        session = await runner.session_service.get_session(
            app_name=runner.app_name, user_id=f"user-{n}", session_id=session_id
        )
        assert session is not None
        state = read_state(session)
        assert state.turn.id == turn.invocation_id
        assert state.turn.responses == 5 and state.turn.refusals == 3


async def test_an_agent_used_as_a_tool_counts_in_the_callers_turn(carrier: Carrier) -> None:
    tracker_model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    tracker = LlmAgent(name="parcel_tracker", model=tracker_model, tools=[carrier.tool])
    desk_model = ScriptedLlm(
        [function_call("track_parcel", ARGS, "d1")],
        [function_call("parcel_tracker", {"request": "Keep checking FR-7731"}, "d2")],
        then=keep_calling("track_parcel", ARGS),
    )
    desk = LlmAgent(name="front_desk", model=desk_model, tools=[carrier.tool, AgentTool(tracker)])
    runner = runner_for(desk, RepeatGuardPlugin(Policy(match="tool", max_calls=2, max_refusals=3)))
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Keep checking FR-7731")

    # The nested run (an invocation of its own, in a session of its own) is part of the desk's turn:
    # the desk's call and the tracker's first make 2, and the tracker's next 3 are refused.
    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert tracker_model.calls == 4
    assert turn.tool_responses[1] == {"result": STOPPED}  # what the tracker answered the desk
    # The stop reached the desk's turn too: no further model call, the same final message.
    assert desk_model.calls == 2
    assert turn.final_text == STOPPED
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    state = read_state(session)
    assert state.turn.number == 1 and state.turn.id == turn.invocation_id
    assert state.turn.responses == 2 + 4


async def test_an_agent_used_as_a_tool_is_itself_counted(carrier: Carrier) -> None:
    tracker_model = ScriptedLlm(then=lambda model, request: "FR-7731 is in transit.")
    tracker = LlmAgent(name="parcel_tracker", model=tracker_model, tools=[carrier.tool])
    ask = {"request": "Where is FR-7731?"}
    desk_model = ScriptedLlm(
        [function_call("parcel_tracker", ask, "d1")], [function_call("parcel_tracker", ask, "d2")], "In transit."
    )
    desk = LlmAgent(name="front_desk", model=desk_model, tools=[AgentTool(tracker)])
    plugin = RepeatGuardPlugin(Policy(count="per_turn", limits={"parcel_tracker": 1}))
    runner = runner_for(desk, plugin)

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    # The nested run works on a copy of the session state, which must already hold the call's count.
    assert tracker_model.calls == 1
    assert turn.tool_responses[0] == {"result": "FR-7731 is in transit."}
    assert turn.tool_responses[1]["error"].startswith("Refused: you already called parcel_tracker")
    assert turn.final_text == "In transit."
