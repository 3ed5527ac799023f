"""Budgets fed from CrewAI's own loop, setups that could not work refused loudly with the right spelling, and the
guard's ``fail=`` policy for its own crash (CrewAI's dispatcher would swallow it and run the tool)."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from crewai.flow.flow import Flow, start
from pydantic import BaseModel
from repeat_hooks_crewai import GuardSetupError, RepeatGuard, StopReason, stop_of
from repeat_hooks_crewai.testing import ScriptedLLM, tool_call, tool_results

from repeat_hooks import Policy, TokenPrices
from repeat_hooks.stores import MemoryStore

from .conftest import ARGS, SEED_004, Carrier, crew_of, guarded, llm_of, tracker


def progress_llm() -> ScriptedLLM:
    """A model that keeps tracking new parcels (progress: never refused) until a budget ends the turn."""
    numbers = itertools.count(1)
    return ScriptedLLM(
        model="scripted",
        then=lambda llm, messages: [tool_call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})],
    )


def test_max_model_calls_counts_model_calls(carrier: Carrier) -> None:
    agent = tracker(carrier, progress_llm())
    crew = crew_of(agent)

    with guarded(crew, Policy(max_model_calls=2)):
        output = crew.kickoff(inputs={"message": "Track all my parcels"})

    assert llm_of(agent).calls == 2 and carrier.calls == ["FR-1", "FR-2"]
    assert output.raw == "I stopped: this turn reached its limit of 2 model calls."
    assert (stop := stop_of(crew)) is not None and stop.reason is StopReason.MAX_STEPS


def test_max_model_seconds_is_fed_from_the_clock(carrier: Carrier) -> None:
    ticks = itertools.count(0, 2.0)  # every reading 2 s later: each model call takes 2 s
    agent = tracker(carrier, progress_llm())
    crew = crew_of(agent)

    with guarded(crew, Policy(max_model_seconds=5), clock=lambda: float(next(ticks))):
        crew.kickoff(inputs={"message": "Track all my parcels"})

    assert llm_of(agent).calls == 3  # 6 s > 5 s after the 3rd
    assert (stop := stop_of(crew)) is not None and stop.reason is StopReason.TIME


def test_three_errors_in_a_row_end_the_task_crewai_handing_the_model_its_error_text(carrier: Carrier) -> None:
    carrier.fail = True
    agent = tracker(carrier, progress_llm())
    crew = crew_of(agent)

    with guarded(crew, Policy(max_errors_in_a_row=3)):
        output = crew.kickoff(inputs={"message": "Where are my parcels?"})

    assert tool_results(agent) == [f"Error executing tool: carrier timeout for FR-{n}" for n in (1, 2, 3)]
    assert output.raw == "I stopped: 3 tool calls failed in a row, the last one track_parcel. Try again later."


def test_is_failure_reads_what_the_model_read(carrier: Carrier) -> None:
    agent = tracker(carrier, progress_llm())
    crew = crew_of(agent)

    with guarded(crew, Policy(max_errors_in_a_row=2), is_failure=lambda text: "hub Lyon" in text):
        crew.kickoff(inputs={"message": "Where are my parcels?"})

    assert carrier.calls == ["FR-1", "FR-2"] and (stop := stop_of(crew)) is not None
    assert stop.reason is StopReason.TOO_MANY_ERRORS


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cost": TokenPrices(3, 15)}, r"cost=\.\.\.\) cannot be fed: CrewAI's model-call hooks carry no usage"),
        ({"max_cost_usd": 1.0}, r"cannot feed cost \(CrewAI's model-call hooks carry no usage\): leave it None"),
    ],
)
def test_a_cost_budget_fails_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises(GuardSetupError, match=message):
        RepeatGuard(**options)


def test_a_misspelt_setting_or_keyword_names_the_right_one() -> None:
    with pytest.raises(TypeError, match=r"unknown setting 'max_call' \(did you mean max_calls\?\)"):
        RepeatGuard(max_call=2)
    with pytest.raises(TypeError, match=r"unexpected keyword 'stor': did you mean store=\.\.\.\?"):
        RepeatGuard(stor=MemoryStore())
    with pytest.raises(TypeError, match=r"RepeatGuard\(on_stop=\.\.\.\) is 'reply' or 'raise', not 'end'"):
        RepeatGuard(on_stop="end")  # type: ignore[arg-type]


def test_attaching_to_something_else_fails(carrier: Carrier) -> None:
    with pytest.raises(GuardSetupError, match=r"attach takes a Crew, an Agent or a Flow, not Task"):
        RepeatGuard().attach(crew_of(tracker(carrier)).tasks[0])


def test_attaching_twice_or_two_guards_to_one_crew_fails_counting_nothing_twice(carrier: Carrier) -> None:
    agent = tracker(carrier)
    crew = crew_of(agent)
    guard = RepeatGuard(SEED_004).attach(crew)
    try:
        with pytest.raises(GuardSetupError, match=r"guarded already \(by this RepeatGuard\)"):
            guard.attach(crew)
        with pytest.raises(GuardSetupError, match=r"guarded already \(by another RepeatGuard\).*counted twice"):
            RepeatGuard(SEED_004).attach(crew)
        other_crew = crew_of(tracker(Carrier(), role="other"))
        second = RepeatGuard(SEED_004).attach(other_crew)  # another crew, another guard: fine, each filters
        try:
            crew.kickoff(inputs={"message": "Keep checking FR-7731"})
        finally:
            second.detach()
    finally:
        guard.detach()
    assert carrier.calls == ["FR-7731"] * 2 and llm_of(agent).calls == 5  # counted once


def test_a_detached_guard_no_longer_acts(carrier: Carrier) -> None:
    agent = tracker(carrier)
    crew = crew_of(agent, max_rpm=None)
    with guarded(crew):
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    llm_of(agent).then = lambda llm, messages: "In transit." if llm.calls > 7 else [tool_call("track_parcel", ARGS)]
    output = crew.kickoff(inputs={"message": "And now?"})

    assert output.raw == "In transit." and carrier.calls == ["FR-7731"] * 4  # nothing refused after detach()
    assert agent.agent_executor is not None and agent.agent_executor.before_llm_call_hooks == []


def test_a_policy_naming_a_tool_the_agent_lacks_fails_at_the_first_model_call(carrier: Carrier) -> None:
    crew = crew_of(tracker(carrier))

    with (
        guarded(crew, Policy(limits={"track_parcels": 1})),
        pytest.raises(GuardSetupError, match="did you mean 'track_parcel'"),
    ):
        crew.kickoff(inputs={"message": "Where is FR-7731?"})
    assert carrier.calls == []

    with guarded(crew, Policy(limits={"track_parcels": 1}), check_tools=False):
        crew.kickoff(inputs={"message": "Where is FR-7731?"})
    assert carrier.calls == ["FR-7731"] * 2


def test_a_flow_whose_state_cannot_hold_the_guard_fails_at_attach() -> None:
    class Chat(BaseModel):
        id: str = ""

    class ChatFlow(Flow[Chat]):
        @start()
        def answer(self) -> str:
            return "hi"

    with pytest.raises(GuardSetupError, match=r"add `repeat_hooks: dict\[str, str\] = \{\}` to the flow's state model"):
        RepeatGuard().attach(ChatFlow())
    RepeatGuard(store=MemoryStore()).attach(ChatFlow()).detach()  # with a store, the state is not needed


def test_a_store_with_no_conversation_id_fails_at_the_kickoff(carrier: Carrier) -> None:
    crew = crew_of(tracker(carrier))

    with guarded(crew, store=MemoryStore()), pytest.raises(GuardSetupError, match=r"request\(conversation_id=\.\.\.\)"):
        crew.kickoff(inputs={"message": "Where is FR-7731?"})
    assert carrier.calls == []


class BrokenStore(MemoryStore):
    def update_now(self, key: str, change: Any) -> Any:
        raise ConnectionError("store down")


def test_an_unreachable_store_fails_open_leaving_crewais_own_limit_as_the_backstop(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    from crewai.tools.tool_failure import ToolExecutionFailedError

    from repeat_hooks.kit import request

    crew = crew_of(tracker(carrier))

    guard, blocked = guarded(crew, store=BrokenStore()), pytest.raises(ToolExecutionFailedError, match="5 times")
    with guard, request(conversation_id="c-1"), caplog.at_level(logging.ERROR), blocked:
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert carrier.calls == ["FR-7731"] * 5  # nothing refused: the guard could not count
    assert "could not reach the state of repeat_hooks:c-1/tracker" in caplog.text and "failing open" in caplog.text


def test_an_unreachable_store_with_fail_closed_ends_the_turn_before_any_tool_runs(carrier: Carrier) -> None:
    from repeat_hooks_crewai import RepeatGuardStopped

    from repeat_hooks.kit import request

    agent = tracker(carrier)
    crew = crew_of(agent)

    guard = guarded(crew, store=BrokenStore(), fail="closed")
    with guard, request(conversation_id="c-1"), pytest.raises(RepeatGuardStopped) as raised:
        crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert raised.value.stop.reason is StopReason.STORE_UNAVAILABLE and carrier.calls == []
    assert llm_of(agent).calls == 0  # the first model call's decision is the stop: it never reached the model


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_a_crash_of_the_guards_own_hook_follows_fail_not_crewais_fail_open(
    carrier: Carrier, fail: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CrewAI swallows a hook's exception and runs the tool (hooks/dispatch.py:284); the guard catches its own and
    says which way it goes: open, the tool runs; closed, the call is refused."""
    from repeat_hooks_crewai import calls

    def broken(messages: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(calls, "response_calls", broken)
    llm = ScriptedLLM(model="scripted", replies=[[tool_call("track_parcel", ARGS)], "Done."])
    agent = tracker(carrier, llm)
    crew = crew_of(agent)

    with guarded(crew, fail=fail), caplog.at_level(logging.ERROR):  # type: ignore[arg-type]
        crew.kickoff(inputs={"message": "Where is FR-7731?"})

    assert f"before-tool hook failed: RuntimeError: bug; failing {fail}" in caplog.text
    if fail == "open":
        assert carrier.calls == ["FR-7731"] and tool_results(agent) == ["FR-7731: in transit, hub Lyon"]
    else:
        assert carrier.calls == [] and tool_results(agent)[0].startswith("Refused: the loop guard could not read")


def test_stop_of_a_kickoffs_output_names_what_to_pass_instead(carrier: Carrier) -> None:
    crew = crew_of(tracker(carrier))
    with guarded(crew):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    with pytest.raises(GuardSetupError, match=r"got CrewOutput \(which holds only the stop's text\): stop_of\(crew\)"):
        stop_of(output)
    with pytest.raises(GuardSetupError, match=r"stop_of takes the Crew, Agent or Flow a RepeatGuard is attached to"):
        stop_of(crew_of(tracker(carrier)))  # a crew no guard served
    assert stop_of(crew) is not None
