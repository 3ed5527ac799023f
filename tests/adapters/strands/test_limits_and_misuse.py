"""Budgets fed from Strands' own figures, and setups that could not work, refused loudly."""

from __future__ import annotations

import itertools
import logging

import pytest
from repeat_hooks_strands import STOP_KEY, RepeatGuardHooks, read_state, stop_of
from repeat_hooks_strands.testing import ScriptedModel, keep_calling, tool_use
from strands import Agent

from repeat_hooks import GuardSetupError, Policy, StateCorrupt, StopReason, StopRepeatedCalls, TokenPrices
from repeat_hooks.kit import usage_tokens

from .conftest import ARGS, SEED_004, Carrier, looping_agent, model_of


def progress_agent(
    carrier: Carrier, guard: RepeatGuardHooks, input_tokens: int = 100, output_tokens: int = 20
) -> Agent:
    """An agent whose model keeps tracking new parcels (progress: never refused) until a budget ends the turn."""
    numbers = itertools.count(1)
    return Agent(
        model=ScriptedModel(
            then=lambda model, messages: [tool_use("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})],
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        ),
        tools=[carrier.tool],
        hooks=[guard],
        callback_handler=None,
    )


def test_max_cost_usd_is_fed_from_strands_usage(carrier: Carrier) -> None:
    # 1000 input + 200 output tokens a response at $3 / $15 per million: $0.006 a response.
    guard = RepeatGuardHooks(max_cost_usd=0.02, cost=TokenPrices(3, 15))
    agent = progress_agent(carrier, guard, input_tokens=1000, output_tokens=200)

    result = agent("Track all my parcels")

    assert model_of(agent).calls == 4  # $0.024 > $0.02 after the 4th response: no 5th
    assert result.state[STOP_KEY] == "cost"
    assert str(result).strip().startswith("I stopped")
    assert read_state(agent).turn.cost_usd == pytest.approx(0.024)


def test_max_model_seconds_is_fed_from_the_clock(carrier: Carrier) -> None:
    ticks = itertools.count(0, 2.0)  # every reading 2 s later: each model call takes 2 s
    guard = RepeatGuardHooks(max_model_seconds=5, clock=lambda: float(next(ticks)))
    agent = progress_agent(carrier, guard)

    result = agent("Track all my parcels")

    assert model_of(agent).calls == 3  # 6 s > 5 s after the 3rd
    assert result.state[STOP_KEY] == "time"


def test_max_model_calls_counts_model_calls(carrier: Carrier) -> None:
    agent = progress_agent(carrier, RepeatGuardHooks(max_model_calls=2))

    result = agent("Track all my parcels")

    assert model_of(agent).calls == 2 and len(carrier.calls) == 2
    assert result.state[STOP_KEY] == "max_steps"


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        # OpenAI, Gemini: inputTokens holds the cached tokens.
        ({"inputTokens": 1000, "outputTokens": 10, "totalTokens": 1010, "cacheReadInputTokens": 800}, (1000, 10, 800)),
        # Anthropic, Bedrock: cache reads and writes are outside inputTokens, inside totalTokens.
        (
            {
                "inputTokens": 200,
                "outputTokens": 10,
                "totalTokens": 1110,
                "cacheReadInputTokens": 800,
                "cacheWriteInputTokens": 100,
            },
            (1100, 10, 800),
        ),
        # No totalTokens: inputTokens plus the cache counts.
        ({"inputTokens": 200, "outputTokens": 10, "cacheReadInputTokens": 800}, (1000, 10, 800)),
        ({}, (0, 0, 0)),
    ],
)
def test_the_core_reads_the_cost_of_each_providers_usage(usage: dict[str, int], tokens: tuple[int, int, int]) -> None:
    # The figures calls.usage_view gave before the core read Strands' usage itself (issue 15).
    assert usage_tokens(usage) == tokens
    prices = TokenPrices(3, 15, 0.3)
    assert prices(usage) == pytest.approx(prices.dollars(*tokens))


def test_the_cost_function_gets_the_responses_usage_as_strands_reports_it(carrier: Carrier) -> None:
    seen: list[object] = []

    def cost(usage: object) -> float:
        seen.append(usage)
        return 0.01

    guard = RepeatGuardHooks(max_cost_usd=1.0, cost=cost)
    agent = Agent(model=ScriptedModel("In transit."), tools=[carrier.tool], hooks=[guard], callback_handler=None)

    agent("Where is FR-7731?")

    assert seen == [{"inputTokens": 100, "outputTokens": 20, "totalTokens": 120}]
    assert read_state(agent).turn.cost_usd == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_cost_usd": 1.0}, "cost=TokenPrices("),
        ({"max_model_seconds": 10.0, "clock": None}, "clock=repeat_hooks.kit.monotonic"),
    ],
)
def test_a_budget_nothing_feeds_fails_at_construction(settings: dict[str, object], message: str) -> None:
    with pytest.raises(GuardSetupError, match=message.replace("(", r"\(").replace(".", r"\.")):
        RepeatGuardHooks(**settings)  # type: ignore[arg-type]


def test_the_policy_argument_is_checked() -> None:
    with pytest.raises(TypeError, match="did you mean max_calls"):
        RepeatGuardHooks(max_call=2)
    with pytest.raises(TypeError, match="not a StopRepeatedCalls"):
        RepeatGuardHooks(StopRepeatedCalls())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        RepeatGuardHooks(Policy(), max_calls=2)
    with pytest.raises(GuardSetupError, match="state_key"):
        RepeatGuardHooks(state_key=" ")
    assert RepeatGuardHooks().policy == Policy()
    assert RepeatGuardHooks(max_calls=3).policy == Policy(max_calls=3)


def test_one_guard_registered_twice_on_an_agent_fails_when_the_agent_is_built(carrier: Carrier) -> None:
    guard = RepeatGuardHooks()

    with pytest.raises(GuardSetupError, match="registered twice"):
        Agent(model=ScriptedModel(), tools=[carrier.tool], hooks=[guard], plugins=[guard], callback_handler=None)


def test_two_guards_on_one_state_key_fail_when_the_agent_is_built(carrier: Carrier) -> None:
    with pytest.raises(GuardSetupError, match=r"share the agent\.state key 'repeat_hooks'"):
        Agent(
            model=ScriptedModel(),
            tools=[carrier.tool],
            hooks=[RepeatGuardHooks(), RepeatGuardHooks()],
            callback_handler=None,
        )
    # Each on a key of its own: both guard (here the stricter one refuses first).
    agent = Agent(
        model=ScriptedModel(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        hooks=[RepeatGuardHooks(SEED_004), RepeatGuardHooks(max_calls=1, state_key="strict")],
        callback_handler=None,
    )
    agent("Keep checking")
    assert carrier.calls == ["FR-7731"]


def test_a_tool_name_that_matches_no_tool_fails_at_the_first_model_call(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardHooks(limits={"track_parcell": 1}))

    with pytest.raises(GuardSetupError, match="did you mean 'track_parcel'"):
        agent("Where is FR-7731?")
    assert model_of(agent).calls == 0 and carrier.calls == []

    unchecked = looping_agent(
        carrier, RepeatGuardHooks(SEED_004.model_copy(update={"limits": {"later": 1}}), check_tools=False)
    )
    unchecked("Keep checking")
    assert carrier.calls == ["FR-7731", "FR-7731"]


def test_a_corrupt_state_is_an_outage_that_names_the_key(carrier: Carrier, caplog: pytest.LogCaptureFixture) -> None:
    """A foreign value under the state key is no guard state: the guard never guesses counts. It logs where (and to
    delete it), and ``fail`` decides: ``"closed"`` ends the turn before any model call, ``"open"`` lets it run."""
    closed = looping_agent(carrier, RepeatGuardHooks(SEED_004, fail="closed"))
    closed.state.set("repeat_hooks", {"turn": "nonsense"})

    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        result = closed("Where is FR-7731?")

    assert model_of(closed).calls == 0 and carrier.calls == []
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE and str(result).strip() == stop.message
    assert "agent.state['repeat_hooks']" in caplog.text and "delete it" in caplog.text
    with pytest.raises(StateCorrupt, match=r"agent\.state\['repeat_hooks'\].*delete it"):
        stop_of(closed)

    opened = Agent(
        model=ScriptedModel([tool_use("track_parcel", ARGS)], "In transit."),
        tools=[carrier.tool],
        hooks=[RepeatGuardHooks(SEED_004)],
        callback_handler=None,
    )
    opened.state.set("repeat_hooks", {"turn": "nonsense"})

    assert str(opened("Where is FR-7731?")).strip() == "In transit." and carrier.calls == ["FR-7731"]
