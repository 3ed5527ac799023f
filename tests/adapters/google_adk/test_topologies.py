"""A stop ends the invocation for the whole agent tree, and calls are counted per scope (what each model
saw): LoopAgent, SequentialAgent, ParallelAgent and transfers on ADK's real Runner, the model scripted."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from google.adk.agents import LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig
from repeat_hooks_google_adk import STOP_METADATA, RepeatGuardPlugin, stop_of
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call, keep_calling, text

from repeat_hooks import Policy, StopReason

from .conftest import ARGS, STOPPED, USER, Carrier, Turn, new_session, run_turn, runner_for

SEED_004 = Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3)
REFUSED = "Refused: you already called"

warnings.filterwarnings("ignore", message=".*(LoopAgent|ParallelAgent|SequentialAgent) is deprecated.*")


def loop(name: str, *agents: BaseAgent, max_iterations: int | None = None) -> LoopAgent:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return LoopAgent(name=name, sub_agents=list(agents), max_iterations=max_iterations)


def sequence(name: str, *agents: BaseAgent) -> SequentialAgent:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return SequentialAgent(name=name, sub_agents=list(agents))


def parallel(name: str, *agents: BaseAgent) -> ParallelAgent:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return ParallelAgent(name=name, sub_agents=list(agents))


def tracker(carrier: Carrier, model: ScriptedLlm | None = None, name: str = "parcel_tracker") -> LlmAgent:
    return LlmAgent(
        name=name, model=model or ScriptedLlm(then=keep_calling("track_parcel", ARGS)), tools=[carrier.tool]
    )


def answering(name: str, answer: str = "Noted.", output_key: str | None = None) -> tuple[LlmAgent, ScriptedLlm]:
    model = ScriptedLlm(then=lambda model, request: answer)
    return LlmAgent(name=name, model=model, output_key=output_key), model


async def within(seconds: float, coroutine: Any) -> Any:
    """The run, failed if it does not end in time (an endless loop fails the test instead of hanging it)."""
    return await asyncio.wait_for(coroutine, seconds)


def finals(turn: Turn) -> list[str]:
    return [
        "".join(part.text or "" for part in event.content.parts or [])
        for event in turn.events
        if event.is_final_response() and event.content is not None
    ]


# -- 1. a stop ends the invocation for the whole tree ------------------------------------------------


async def test_a_stop_ends_an_endless_loop_agent(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    reporter, reporter_model = answering("reporter")
    root = loop("watch", tracker(carrier, model), reporter)  # max_iterations=None: only an escalation ends it
    runner = runner_for(root, RepeatGuardPlugin(SEED_004))
    session_id = await new_session(runner)

    turn = await within(20, run_turn(runner, session_id, "Keep checking FR-7731"))

    # The tracker's own loop is stopped inside the first iteration: 2 runs, 3 refusals, the stop. The stop
    # event escalates, so the LoopAgent exits: no reporter, no 2nd iteration.
    assert carrier.calls == ["FR-7731"] * 2
    assert model.calls == 5 and reporter_model.calls == 0
    assert finals(turn) == [STOPPED]
    assert turn.events[-1].custom_metadata[STOP_METADATA] == "ignored_refusals"
    assert turn.events[-1].actions.escalate is True
    assert len(turn.events) == 11  # 5 model responses, 5 tool responses, the stop
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    stop = stop_of(session, invocation_id=turn.invocation_id)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop_of(turn.final) == stop


async def test_a_stop_in_a_nested_loop_ends_every_enclosing_loop_and_the_sequence(carrier: Carrier) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    after_inner, after_inner_model = answering("after_inner")
    after_outer, after_outer_model = answering("after_outer")
    inner = loop("inner", sequence("steps", tracker(carrier, model), after_inner))
    root = sequence("app", loop("outer", inner), after_outer)
    runner = runner_for(root, RepeatGuardPlugin(SEED_004))

    turn = await within(20, run_turn(runner, await new_session(runner), "Keep checking FR-7731"))

    assert carrier.calls == ["FR-7731"] * 2
    assert (model.calls, after_inner_model.calls, after_outer_model.calls) == (5, 0, 0)
    assert finals(turn) == [STOPPED]


async def test_later_agents_of_a_sequence_do_not_run_and_no_output_key_holds_the_stop(carrier: Carrier) -> None:
    summarizer, summarizer_model = answering("summarizer", "All in transit.", output_key="summary")
    root = sequence("desk", tracker(carrier, name="parcel_tracker"), summarizer)
    looping = root.sub_agents[0]
    assert isinstance(looping, LlmAgent)
    looping.output_key = "tracking"
    runner = runner_for(root, RepeatGuardPlugin(SEED_004))
    session_id = await new_session(runner)

    turn = await within(20, run_turn(runner, session_id, "Keep checking FR-7731"))

    assert summarizer_model.calls == 0
    assert finals(turn) == [STOPPED]  # one final event, not one per later agent
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    assert "tracking" not in session.state and "summary" not in session.state
    # The next invocation starts afresh: every agent runs again.
    carrier.calls.clear()
    looping.model = ScriptedLlm([function_call("track_parcel", ARGS, "again")], "FR-7731 is in transit.")
    turn = await within(20, run_turn(runner, session_id, "Once more"))
    assert carrier.calls == ["FR-7731"]
    assert finals(turn) == ["FR-7731 is in transit.", "All in transit."]
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    assert session.state["tracking"] == "FR-7731 is in transit." and session.state["summary"] == "All in transit."


async def _loop_until_cap(with_guard: bool) -> tuple[int, int]:
    """A LoopAgent whose two agents answer text forever, under ``max_llm_calls=20``: (events, model calls)."""
    writer, writer_model = answering("writer", "Draft.")
    critic, critic_model = answering("critic", "Needs work.")
    plugins = [RepeatGuardPlugin(Policy())] if with_guard else []
    runner = runner_for(loop("revise", writer, critic), *plugins)
    session_id = await new_session(runner)
    events: list[Any] = []
    with pytest.raises(LlmCallsLimitExceededError):
        async for event in runner.run_async(
            user_id=USER,
            session_id=session_id,
            new_message=text_message("Write it"),
            run_config=RunConfig(max_llm_calls=20),
        ):
            events.append(event)
    return len(events), writer_model.calls + critic_model.calls


def text_message(value: str) -> Any:
    from google.genai import types

    return types.Content(role="user", parts=[text(value)])


async def test_max_llm_calls_trips_where_it_would_without_the_guard() -> None:
    without = await within(20, _loop_until_cap(with_guard=False))
    with_guard = await within(20, _loop_until_cap(with_guard=True))

    assert without == with_guard == (20, 20)


async def test_a_stop_under_max_llm_calls_ends_the_loop_before_the_cap(carrier: Carrier) -> None:
    root = loop("watch", tracker(carrier))
    runner = runner_for(root, RepeatGuardPlugin(SEED_004))

    turn = await within(
        20, run_turn(runner, await new_session(runner), "Keep checking", run_config=RunConfig(max_llm_calls=20))
    )

    assert carrier.calls == ["FR-7731"] * 2
    assert finals(turn) == [STOPPED]


# -- 2. counts scoped to what each model saw ---------------------------------------------------------


def fx_branch(name: str, rates: list[str]) -> tuple[LlmAgent, ScriptedLlm]:
    def get_fx_rate(pair: str) -> dict[str, Any]:
        """The exchange rate of a currency pair."""
        rates.append(name)
        return {"pair": pair, "rate": 1.08}

    model = ScriptedLlm(
        [function_call("get_fx_rate", {"pair": "EURUSD"}, f"{name}-1")],
        [function_call("get_fx_rate", {"pair": "EURUSD"}, f"{name}-2")],
        [function_call("get_fx_rate", {"pair": "EURUSD"}, f"{name}-3")],
        "EURUSD is 1.08.",
    )
    return LlmAgent(name=name, model=model, tools=[get_fx_rate]), model


async def test_parallel_branches_count_apart() -> None:
    rates: list[str] = []
    branches = [fx_branch(name, rates) for name in ("pricing", "hedging", "reporting")]
    runner = runner_for(parallel("desk", *(agent for agent, _ in branches)), RepeatGuardPlugin(Policy()))

    turn = await within(20, run_turn(runner, await new_session(runner), "Price, hedge and report EURUSD"))

    # Each branch sees only its own calls: each runs its lookup twice, and only its own 3rd is refused.
    assert sorted(rates) == sorted(["pricing", "hedging", "reporting"] * 2)
    for agent, model in branches:
        refusal = model.responses_received(3)[f"{agent.name}-3"]["error"]
        assert refusal.startswith(f"{REFUSED} get_fx_rate with these exact arguments 2 times")
    assert sorted(finals(turn)) == ["EURUSD is 1.08."] * 3


async def test_a_stop_in_one_parallel_branch_ends_the_others(carrier: Carrier) -> None:
    quiet_rates: list[str] = []
    looping = tracker(carrier)
    other, _ = fx_branch("pricing", quiet_rates)
    runner = runner_for(parallel("desk", looping, other), RepeatGuardPlugin(SEED_004))

    turn = await within(20, run_turn(runner, await new_session(runner), "Track and price"))

    assert carrier.calls == ["FR-7731"] * 2
    assert finals(turn).count(STOPPED) == 1  # one stop event, however many branches were running
    assert finals(turn)[-1] == STOPPED


async def test_each_loop_iteration_counts_afresh(carrier: Carrier) -> None:
    guide: list[int] = []

    def read_style_guide() -> dict[str, str]:
        """The house style guide."""
        guide.append(1)
        return {"guide": "Short sentences. No jargon."}

    def critic_script(model: ScriptedLlm, request: Any) -> Any:
        # Each iteration: read the guide, then answer (a model reading its guide once per review round).
        last = request.contents[-1]
        if any(part.function_response for part in last.parts or []):
            return "Needs work."
        return [function_call("read_style_guide", {}, model.new_call_id())]

    writer, _ = answering("writer", "Draft.")
    critic_model = ScriptedLlm(then=critic_script)
    critic = LlmAgent(name="critic", model=critic_model, tools=[read_style_guide])
    runner = runner_for(loop("revise", writer, critic, max_iterations=4), RepeatGuardPlugin(Policy()))

    turn = await within(20, run_turn(runner, await new_session(runner), "Write it"))

    assert len(guide) == 4  # once per iteration, never refused
    assert not any(str(response).startswith("{'error'") for response in turn.tool_responses)


async def test_within_one_loop_iteration_a_repeat_is_still_refused(carrier: Carrier) -> None:
    model = ScriptedLlm(
        [function_call("track_parcel", ARGS, "a")],
        [function_call("track_parcel", ARGS, "b")],
        [function_call("track_parcel", ARGS, "c")],
        then=lambda model, request: "In transit.",
    )
    runner = runner_for(loop("watch", tracker(carrier, model), max_iterations=2), RepeatGuardPlugin(Policy()))

    await within(20, run_turn(runner, await new_session(runner), "Check"))

    assert carrier.calls == ["FR-7731"] * 2
    assert model.responses_received(3)["c"]["error"].startswith(
        f"{REFUSED} track_parcel with these exact arguments 2 times"
    )


async def test_a_stop_ends_a_workflow_revision_loop(carrier: Carrier) -> None:
    from google.adk.events.event import Event
    from google.adk.workflow import Workflow

    def judge(node_input: Any) -> Event:
        return Event(route="done" if "APPROVED" in str(node_input) else "revise")

    def finish(node_input: Any) -> str:
        return "finished"

    writer_model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    critic, critic_model = answering("critic", "Needs work.")
    writer = tracker(carrier, writer_model, name="writer")
    workflow = Workflow(
        name="revise", edges=[("START", writer, critic, judge), (judge, {"revise": writer, "done": finish})]
    )
    runner = runner_for(workflow, RepeatGuardPlugin(SEED_004))
    session_id = await new_session(runner)

    turn = await within(20, run_turn(runner, session_id, "Write it"))

    # The graph would loop forever on the stop text: the guard aborts the invocation once the stop event
    # is delivered, and ADK seals it with its own content-less abort event.
    assert carrier.calls == ["FR-7731"] * 2
    assert (writer_model.calls, critic_model.calls) == (5, 0)
    assert finals(turn) == [STOPPED]
    assert [event.error_code for event in turn.events[-2:]] == [None, "INVOCATION_ABORTED"]
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    assert session is not None
    stop = stop_of(turn.events)  # the stop event, before ADK's abort event
    assert stop is not None and stop.message == STOPPED and stop_of(session) == stop


async def test_a_transfer_keeps_the_count_the_agent_transferred_to_sees(carrier: Carrier) -> None:
    tracker_model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    desk_model = ScriptedLlm(
        [function_call("track_parcel", ARGS, "d1")],
        [function_call("transfer_to_agent", {"agent_name": "parcel_tracker"}, "d2")],
    )
    desk = LlmAgent(
        name="front_desk", model=desk_model, tools=[carrier.tool], sub_agents=[tracker(carrier, tracker_model)]
    )
    policy = Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3, exempt={"transfer_to_agent"})
    runner = runner_for(desk, RepeatGuardPlugin(policy))

    turn = await within(20, run_turn(runner, await new_session(runner), "Keep checking FR-7731"))

    # The tracker sees the desk's lookup in the conversation: its first call is the 2nd, its next refused.
    assert carrier.calls == ["FR-7731"] * 2
    assert tracker_model.responses_received(1) == {"call_1": {"status": "FR-7731: in transit, hub Lyon"}}
    assert tracker_model.responses_received(2)["call_2"]["error"].startswith(f"{REFUSED} track_parcel 2 times")
    assert finals(turn) == [STOPPED]


async def test_a_stop_deep_in_one_branch_ends_an_endless_loop_in_another(carrier: Carrier) -> None:
    looping = tracker(carrier)
    chatter, chatter_model = answering("chatter", "Still here.")
    root = parallel("desk", sequence("tracking", looping), loop("chatting", chatter))
    runner = runner_for(root, RepeatGuardPlugin(SEED_004))

    turn = await within(20, run_turn(runner, await new_session(runner), "Track and chat"))

    # The stop's author is not a direct sub-agent of the ParallelAgent, so ADK does not cancel the other
    # branch: the guard ends the chatter's loop itself (its next agent start escalates without content).
    assert carrier.calls == ["FR-7731"] * 2
    texts = finals(turn)
    assert texts.count(STOPPED) == 1 and set(texts) <= {STOPPED, "Still here."}
    calls_at_stop = chatter_model.calls
    assert calls_at_stop < 50
    escalations = [event for event in turn.events if event.actions.escalate and event.author == "chatter"]
    assert escalations and escalations[-1].content is None
