"""Agents sharing one ``AgentSession``: a sub-agent run by ``agent.as_tool(propagate_session=True)`` gets a copy of
its parent's ``session.state`` and merges its changes back. Each agent keeps its state under its own key
(``"repeat_hooks:<name>"``), so the child's runs never restart the parent's turn; ``stop_of(session, agent=...)``
reads one; two agents with no name (one key) fail loudly instead of counting as one."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import Agent
from repeat_hooks_agent_framework import GuardSetupError, RepeatGuardMiddleware, read_state, stop_of
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, keep_calling, tool_results

from repeat_hooks import StopReason

from .conftest import ARGS, REFUSAL, SEED_004, STOPPED, Carrier, client_of

ASK = {"task": "Keep checking FR-7731"}
PARENT_REFUSAL = REFUSAL.replace("track_parcel", "tracker")
PARENT_STOPPED = STOPPED.replace("track_parcel", "tracker")


def pair(carrier: Carrier, *, child_loops: bool, one_guard: bool, **names: Any) -> tuple[Agent[Any], Agent[Any]]:
    """An orchestrator whose model calls its ``tracker`` sub-agent (shared session) with the same task in every
    response; the tracker's model keeps calling ``track_parcel`` (``child_loops``) or answers at once. Seed 004 on
    both: one guard object for both (``one_guard``) or one each."""
    guard = RepeatGuardMiddleware(SEED_004)
    tracker = Agent(
        name=names.get("child", "tracker"),
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS) if child_loops else lambda c, m: "In transit."),
        tools=[carrier.tool],
        middleware=[guard if one_guard else RepeatGuardMiddleware(SEED_004)],
    )
    orchestrator = Agent(
        name=names.get("parent", "orchestrator"),
        client=ScriptedClient(then=keep_calling("tracker", ASK)),
        tools=[tracker.as_tool(name="tracker", description="Tracks parcels.", propagate_session=True)],
        middleware=[guard],
    )
    return orchestrator, tracker


@pytest.mark.parametrize("one_guard", [False, True], ids=["a_guard_each", "one_guard"])
@pytest.mark.parametrize("child_loops", [False, True], ids=["child_answers", "child_loops"])
async def test_a_sub_agent_on_its_parents_session_counts_apart_and_both_stop(
    carrier: Carrier, child_loops: bool, one_guard: bool
) -> None:
    orchestrator, tracker = pair(carrier, child_loops=child_loops, one_guard=one_guard)
    session = orchestrator.create_session()

    response = await orchestrator.run("Where is FR-7731?", session=session)

    # The parent's 3rd call of its sub-agent is refused (the sub-agent does not run), and the run ends after 3
    # refusals, as for any tool: the sub-agent's runs did not restart the parent's count.
    child_answer = STOPPED if child_loops else "In transit."
    assert tool_results(response) == [child_answer] * 2 + [PARENT_REFUSAL] * 3
    assert response.text == PARENT_STOPPED and client_of(orchestrator).calls == 5
    stop = stop_of(response)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    # The sub-agent ran twice, each run its own turn: a looping one stopped by its guard each time.
    assert client_of(tracker).calls == (10 if child_loops else 2)
    assert carrier.calls == (["FR-7731"] * 4 if child_loops else [])
    assert stop_of(session, agent="orchestrator") == stop
    child = read_state(session, agent="tracker")
    assert child.turn.number == 2 and (child.stop_of() is not None) is child_loops
    assert {"repeat_hooks:orchestrator", "repeat_hooks:tracker"} <= set(session.state)
    with pytest.raises(GuardSetupError, match=r"several agents' guard states .*stop_of\(session, agent="):
        stop_of(session)  # ambiguous: which agent's?


async def test_one_named_agent_reads_its_stop_from_the_session_without_naming_it(carrier: Carrier) -> None:
    agent = Agent(
        name="tracker",
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )
    session = agent.create_session()

    response = await agent.run("Keep checking FR-7731", session=session)

    assert [key for key in session.state if key.startswith("repeat_hooks")] == ["repeat_hooks:tracker"]
    assert stop_of(session) == stop_of(response) == stop_of(session, agent="tracker") is not None
    assert read_state(session).turn.refusals == 3 and read_state(session, agent="other").turn.number == 0


async def test_a_parent_and_a_sub_agent_both_without_a_name_fail_loudly(carrier: Carrier) -> None:
    """Without names both states would be ``session.state["repeat_hooks"]``, each sub-agent run restarting the
    parent's turn: the sub-agent's run raises, and the function loop does not absorb it (``MiddlewareFailure``)."""
    tracker = Agent(
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )
    client = ScriptedClient([function_call("tracker", ASK)], "No news.")
    orchestrator = Agent(
        client=client,
        tools=[tracker.as_tool(name="tracker", propagate_session=True)],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )

    with pytest.raises(GuardSetupError, match=r"no name runs in a tool call .*'repeat_hooks'.*Agent\(name="):
        await orchestrator.run("Where is FR-7731?", session=orchestrator.create_session())
    assert client_of(tracker).calls == 0 and carrier.calls == [] and client.calls == 1

    # With names, or a state_key of its own for the sub-agent's guard, the same setup runs.
    tracker.middleware = [RepeatGuardMiddleware(SEED_004, state_key="tracker")]
    tracker_tool = tracker.as_tool(name="tracker", propagate_session=True)
    orchestrator = Agent(
        client=ScriptedClient([function_call("tracker", ASK)], "No news."),
        tools=[tracker_tool],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )
    response = await orchestrator.run("Where is FR-7731?", session=orchestrator.create_session())
    assert tool_results(response) == [STOPPED] and response.text == "No news." and carrier.calls == ["FR-7731"] * 2
