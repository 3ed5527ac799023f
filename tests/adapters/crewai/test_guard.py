"""The guard on CrewAI's real agent loop, as the caller and the model see it: refusals, stops, turns, and how the
stop meets the crew's next task, the SDK's human-feedback round and its tool cache."""

from __future__ import annotations

from typing import Any

import pytest
from crewai import Task
from crewai.core.providers.human_input import SyncHumanInputProvider
from repeat_hooks_crewai import RepeatGuardStopped, StopReason, stop_of
from repeat_hooks_crewai.state import book_of
from repeat_hooks_crewai.testing import ScriptedLLM, tool_call, tool_results

from repeat_hooks import Policy

from .conftest import ARGS, REFUSAL, STOPPED, Carrier, crew_of, guarded, llm_of, tracker


def test_seed_004_refuses_the_third_call_and_ends_the_task_with_the_stop_message(carrier: Carrier) -> None:
    agent = tracker(carrier)
    crew = crew_of(agent)

    with guarded(crew):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731 until it is delivered"})

    assert carrier.calls == ["FR-7731", "FR-7731"]
    assert llm_of(agent).calls == 5  # 2 calls ran, 3 were refused, no 6th model call
    assert output.raw == STOPPED and [task.raw for task in output.tasks_output] == [STOPPED]
    assert tool_results(agent) == ["FR-7731: in transit, hub Lyon"] * 2 + [REFUSAL] * 3  # CrewAI's own history
    last = llm_of(agent).requests[-1]  # what the 5th model call received: the 2nd refusal, word for word
    assert [message["content"] for message in last if message["role"] == "tool"][-1] == REFUSAL
    stop = stop_of(crew)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED


def test_a_standalone_agent_kickoff_is_guarded_the_same_way(carrier: Carrier) -> None:
    agent = tracker(carrier)

    with guarded(agent):
        result = agent.kickoff("Keep checking FR-7731")

    assert result.raw == STOPPED and carrier.calls == ["FR-7731"] * 2 and llm_of(agent).calls == 5
    stop = stop_of(agent)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


def test_each_kickoff_is_a_new_turn_with_its_own_id(carrier: Carrier) -> None:
    agent = tracker(carrier)
    crew = crew_of(agent)

    with guarded(crew):
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})
        book = book_of(crew)
        assert book is not None
        first = book.turn_id
        output = crew.kickoff(inputs={"message": "And now?"})

    assert carrier.calls == ["FR-7731"] * 4 and output.raw == STOPPED  # the second turn counted afresh
    state = book.states["tracker"]
    assert state.turn.number == 2 and state.turn.id == book.turn_id != first
    assert [event.turn_id for event in state.events if event.kind == "stop"] == [first, book.turn_id]


def test_a_model_that_answers_ends_the_task_normally(carrier: Carrier) -> None:
    llm = ScriptedLLM(model="scripted", replies=[[tool_call("track_parcel", ARGS)], "It is in transit."])
    crew = crew_of(tracker(carrier, llm))

    with guarded(crew, Policy()):
        output = crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert output.raw == "It is in transit." and carrier.calls == ["FR-7731"]
    assert stop_of(crew) is None


def test_on_stop_raise_raises_out_of_the_kickoff(carrier: Carrier) -> None:
    agent = tracker(carrier)
    crew = crew_of(agent)

    with guarded(crew, on_stop="raise"), pytest.raises(RepeatGuardStopped) as raised:
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert raised.value.stop.reason is StopReason.IGNORED_REFUSALS and raised.value.message == STOPPED
    assert stop_of(raised.value) == raised.value.stop
    assert carrier.calls == ["FR-7731"] * 2 and llm_of(agent).calls == 5  # raised after the 5th response's tools


def test_the_crew_goes_on_to_another_agents_task_after_a_stop(carrier: Carrier) -> None:
    """The stop is the first task's output, as any finished task's; the next task's agent counts apart."""
    first, second = tracker(carrier), tracker(carrier, role="checker")
    crew = crew_of(first, second)

    with guarded(crew):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert [task.raw for task in output.tasks_output] == [STOPPED, STOPPED]
    assert carrier.calls == ["FR-7731"] * 4 and llm_of(first).calls == llm_of(second).calls == 5
    assert STOPPED in str(llm_of(second).requests[0])  # the first task's output is the second's context
    assert stop_of(crew, role="checker") == stop_of(crew, role="tracker") == stop_of(crew)


def test_the_same_agents_next_task_in_a_stopped_turn_fails_the_crew_as_a_failed_task_does(carrier: Carrier) -> None:
    """Its turn has ended, and its first model call cannot be answered for (before_llm_call can only raise): the
    crew ends as it does when a task fails, the error reaching the caller; the model is not called again."""
    agent = tracker(carrier)
    crew = crew_of(agent, agent)

    with guarded(crew), pytest.raises(RepeatGuardStopped) as raised:
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert raised.value.message == STOPPED and llm_of(agent).calls == 5 and carrier.calls == ["FR-7731"] * 2


def test_before_llm_call_returning_false_is_retried_by_crewai_which_is_why_the_guard_never_does_it(
    carrier: Carrier,
) -> None:
    """CrewAI's fact behind the design: a before_llm_call hook's False raises LLMCallBlockedError, and the agent's
    max_retry_limit (2) runs the whole task again, the tool with it, before the caller gets the error."""
    from crewai.hooks import register_before_llm_call_hook, unregister_before_llm_call_hook

    def block(ctx: Any) -> bool | None:
        return False if ctx.iterations >= 1 else None

    agent = tracker(carrier)
    register_before_llm_call_hook(block)
    try:
        with pytest.raises(Exception, match="LLM call blocked by before_llm_call hook"):
            crew_of(agent).kickoff(inputs={"message": "Keep checking FR-7731"})
    finally:
        unregister_before_llm_call_hook(block)
    assert carrier.calls == ["FR-7731"] * 3 and llm_of(agent).calls == 3  # three attempts of the task


def test_a_human_feedback_round_goes_on_with_the_turns_counts(
    carrier: Carrier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task(human_input=True): the feedback round re-runs the same executor with no new EXECUTION_START
    (agents/agent_executor.py:3490): the same turn, so its calls are refused as the third and fourth."""
    feedback = iter(["Check it again.", ""])
    monkeypatch.setattr(SyncHumanInputProvider, "_prompt_input", staticmethod(lambda crew: next(feedback)))
    track = [tool_call("track_parcel", ARGS)]
    llm = ScriptedLLM(model="scripted", replies=[track, track, "In transit.", track, track, "Still in transit."])
    agent = tracker(carrier, llm)
    task = Task(description="{message}", expected_output="An answer.", agent=agent, human_input=True)
    crew = crew_of(agent)
    crew.tasks = [task]

    with guarded(crew, Policy(max_refusals=5)):
        output = crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert output.raw == "Still in transit." and carrier.calls == ["FR-7731"] * 2
    results = tool_results(agent)  # the history holds both rounds: the feedback round went on in it
    assert results[:2] == ["FR-7731: in transit, hub Lyon"] * 2 and len(results) == 4
    assert all(
        text.startswith("Refused: you already called track_parcel with these exact arguments 2 times")
        for text in results[2:]
    )
    book = book_of(crew)
    assert book is not None and book.states["tracker"].turn.number == 1


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no_cache"])
def test_crewais_tool_cache_answers_allowed_repeats_and_the_guard_counts_what_the_model_read(
    carrier: Carrier, cache: bool
) -> None:
    """With CrewAI's cache on (opt-in: Crew(cache=True), crew.py:234; Agent(cache=True), agent/core.py:553), across
    kickoffs of one crew, a repeat the guard allows is answered from the cache without running; the guard records what
    the model read (the same result), so the third is refused either way, and the next kickoff's calls all come from
    the cache."""
    agent = tracker(carrier, cache=cache)
    crew = crew_of(agent, cache=cache)

    with guarded(crew, Policy()):
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})
        texts = tool_results(agent)
        crew.kickoff(inputs={"message": "And now?"})

    assert carrier.calls == (["FR-7731"] if cache else ["FR-7731"] * 4)
    assert texts[:2] == ["FR-7731: in transit, hub Lyon"] * 2 and all(t.startswith("Refused") for t in texts[2:])
    assert len(texts) == 5 and stop_of(crew) is not None


def test_crewai_ends_a_run_of_five_identical_calls_itself_without_the_guard(carrier: Carrier) -> None:
    """CrewAI's own MAX_REPEATED_TOOL_CALLS (utilities/agent_utils.py:1919): the 5th identical call and result
    raises ToolExecutionFailedError to the caller."""
    from crewai.tools.tool_failure import ToolExecutionFailedError

    agent = tracker(carrier)

    with pytest.raises(ToolExecutionFailedError, match="same arguments 5 times"):
        crew_of(agent).kickoff(inputs={"message": "Keep checking FR-7731"})
    assert carrier.calls == ["FR-7731"] * 5


def test_the_guards_refusals_repeated_word_for_word_never_trip_crewais_repeat_check(carrier: Carrier) -> None:
    """Six identical refusals (max_refusals=8): CrewAI counts (tool, arguments, result), and would raise at the 5th
    same refusal; the guard takes its refusals out of that count (a refused call never ran)."""
    agent = tracker(carrier)
    crew = crew_of(agent)

    with guarded(crew, Policy(match="tool", count="per_turn", max_calls=2, max_refusals=6)):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert tool_results(agent)[2:] == [REFUSAL] * 6
    assert output.raw.startswith("I stopped") and carrier.calls == ["FR-7731"] * 2 and llm_of(agent).calls == 8


def test_max_iter_and_the_guard_combine_as_two_limits(carrier: Carrier) -> None:
    """CrewAI's max_iter (here 3) forces a final answer with one more model call made without tools
    (utilities/agent_utils.py:378); the guard's refusals count toward it like any tool result."""
    llm = ScriptedLLM(
        model="scripted",
        then=lambda llm, messages: "Forced answer." if llm.calls > 3 else [tool_call("track_parcel", ARGS)],
    )
    agent = tracker(carrier, llm, max_iter=3)
    crew = crew_of(agent)

    with guarded(crew, Policy(max_calls=1)):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert carrier.calls == ["FR-7731"] and output.raw == "Forced answer." and stop_of(crew) is None
    assert llm_of(agent).calls == 4  # 3 iterations, then CrewAI's forced answer (no tools offered)
    results = tool_results(agent)
    assert len(results) == 3 and all(text.startswith("Refused") for text in results[1:])


def test_a_task_crewai_retries_after_an_error_goes_on_with_the_turns_counts(carrier: Carrier) -> None:
    """max_retry_limit (2): a task whose model call raises runs again, from a fresh history but in the same kickoff,
    so in the same turn: the retry's tracks are the turn's third and fourth, refused, though its model saw none."""
    raised: list[int] = []

    def script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Any:
        if llm.calls == 3 and not raised:
            raised.append(llm.calls)
            raise RuntimeError("provider hiccup")
        if sum(message["role"] == "tool" for message in messages) >= 2:
            return "In transit."
        return [tool_call("track_parcel", ARGS)]

    llm = ScriptedLLM(model="scripted", then=script)
    agent = tracker(carrier, llm)
    crew = crew_of(agent)

    with guarded(crew, Policy(max_calls=2)):
        output = crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert raised == [3] and output.raw == "In transit." and llm.calls == 6
    assert carrier.calls == ["FR-7731"] * 2  # both in the first run
    assert [text.startswith("Refused") for text in tool_results(agent)] == [True, True]  # the retry's history


@pytest.mark.parametrize("method", ["akickoff", "kickoff_async"])
def test_the_async_kickoffs_are_guarded_the_same_way(carrier: Carrier, method: str) -> None:
    import asyncio

    agent = tracker(carrier)
    crew = crew_of(agent)

    async def run() -> str:
        with guarded(crew):
            return str((await getattr(crew, method)(inputs={"message": "Keep checking FR-7731"})).raw)

    assert asyncio.run(run()) == STOPPED
    assert carrier.calls == ["FR-7731"] * 2 and llm_of(agent).calls == 5 and stop_of(crew) is not None


def test_a_call_a_users_hook_blocks_before_the_guard_counts_as_rejected_only_if_the_guard_saw_it(
    carrier: Carrier,
) -> None:
    """A before-tool hook of the user's that blocks a call: registered after the guard, the guard had decided the
    call, which then counts as rejected (a rejection counts toward its repeats); registered before it, the guard
    never saw the call (CrewAI stops at the first hook that blocks), and its after hook leaves it alone."""
    from crewai.hooks import register_before_tool_call_hook, unregister_before_tool_call_hook

    def deny(ctx: Any) -> bool:
        return False

    llm = ScriptedLLM(
        model="scripted", then=lambda llm, m: "Gave up." if llm.calls > 4 else [tool_call("track_parcel", ARGS)]
    )
    agent = tracker(carrier, llm)
    crew = crew_of(agent)
    with guarded(crew, Policy(max_refusals=5)):
        register_before_tool_call_hook(deny)
        try:
            crew.kickoff(inputs={"message": "Where is FR-7731?"})
        finally:
            unregister_before_tool_call_hook(deny)
    results = tool_results(agent)
    assert carrier.calls == [] and results[:2] == ["Tool execution blocked by hook. Tool: track_parcel"] * 2
    assert all(text.startswith("Refused") for text in results[2:]) and len(results) == 4

    register_before_tool_call_hook(deny)  # first in CrewAI's list: the guard's before hook never runs
    llm.calls = 0
    try:
        with guarded(crew, Policy(max_refusals=5)):
            crew.kickoff(inputs={"message": "Where is FR-7731?"})
    finally:
        unregister_before_tool_call_hook(deny)
    assert tool_results(agent) == ["Tool execution blocked by hook. Tool: track_parcel"] * 4  # nothing refused
