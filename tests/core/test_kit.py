"""The adapter kit in the core: what every adapter used to write for itself, written once."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from repeat_hooks import (
    GuardSetupError,
    GuardState,
    Policy,
    StateCorrupt,
    StopRepeatedCalls,
    StoreUnavailable,
    TokenPrices,
)
from repeat_hooks.kit import Stopwatch, check_feeds, check_tool_names, load_state, policy_from, usage_tokens
from repeat_hooks.kit.conformance import STOPPED, Cursor, Expect, Scenario, ToolBox, TurnOutcome, check, scenario
from repeat_hooks.stop_rules import Feed

from .test_conformance import ReferenceDriver

# -- the policy argument -----------------------------------------------------------------------------------


def test_no_policy_is_the_default_policy() -> None:
    assert policy_from(owner="RepeatGuardPlugin") == Policy()


def test_settings_as_keywords_build_the_policy() -> None:
    assert policy_from(None, {"max_calls": 3}, owner="X") == Policy(max_calls=3)


def test_a_policy_is_taken_as_it_is() -> None:
    policy = Policy(max_calls=4)
    assert policy_from(policy, owner="X") is policy


def test_a_guard_for_one_conversation_is_not_a_policy() -> None:
    with pytest.raises(TypeError, match=r"RepeatGuard takes a Policy, not a StopRepeatedCalls .*RepeatGuard\(Policy"):
        policy_from(StopRepeatedCalls(), owner="RepeatGuard")


def test_anything_else_is_refused_with_the_right_spelling() -> None:
    with pytest.raises(TypeError, match=r"takes a repeat_hooks.Policy, not dict: X\(Policy\(\.\.\.\)\)"):
        policy_from({"max_calls": 2}, owner="X")
    with pytest.raises(TypeError, match="not both: put max_calls inside Policy"):
        policy_from(Policy(), {"max_calls": 2}, owner="X")
    with pytest.raises(TypeError, match=r"unknown setting 'max_call' .did you mean max_calls"):
        policy_from(None, {"max_call": 2}, owner="X")
    with pytest.raises(ValidationError, match="max_calls"):
        policy_from(None, {"max_calls": -1}, owner="X")


# -- budgets an adapter cannot feed ----------------------------------------------------------------------------


def test_a_budget_nothing_feeds_fails_at_setup_naming_the_fix() -> None:
    how = {Feed.COST: "RepeatGuard(policy, cost=TokenPrices(...))"}
    with pytest.raises(GuardSetupError, match=r"max_cost_usd=\.\.\.\) could never trip: set it up with RepeatGuard"):
        check_feeds(Policy(max_cost_usd=1.0), can={Feed.OUTCOMES, Feed.MODEL_CALLS}, owner="RepeatGuard", how=how)
    with pytest.raises(GuardSetupError, match="Claude cannot feed seconds: leave it None"):
        check_feeds(Policy(max_model_seconds=5), can={Feed.OUTCOMES}, owner="Claude")
    with pytest.raises(GuardSetupError, match="count='per_turn'"):
        check_feeds(Policy(), can=set(), owner="X")
    check_feeds(Policy(max_cost_usd=1.0), can=set(Feed), owner="X")  # fed: no error
    assert issubclass(GuardSetupError, ValueError)


def test_a_tool_name_that_matches_no_tool_names_the_closest() -> None:
    tools = ["track_parcel", "place_order"]
    with pytest.raises(GuardSetupError, match=r"limits=\.\.\.\) names 'track_parcels'.*did you mean 'track_parcel'"):
        check_tool_names(Policy(limits={"track_parcels": 0}), tools, owner="RepeatGuard")
    with pytest.raises(GuardSetupError, match="the agent's tools are place_order, track_parcel"):
        check_tool_names(Policy(read_only={"zzz"}), tools, owner="RepeatGuard")
    check_tool_names(Policy(exempt={"place_order"}, destructive={"track_parcel"}), tools, owner="X")


# -- prices and usage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        (SimpleNamespace(input_tokens=1000, output_tokens=100, cache_read_tokens=400), (1000, 100, 400)),  # pydantic-ai
        (
            SimpleNamespace(
                input_tokens=1000, output_tokens=100, input_tokens_details=SimpleNamespace(cached_tokens=300)
            ),
            (1000, 100, 300),
        ),  # OpenAI Agents
        ({"input_tokens": 1000, "output_tokens": 100, "input_token_details": {"cache_read": 200}}, (1000, 100, 200)),
        (
            SimpleNamespace(
                prompt_token_count=900,
                tool_use_prompt_token_count=100,
                candidates_token_count=80,
                thoughts_token_count=20,
                cached_content_token_count=100,
            ),
            (1000, 100, 100),
        ),  # Google genai
        ({"prompt_tokens": 10, "completion_tokens": 5}, (10, 5, 0)),  # chat completions
        (  # Anthropic: input_tokens leaves the cache out
            {
                "input_tokens": 100,
                "output_tokens": 7,
                "cache_read_input_tokens": 800,
                "cache_creation_input_tokens": 50,
            },
            (950, 7, 800),
        ),
        (  # Strands, a provider whose inputTokens leaves the cache out
            {"inputTokens": 100, "outputTokens": 10, "totalTokens": 910, "cacheReadInputTokens": 800},
            (900, 10, 800),
        ),
        ({"inputTokens": 900, "outputTokens": 10, "totalTokens": 910, "cacheReadInputTokens": 800}, (900, 10, 800)),
        (None, (0, 0, 0)),
        (SimpleNamespace(input_tokens=float("nan"), output_tokens=-5), (0, 0, 0)),
    ],
)
def test_usage_tokens_read_every_sdk(usage: Any, tokens: tuple[int, int, int]) -> None:
    assert usage_tokens(usage) == tokens


def test_token_prices_are_a_cost_function() -> None:
    cost = TokenPrices(3.0, 15.0, cached_input_usd_per_million=0.3)
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "input_token_details": {"cache_read": 500_000}}
    assert cost(usage) == pytest.approx(1.5 + 0.15 + 1.5)


def test_a_stopwatch_times_one_call_at_a_time() -> None:
    now = iter([10.0, 12.5, 20.0, 21.0])
    watch = Stopwatch(lambda: next(now))
    assert watch.seconds() == 0.0  # never started
    watch.start()
    assert watch.seconds() == 2.5
    watch.start()
    assert watch.seconds() == 1.0
    assert Stopwatch(None).seconds() == 0.0


# -- stored states -----------------------------------------------------------------------------------------


def test_load_state_reads_what_was_kept() -> None:
    state = GuardState()
    state.start("t1")
    assert load_state(None) == GuardState()
    assert load_state(state) is state
    assert load_state(state.model_dump_json()) == state
    assert load_state(state.model_dump_json().encode()) == state
    assert load_state(json.loads(state.model_dump_json())) == state


@pytest.mark.parametrize("stored", ["not json", b"\xff\xfe", {"turn": {"counts": "x"}}, 42, '{"turn": "x"}'])
def test_a_state_someone_else_wrote_says_how_to_recover(stored: Any) -> None:
    with pytest.raises(StateCorrupt, match="delete it to start this conversation's counts afresh") as error:
        load_state(stored)
    assert isinstance(error.value, StoreUnavailable)


def test_the_right_spelling_can_be_given() -> None:
    with pytest.raises(TypeError, match=r"guard_agent\(agent, Policy\(\.\.\.\)\)"):
        policy_from(StopRepeatedCalls(), owner="guard_agent", spelling="guard_agent(agent, Policy(...))")


def test_a_call_that_did_not_run_after_all_is_withdrawn() -> None:
    from repeat_hooks import RefusalKind, ToolCall

    policy, state = Policy(), GuardState()
    calls = [ToolCall("track", {"n": 1}, call_id=f"c{n}") for n in range(2)]
    assert policy.decide_tool_calls(state, calls) == [None, None]
    policy.record_rejection(state, calls[1])  # a human rejected it: it never ran, and waits for no outcome
    policy.record_rejection(state, calls[1])  # said twice: marked once
    assert list(state.turn.counts.values()) == [2]  # a rejected call still counts toward its repeats
    refused = policy.decide_tool_call(state, ToolCall("track", {"n": 1}, call_id="c9"))
    assert refused is not None and refused.reason is RefusalKind.REJECTED
    policy.record_rejection(state, ToolCall("track", {"n": 1}, call_id="c9"))  # a refusal stays a refusal
    assert list(state.turn.counts.values()) == [3]


def test_the_usual_budget_check_names_the_keyword() -> None:
    from repeat_hooks.kit import check_budgets

    with pytest.raises(
        GuardSetupError, match=r"max_cost_usd=\.\.\.\) could never trip: set it up with X\(\.\.\., cost="
    ):
        check_budgets(Policy(max_cost_usd=1.0), owner="X", cost=None, clock=None)
    with pytest.raises(GuardSetupError, match=r"clock=repeat_hooks.kit.monotonic"):
        check_budgets(Policy(max_model_seconds=5), owner="X", cost=None, clock=None)
    check_budgets(Policy(max_cost_usd=1.0, max_model_seconds=5), owner="X", cost=TokenPrices(1, 1), clock=time_now)


def time_now() -> float:
    return 0.0


def test_the_policy_class_itself_is_not_a_policy() -> None:
    with pytest.raises(TypeError, match=r"takes a Policy instance, not the class Policy: pass X\(Policy\(\.\.\.\)\)"):
        policy_from(Policy, owner="X")


def test_a_cost_or_clock_that_is_not_a_function_is_refused_at_setup() -> None:
    from repeat_hooks.kit import check_budgets

    with pytest.raises(TypeError, match=r"X\(cost=\.\.\.\) takes a CostOf.*TokenPrices.*got float"):
        check_budgets(Policy(max_cost_usd=1.0), owner="X", cost=3.0, clock=None)
    with pytest.raises(TypeError, match=r"X\(clock=\.\.\.\) takes a Clock"):
        check_budgets(Policy(), owner="X", cost=None, clock=5)
    with pytest.raises(ValueError, match=r"^TokenPrices: input_usd_per_million and output"):
        TokenPrices(0, 0)


# -- usage as each SDK spells it, at the edges --------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        # Strands without totalTokens: the input is inputTokens plus the cache reads and writes
        (
            {"inputTokens": 5, "outputTokens": 20, "cacheReadInputTokens": 800, "cacheWriteInputTokens": 50},
            (855, 20, 800),
        ),
        ({"inputTokens": 900}, (900, 0, 0)),  # a camelCase usage with no output count yet
        ({"outputTokens": 10}, (0, 10, 0)),  # or with no input count
        # Anthropic with only one of the cache counts: input_tokens still leaves the cache out
        ({"input_tokens": 100, "output_tokens": 7, "cache_read_input_tokens": 800}, (900, 7, 800)),
        ({"input_tokens": 100, "output_tokens": 7, "cache_creation_input_tokens": 50}, (150, 7, 0)),
    ],
)
def test_usage_tokens_with_some_counts_missing(usage: Any, tokens: tuple[int, int, int]) -> None:
    assert usage_tokens(usage) == tokens


def test_a_usage_object_that_raises_is_all_zeros() -> None:
    class Hostile:
        @property
        def input_tokens(self) -> int:
            raise RuntimeError("usage unavailable")

    assert usage_tokens(Hostile()) == (0, 0, 0)
    assert TokenPrices(3, 15)(Hostile()) == 0


def test_token_prices_in_dollars_exactly() -> None:
    prices = TokenPrices(3, 15, cached_input_usd_per_million=0.5)
    assert prices.dollars(1_000_000, 0) == 3.0  # no cached count given: none of the input was cached
    assert prices.dollars(1_000, 0) == pytest.approx(0.003, rel=1e-9)
    assert prices.dollars(0, 2_000_000) == 30.0


def test_cheap_prices_are_prices() -> None:
    prices = TokenPrices(0.1, 0.4)  # a small model: under a dollar per million either way
    assert prices.dollars(1_000_000, 1_000_000) == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"^TokenPrices: .* are both 0, so max_cost_usd could never trip$"):
        TokenPrices(0, 0.0)


def test_a_stopwatch_never_counts_less_than_nothing() -> None:
    now = iter([10.0, 10.25, 9.0])
    watch = Stopwatch(lambda: next(now))
    watch.start()
    assert watch.seconds() == 0.25
    assert watch.seconds() == 0.0  # the clock went back: no time, not negative time
    untimed = Stopwatch(None)
    untimed.start()  # no clock: starting reads nothing
    assert untimed.seconds() == 0.0


# -- the messages of setup mistakes, in full ----------------------------------------------------------------


def test_both_a_policy_and_settings_name_every_setting() -> None:
    with pytest.raises(TypeError, match=r"not both: put max_calls, window inside Policy\(\.\.\.\)$"):
        policy_from(Policy(), {"window": 9, "max_calls": 2}, owner="X")


def test_an_unknown_setting_with_no_close_one_lists_the_settings() -> None:
    settings = ", ".join(Policy.model_fields)
    with pytest.raises(TypeError) as raised:
        policy_from(None, {"zzz": 1}, owner="X")
    assert str(raised.value) == f"X got an unknown setting 'zzz'; the settings are Policy's: {settings}"


def test_a_budget_this_sdk_cannot_feed_says_why() -> None:
    why = {Feed.SECONDS: "its events carry no latency"}
    with pytest.raises(GuardSetupError) as raised:
        check_feeds(Policy(max_model_seconds=5), can={Feed.OUTCOMES, Feed.MODEL_CALLS}, owner="Claude", why=why)
    assert str(raised.value) == (
        "Policy(max_model_seconds=...) could never trip: Claude cannot feed seconds (its events carry no latency): "
        "leave it None"
    )
    with pytest.raises(GuardSetupError, match=r"need: use Policy\(count='per_turn'\)$"):
        check_feeds(Policy(count="progress"), can={Feed.MODEL_CALLS}, owner="X")


def test_the_usual_budget_check_passes_on_the_owner_the_reason_and_the_error() -> None:
    from repeat_hooks.kit import check_budgets

    class PluginSetupError(GuardSetupError):
        pass

    with pytest.raises(PluginSetupError) as raised:
        check_budgets(
            Policy(max_model_calls=5),
            owner="Plugin",
            cost=None,
            clock=None,
            feeds=(Feed.OUTCOMES,),
            why={Feed.MODEL_CALLS: "it sees no model calls"},
            error=PluginSetupError,
        )
    assert "Plugin cannot feed model_calls (it sees no model calls): leave it None" in str(raised.value)


def test_a_tool_name_half_right_still_gets_a_suggestion() -> None:
    with pytest.raises(GuardSetupError, match=r"names 'lookup'.*did you mean 'lookup_customer'\?$"):
        check_tool_names(Policy(limits={"lookup": 3}), ["lookup_customer", "refund"], owner="X")


def test_a_tool_name_when_the_agent_has_no_tools() -> None:
    with pytest.raises(GuardSetupError, match=r"none of X's agent's tools; the agent's tools are none$"):
        check_tool_names(Policy(exempt={"search"}), [], owner="X")


def test_a_corrupt_state_says_what_was_wrong_with_it() -> None:
    with pytest.raises(StateCorrupt) as raised:
        load_state('{"turn": "x"}')
    assert str(raised.value).startswith(
        "the stored guard state is not a repeat-hooks GuardState (ValidationError: 1 validation error for GuardState); "
    )
    with pytest.raises(StateCorrupt, match=r"^the stored guard state is a int, not JSON or a dict; delete it"):
        load_state(42)  # type: ignore[arg-type]


def test_a_state_as_long_as_the_limit_still_loads() -> None:
    from repeat_hooks.state import MAX_STATE_CHARS

    text = GuardState().model_dump_json()
    assert load_state(text + " " * (MAX_STATE_CHARS - len(text))) == GuardState()
    with pytest.raises(StateCorrupt, match="more than any state the guard writes"):
        load_state(text + " " * (MAX_STATE_CHARS + 1 - len(text)))


# -- the conformance kit's check: what runs around the agent, branches, approvals ------------------------------


class LoopDriver:
    """The reference agent in a loop around it (``rounds``), with what the loop does after the guard's stop:
    ``"end"`` (right), ``"answer_stop"`` (it runs on, each later round answered with the stop text, as ADK's
    ``LoopAgent`` did), ``"fresh_turn"`` (it runs on, each later round a new turn of the guard's) or
    ``"silent"`` (it runs on, each later round ending at once with nothing the caller sees)."""

    def __init__(self, after_stop: str) -> None:
        self.after_stop = after_stop

    def run(self, scenario: Scenario, box: ToolBox) -> list[TurnOutcome]:
        guard, cursor, outcomes = StopRepeatedCalls(policy=scenario.policy), Cursor(scenario), []
        for number, _turn in enumerate(scenario.turns):
            guard.pre_agent_turn(turn_id=f"t{number}")
            cursor.start_turn(number)
            seen: list[str] = []
            finals: list[str] = []
            stop = None
            rounds = 0
            for round_ in range(scenario.rounds):
                rounds += 1
                if stop is not None and self.after_stop == "fresh_turn":
                    guard.pre_agent_turn(turn_id=f"t{number}-{round_}")
                if stop is not None and self.after_stop == "silent":
                    continue
                finals.append(ReferenceDriver().agent(scenario, box, guard, cursor, seen))
                stop = stop or guard.stop
                if stop is not None and self.after_stop == "end":
                    break
            stop_messages = sum(final.startswith(STOPPED) for final in finals)
            outcomes.append(TurnOutcome(finals[-1], stop, seen, cursor.step, stop_messages, rounds=rounds))
        return outcomes


def test_a_loop_that_ends_at_the_stop_meets_the_kit() -> None:
    for name in ("a_stop_ends_the_loop_around_the_agent", "the_loop_around_the_agent_runs_every_round"):
        box = ToolBox(scenario(name))
        check(scenario(name), box, LoopDriver("end").run(scenario(name), box))


def test_check_catches_a_loop_that_answers_each_later_round_with_the_stop() -> None:
    case = scenario("a_stop_ends_the_loop_around_the_agent")
    box = ToolBox(case)
    outcomes = LoopDriver("answer_stop").run(case, box)
    assert outcomes[0].model_calls == 5 and box.runs == {"track_parcel": 2}  # only the stop messages tell
    with pytest.raises(AssertionError) as raised:
        check(case, box, outcomes)
    assert str(raised.value) == (
        "scenario a_stop_ends_the_loop_around_the_agent: turn 0: rounds run 3, expected 1; "
        "turn 0: the stop message reached the caller 3 times, expected 1"
    )


def test_check_catches_a_loop_that_goes_on_doing_nothing_after_the_stop() -> None:
    case = scenario("a_stop_ends_the_loop_around_the_agent")
    box = ToolBox(case)
    outcomes = LoopDriver("silent").run(case, box)
    assert (outcomes[0].model_calls, outcomes[0].stop_messages, box.runs) == (5, 1, {"track_parcel": 2})
    with pytest.raises(AssertionError, match=r"^scenario \S+: turn 0: rounds run 3, expected 1$"):
        check(case, box, outcomes)


def test_check_catches_a_loop_whose_next_round_calls_the_model_again() -> None:
    case = scenario("a_stop_ends_the_loop_around_the_agent")
    box = ToolBox(case)
    with pytest.raises(AssertionError) as raised:
        check(case, box, LoopDriver("fresh_turn").run(case, box))
    assert "turn 0: 10 model calls, expected 5 (none may follow a stop, in the agent or around it)" in str(raised.value)
    assert "tool runs {'track_parcel': 4}, expected {'track_parcel': 2}" in str(raised.value)


def test_check_catches_a_driver_that_runs_no_loop_around_the_agent() -> None:
    case = scenario("the_loop_around_the_agent_runs_every_round")
    box = ToolBox(case)
    alone = Scenario(case.name, case.doc, case.tools, case.turns, case.expect, case.settings)  # rounds=1
    with pytest.raises(AssertionError, match=r"tool runs \{'track_parcel': 1\}.*turn 0: 2 model calls, expected 5"):
        check(case, box, LoopDriver("end").run(alone, box))
    with pytest.raises(AssertionError, match=r"turn 0: rounds run 1, expected 3"):
        check(case, box, LoopDriver("end").run(alone, box))


def test_check_catches_branches_that_share_their_counts() -> None:
    case = scenario("isolated_branches_count_apart")
    box = ToolBox(case)
    guard, seen, cursors = StopRepeatedCalls(policy=case.policy), [], [Cursor(case) for _ in range(3)]
    guard.pre_agent_turn(turn_id="t0")
    finals = []
    for cursor in cursors:  # one guard for three models that never saw each other's results
        cursor.start_turn(0)
        finals.append(ReferenceDriver().agent(case, box, guard, cursor, seen))
    shared = TurnOutcome(finals[-1], None, seen, model_calls=sum(c.step for c in cursors), stop_messages=0)
    with pytest.raises(AssertionError, match=r"tool runs \{'track_parcel': 2\}, .*1 refusals reached the model"):
        check(case, box, [shared])


def test_check_catches_a_human_asked_about_a_refused_call_and_an_approval_that_never_ran() -> None:
    case = scenario("approved_calls_run_once_and_keep_counts")
    box = ToolBox(case)
    outcomes = ReferenceDriver().run(case, box)
    check(case, box, outcomes)
    assert box.asked == box.runs == {"refund_order": 2}
    box.asked["refund_order"] = 4  # the human was also asked about the two refused repeats
    with pytest.raises(AssertionError, match=r"refund_order: a human approved 4 calls and 2 ran \(each approved"):
        check(case, box, outcomes)
    plain = scenario("same_result_is_refused")
    box = ToolBox(plain)
    outcomes = ReferenceDriver().run(plain, box)
    box.asked["track_parcel"] = 1
    with pytest.raises(AssertionError, match="track_parcel: a human was asked about 1 calls of a tool that needs none"):
        check(plain, box, outcomes)


def test_a_scenario_must_give_each_turn_a_model_call_count() -> None:
    case = scenario("same_result_is_refused")
    broken = Scenario(case.name, case.doc, case.tools, case.turns, Expect({"track_parcel": 2}, 1, (None,), ()))
    box = ToolBox(broken)
    with pytest.raises(AssertionError, match=r"expects 1 stops and 0 model call counts$"):
        check(broken, box, ReferenceDriver().run(case, box))


def test_a_stop_lag_excuses_only_the_stated_model_calls_after_a_stop() -> None:
    from dataclasses import replace

    case = scenario("max_model_calls_ends_the_turn")
    box = ToolBox(case)
    (outcome,) = ReferenceDriver().run(case, box)
    late = replace(outcome, model_calls=4)  # an SDK with no hook before a model call: the stop lands one later
    check(case, box, [late], stop_lag=1)
    with pytest.raises(AssertionError, match=r"turn 0: 4 model calls, expected 3 \(none may follow a stop"):
        check(case, box, [late])
    with pytest.raises(AssertionError, match=r"turn 0: 5 model calls, expected 4 \(none may follow a stop"):
        check(case, box, [replace(outcome, model_calls=5)], stop_lag=1)
    plain = scenario("same_result_is_refused")  # a turn the guard did not stop has no lag
    box = ToolBox(plain)
    (outcome,) = ReferenceDriver().run(plain, box)
    with pytest.raises(AssertionError, match=r"turn 0: 5 model calls, expected 4$"):
        check(plain, box, [replace(outcome, model_calls=5)], stop_lag=1)
