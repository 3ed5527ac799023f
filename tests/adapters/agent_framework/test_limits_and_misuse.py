"""Budgets fed from Agent Framework's own figures, how the guard combines with the SDK's own limits
(``FunctionInvocationConfiguration``: ``max_iterations``, ``max_function_calls``,
``max_consecutive_errors_per_request``), and setups that could not work, refused loudly with the right spelling."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from agent_framework import Agent, ChatMiddlewareLayer, tool
from repeat_hooks_agent_framework import GuardSetupError, RepeatGuardMiddleware, read_state, stop_of
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, keep_calling, tool_results

from repeat_hooks import Policy, StateCorrupt, StopReason, StopRepeatedCalls, TokenPrices
from repeat_hooks.stores import MemoryStore

from .conftest import ARGS, REFUSAL, SEED_004, STOPPED, Carrier, client_of, looping_agent


def progress_agent(carrier: Carrier, guard: RepeatGuardMiddleware | None, **client: Any) -> Agent[Any]:
    """An agent whose model keeps tracking new parcels (progress: never refused) until a limit ends the run."""
    numbers = itertools.count(1)
    return Agent(
        client=ScriptedClient(
            then=lambda c, m: [function_call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})], **client
        ),
        tools=[carrier.tool],
        middleware=[guard] if guard is not None else [],
    )


async def test_max_cost_usd_is_fed_from_the_responses_usage_details(carrier: Carrier) -> None:
    # 1000 input + 200 output tokens a response at $3 / $15 per million: $0.006 a response.
    guard = RepeatGuardMiddleware(max_cost_usd=0.02, cost=TokenPrices(3, 15))
    agent = progress_agent(carrier, guard, input_tokens=1000, output_tokens=200)
    session = agent.create_session()

    response = await agent.run("Track all my parcels", session=session)

    assert client_of(agent).calls == 4  # $0.024 > $0.02 after the 4th response: no 5th
    stop = stop_of(response)
    assert stop is not None and stop.reason is StopReason.COST and response.text == stop.message
    assert read_state(session).turn.cost_usd == pytest.approx(0.024)


async def test_max_model_seconds_is_fed_from_the_clock(carrier: Carrier) -> None:
    ticks = itertools.count(0, 2.0)  # every reading 2 s later: each model call takes 2 s
    agent = progress_agent(carrier, RepeatGuardMiddleware(max_model_seconds=5, clock=lambda: float(next(ticks))))

    response = await agent.run("Track all my parcels")

    assert client_of(agent).calls == 3  # 6 s > 5 s after the 3rd
    assert (stop := stop_of(response)) is not None and stop.reason is StopReason.TIME


async def test_the_guards_step_budget_comes_before_max_iterations(carrier: Carrier) -> None:
    """``max_iterations`` (40 by default, ``_tools.py:109``) counts the loop's model round-trips; when they are used
    up the loop makes one more call with ``tool_choice="none"`` (``_tools.py:5909``) and the caller gets that
    answer. The guard's ``max_model_calls`` counts every model call and ends the run with its message first."""
    sdk = progress_agent(carrier, RepeatGuardMiddleware())
    client_of(sdk).function_invocation_configuration["max_iterations"] = 3
    guarded = progress_agent(carrier, RepeatGuardMiddleware(max_model_calls=3))

    by_sdk = await sdk.run("Track all my parcels")
    by_guard = await guarded.run("Track all my parcels")

    assert (by_sdk.text, client_of(sdk).calls, stop_of(by_sdk)) == ("Done.", 4, None)  # 3 + the no-tools call
    assert client_of(guarded).calls == 3 and (stop := stop_of(by_guard)) is not None
    assert stop.reason is StopReason.MAX_STEPS and by_guard.text.startswith("I stopped")


async def test_a_refused_call_counts_toward_max_function_calls(carrier: Carrier) -> None:
    """``max_function_calls`` counts each result the function middleware pipeline produced, a refusal too
    (``_FunctionExecutionBatch.executed_call_count``): with 3, the 3rd call is refused, then the loop takes the
    tools away and the model must answer; the guard never reaches its stop."""
    agent = looping_agent(carrier)
    client_of(agent).function_invocation_configuration["max_function_calls"] = 3

    response = await agent.run("Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 2 and tool_results(response)[-1] == REFUSAL
    assert (response.text, stop_of(response), client_of(agent).calls) == ("Done.", None, 4)


async def test_the_sdks_error_limit_and_the_guards_combine() -> None:
    """``max_consecutive_errors_per_request`` (3) counts responses whose calls failed, and then takes the tools
    away; ``max_errors_in_a_row`` counts failed calls and ends the run before the next model call. The lower one
    acts first; a response of refusals resets the SDK's count (a refusal is no error result)."""
    runs: list[str] = []

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        runs.append(tracking_number)
        raise RuntimeError("carrier timeout")

    def agent(guard: RepeatGuardMiddleware) -> Agent[Any]:
        numbers = itertools.count()
        return Agent(
            client=ScriptedClient(
                then=lambda c, m: [function_call("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})]
            ),
            tools=[track_parcel],
            middleware=[guard],
        )

    lenient = agent(RepeatGuardMiddleware(max_errors_in_a_row=5))
    by_sdk = await lenient.run("Where are my parcels?")
    strict = agent(RepeatGuardMiddleware(max_errors_in_a_row=2))
    by_guard = await strict.run("Where are my parcels?")

    assert (by_sdk.text, stop_of(by_sdk), client_of(lenient).calls) == ("Done.", None, 4)
    assert (stop := stop_of(by_guard)) is not None and stop.reason is StopReason.TOO_MANY_ERRORS
    assert client_of(strict).calls == 2 and len(runs) == 3 + 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_cost_usd": 1.0}, "cost=TokenPrices("),
        ({"max_model_seconds": 10.0, "clock": None}, "clock=repeat_hooks.kit.monotonic"),
    ],
)
def test_a_budget_nothing_feeds_fails_at_construction(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(GuardSetupError, match=message.replace("(", r"\(").replace(".", r"\.")):
        RepeatGuardMiddleware(**settings)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_call": 2}, TypeError, "did you mean max_calls"),
        ({"stor": MemoryStore()}, TypeError, r"did you mean store=\.\.\.\?"),
        ({"statekey": "x"}, TypeError, r"did you mean state_key=\.\.\.\?"),
        ({"on_stop": "output"}, TypeError, r"on_stop=\.\.\.\) is 'reply' or 'raise', not 'output'"),
        ({"fail": "close"}, TypeError, r"'open' or 'closed', not 'close'"),
        ({"store": MemoryStore}, TypeError, r"not the class: RepeatGuardMiddleware\(store=MemoryStore\(\.\.\.\)\)"),
        ({"is_failure": "timeout"}, TypeError, r"is_failure=\.\.\.\) takes a function"),
        ({"state_key": " "}, GuardSetupError, r"state_key=' '\) must be a non-empty string"),
    ],
)
def test_a_misspelt_or_misplaced_keyword_says_the_right_spelling(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RepeatGuardMiddleware(**options)


def test_the_policy_argument_is_checked() -> None:
    with pytest.raises(TypeError, match="not a StopRepeatedCalls"):
        RepeatGuardMiddleware(StopRepeatedCalls())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        RepeatGuardMiddleware(Policy(), max_calls=2)
    with pytest.raises(TypeError, match="not the class Policy"):
        RepeatGuardMiddleware(Policy)  # type: ignore[arg-type]


async def test_one_guard_given_to_the_agent_and_to_its_run_fails_at_that_run(carrier: Carrier) -> None:
    guard = RepeatGuardMiddleware(SEED_004)
    agent = looping_agent(carrier, guard)

    with pytest.raises(GuardSetupError, match="every call would be counted twice") as raised:
        await agent.run("Where is FR-7731?", middleware=[guard])
    assert client_of(agent).calls == 0 and carrier.calls == []
    said = str(raised.value)  # where the guards were found, and no "agent None"
    assert "one run of an agent with no name (one in Agent(middleware=...), one in agent.run(middleware=...))" in said

    named = Agent(client=ScriptedClient(then=keep_calling("track_parcel", ARGS)), name="parcels", tools=[carrier.tool])
    with pytest.raises(GuardSetupError, match=r"of agent 'parcels' \(both in agent\.run\(middleware=\.\.\.\)\)"):
        await named.run("Where is FR-7731?", middleware=[RepeatGuardMiddleware(), RepeatGuardMiddleware()])
    assert client_of(named).calls == 0 and carrier.calls == []


async def test_two_guards_on_one_state_key_fail_and_on_two_keys_both_guard(carrier: Carrier) -> None:
    agent = Agent(
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(), RepeatGuardMiddleware()],
    )
    with pytest.raises(GuardSetupError, match=r"two RepeatGuardMiddleware with state_key 'repeat_hooks'") as raised:
        await agent.run("Keep checking")
    assert "(both in Agent(middleware=...))" in str(raised.value) and "agent None" not in str(raised.value)
    assert carrier.calls == []

    agent = Agent(
        client=ScriptedClient(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(SEED_004), RepeatGuardMiddleware(max_calls=1, state_key="strict")],
    )
    await agent.run("Keep checking")
    assert carrier.calls == ["FR-7731"]  # the stricter one refused first


async def test_a_tool_name_that_matches_no_tool_fails_at_the_first_model_call(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardMiddleware(limits={"track_parcell": 1}))

    with pytest.raises(GuardSetupError, match="did you mean 'track_parcel'"):
        await agent.run("Where is FR-7731?")
    assert client_of(agent).calls == 0 and carrier.calls == []

    unchecked = looping_agent(
        carrier, RepeatGuardMiddleware(SEED_004.model_copy(update={"limits": {"later": 1}}), check_tools=False)
    )
    assert (await unchecked.run("Keep checking")).text == STOPPED


async def test_a_guard_given_to_the_chat_client_is_skipped_by_the_sdk_with_its_warning(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    """The guard is agent middleware: a chat client installs only chat and function middleware and skips it with a
    warning (``_middleware.py:2307``). Nothing of the guard runs there: give it to the agent."""
    assert issubclass(ScriptedClient, ChatMiddlewareLayer)
    with caplog.at_level(logging.WARNING, logger="agent_framework"):
        client = ScriptedClient(then=keep_calling("track_parcel", ARGS), middleware=[RepeatGuardMiddleware()])
    agent = Agent(client=client, tools=[carrier.tool])

    response = await agent.run("Where is FR-7731?", options={"max_tokens": 10})

    assert "Ignoring agent middleware of type RepeatGuardMiddleware" in caplog.text
    assert stop_of(response) is None and len(carrier.calls) > 3  # unguarded: the SDK's max_iterations ended it


async def test_a_corrupt_state_is_an_outage_that_names_the_key(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    """A foreign value under the state key is no guard state: the guard never guesses counts. It logs where (and to
    delete it), and ``fail`` decides: ``"closed"`` ends the run before any model call, ``"open"`` lets it run."""
    closed = looping_agent(carrier, RepeatGuardMiddleware(SEED_004, fail="closed"))
    session = closed.create_session()
    session.state["repeat_hooks"] = {"turn": "nonsense"}

    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        response = await closed.run("Where is FR-7731?", session=session)

    assert client_of(closed).calls == 0 and carrier.calls == []
    stop = stop_of(response)
    assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE and response.text == stop.message
    assert "session.state['repeat_hooks']" in caplog.text and "delete it" in caplog.text
    with pytest.raises(StateCorrupt, match=r"session\.state\['repeat_hooks'\].*delete it"):
        stop_of(session)

    opened = Agent(
        client=ScriptedClient([function_call("track_parcel", ARGS)], "In transit."),
        tools=[carrier.tool],
        middleware=[RepeatGuardMiddleware(SEED_004)],
    )
    session = opened.create_session()
    session.state["repeat_hooks"] = {"turn": "nonsense"}
    assert (await opened.run("Where is FR-7731?", session=session)).text == "In transit."
    assert carrier.calls == ["FR-7731"]


async def test_a_corrupt_state_with_fail_open_is_logged_once_a_run(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    """Every seam of the run finds the same foreign value: one error line for the run, not one per seam; the run goes
    on unguarded (the SDK's own ``max_iterations`` ends it), the value left as it was. The next run logs it again."""
    agent = looping_agent(carrier, RepeatGuardMiddleware(SEED_004), name="parcels")
    session = agent.create_session()
    session.state["repeat_hooks:parcels"] = "garbage"  # this agent's key

    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        response = await agent.run("Where is FR-7731?", session=session)

    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1 and "session.state['repeat_hooks:parcels']" in errors[0].getMessage()
    assert len(carrier.calls) == 40 and stop_of(response) is None  # unguarded: the SDK's limit ended it
    assert session.state["repeat_hooks:parcels"] == "garbage"
    with pytest.raises(StateCorrupt, match=r"session\.state\['repeat_hooks:parcels'\]"):
        stop_of(session)

    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="repeat_hooks"):
        await agent.run("Again", session=session)
    assert len([record for record in caplog.records if record.levelno >= logging.ERROR]) == 1
