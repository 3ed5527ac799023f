"""``store=``, ``fail=``, ``on_stop="raise"`` and ``is_failure`` on Strands' real agent loop: the counts live in a
``StateStore`` under the conversation (a session manager's ``session_id``, or ``repeat_hooks.kit.request``) and the
agent's ``agent_id``, a retried request names its turn (``invocation_state={TURN_KEY: ...}``), and the setups that
cannot work fail loudly."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import pytest
from repeat_hooks_strands import (
    STATE_KEY,
    STOP_KEY,
    TURN_KEY,
    GuardSetupError,
    RepeatGuardHooks,
    RepeatGuardStopped,
    read_state,
    stop_of,
)
from repeat_hooks_strands.testing import ScriptedModel, keep_calling, tool_results, tool_use
from strands import Agent, tool
from strands.hooks import AfterModelCallEvent, HookProvider, HookRegistry
from strands.session import FileSessionManager
from strands.types.content import Messages
from strands.types.exceptions import EventLoopException

from repeat_hooks import GuardState, StopReason, StoreUnavailable
from repeat_hooks.kit import request
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stores import MemoryStore
from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, REFUSAL, SEED_004, STOPPED, Carrier, looping_agent, model_of

TRACK = [tool_use("track_parcel", ARGS)]


def stored(store: MemoryStore | SQLiteStore, key: str) -> GuardState | None:
    return asyncio.run(store.load(key))


def test_the_counts_live_in_the_store_under_the_conversation_and_the_agent(carrier: Carrier) -> None:
    store = MemoryStore()
    agent = looping_agent(carrier, RepeatGuardHooks(SEED_004, store=store), agent_id="tracker", name="parcels")

    with request(conversation_id="conv-1"):
        result = agent("Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 2 and model_of(agent).calls == 5
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED
    assert result.state[STOP_KEY] == "ignored_refusals" and result.state[STATE_KEY] == stop.model_dump(mode="json")
    state = stored(store, "repeat_hooks:conv-1/tracker/parcels")
    assert state is not None and state.turn.refusals == 3 and state.turn.stop == stop
    assert agent.state.get(STATE_KEY) is None  # nothing in agent.state
    with pytest.raises(GuardSetupError, match=r"stop_of\(agent\(\.\.\.\)\)"):
        stop_of(agent)


def test_two_guards_on_one_sqlite_store_share_a_conversations_counts(carrier: Carrier, tmp_path: Path) -> None:
    """Two processes' worth of guards (two stores on one file), each agent with its own session directory: the
    session id names the conversation, the caller's request id the turn."""
    path = tmp_path / "states.db"

    def agent(model: ScriptedModel, where: str) -> Agent:
        sessions = FileSessionManager(session_id="customer-42", storage_dir=str(tmp_path / where))
        guard = RepeatGuardHooks(SEED_004, store=SQLiteStore(path))
        return Agent(model=model, tools=[carrier.tool], hooks=[guard], session_manager=sessions, callback_handler=None)

    first = agent(ScriptedModel(TRACK, "In transit."), "a")
    first("Keep checking FR-7731", invocation_state={TURN_KEY: "request-1"})
    retried = agent(ScriptedModel(then=keep_calling("track_parcel", ARGS)), "b")
    result = retried("Keep checking FR-7731", invocation_state={TURN_KEY: "request-1"})

    assert carrier.calls == ["FR-7731"] * 2  # the retry's 1st call was the turn's 2nd: the next 3 were refused
    assert tool_results(retried)[1:] == [REFUSAL] * 3
    assert str(result).strip() == STOPPED
    state = stored(SQLiteStore(path), "repeat_hooks:customer-42/default/Strands Agents")
    assert state is not None and state.turn.id == "request-1" and state.turn.number == 1
    assert read_state(first).turn.number == 0  # the sessions saved no guard state

    fresh = agent(ScriptedModel(then=keep_calling("track_parcel", ARGS)), "c")
    fresh("Keep checking FR-7731", invocation_state={TURN_KEY: "request-2"})
    assert len(carrier.calls) == 4  # a new request is a new turn: 2 more


def test_a_batchs_decisions_are_in_the_store_before_its_tools_run() -> None:
    store = MemoryStore()
    seen: list[int] = []

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        state = stored(store, "repeat_hooks:conv-1/default/Strands Agents")
        seen.append(state.turn.responses if state is not None else -1)
        return "in transit"

    agent = Agent(
        model=ScriptedModel(TRACK + TRACK, "Done."),
        tools=[track_parcel],
        hooks=[RepeatGuardHooks(store=store)],
        callback_handler=None,
    )
    with request(conversation_id="conv-1"):
        agent("Where is FR-7731?")

    assert seen == [1, 1]  # both runs saw the response's decisions already committed


def test_a_store_with_nothing_naming_the_conversation_fails_at_the_first_invocation(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardHooks(store=MemoryStore()))

    with pytest.raises(GuardSetupError, match=r"session_manager=.*request\(conversation_id=\.\.\.\)"):
        agent("Where is FR-7731?")
    assert model_of(agent).calls == 0 and carrier.calls == []


class DownStore(MemoryStore):
    """A store that goes down when ``down`` is set (as a Redis server that stops answering)."""

    down = False

    def update_now(self, key: str, change: Any) -> Any:
        if self.down:
            raise StoreUnavailable("redis://10.0.0.1:6379: connection refused")
        return super().update_now(key, change)


@pytest.mark.parametrize("fail", ["closed", "open"])
def test_a_store_that_goes_down_fails_as_fail_says(carrier: Carrier, fail: str) -> None:
    store = DownStore()

    def track_then_down(model: ScriptedModel, messages: Messages) -> list[Any]:
        store.down = True  # the store goes down between the model call and the tools
        return TRACK

    agent = Agent(
        model=ScriptedModel(track_then_down, "In transit."),
        tools=[carrier.tool],
        hooks=[RepeatGuardHooks(store=store, fail=fail)],  # type: ignore[arg-type]
        callback_handler=None,
    )
    with request(conversation_id="conv-1"):
        result = agent("Where is FR-7731?")

    if fail == "closed":  # the tool does not run, the model reads why, and the turn ends
        assert carrier.calls == [] and tool_results(agent) == [STORE_DOWN_REFUSAL]
        stop = stop_of(result)
        assert stop is not None and stop.reason is StopReason.STORE_UNAVAILABLE
        assert str(result).strip() == STORE_DOWN_STOP and model_of(agent).calls == 1
    else:  # the call runs and the turn goes on
        assert carrier.calls == ["FR-7731"] and str(result).strip() == "In transit." and stop_of(result) is None


class AlwaysRetry(HookProvider):
    """A validator that retries every model response: no tool batch ever ends, so a stop comes at a model call."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(AfterModelCallEvent, self.retry)

    def retry(self, event: AfterModelCallEvent) -> None:
        if event.stop_response is not None:
            event.retry = True


def test_on_stop_raise_raises_out_of_the_invocation(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardHooks(SEED_004, on_stop="raise"))

    with pytest.raises(RepeatGuardStopped) as raised:
        agent("Keep checking FR-7731")

    stop = raised.value.stop
    assert stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED and stop_of(agent) == stop
    assert stop_of(raised.value) == stop  # what the caller caught reads as every other stop_of
    assert isinstance(raised.value, EventLoopException) and raised.value.request_state[STOP_KEY] == "ignored_refusals"
    assert carrier.calls == ["FR-7731"] * 2 and model_of(agent).calls == 5
    assert tool_results(agent)[-1] == REFUSAL  # the conversation holds the last response's results
    assert pickle.loads(pickle.dumps(raised.value)).stop == stop

    first = Agent(
        model=ScriptedModel(then=lambda model, messages: "Meh."),
        hooks=[RepeatGuardHooks(max_model_calls=2, on_stop="raise"), AlwaysRetry()],
        callback_handler=None,
    )
    with pytest.raises(RepeatGuardStopped, match="max_steps"):  # at the first cycle's model call, as well
        first("Where is FR-7731?")
    assert model_of(first).calls == 2


async def test_on_stop_raise_raises_out_of_async_invocations(carrier: Carrier) -> None:
    agent = looping_agent(carrier, RepeatGuardHooks(SEED_004, on_stop="raise"))

    with pytest.raises(RepeatGuardStopped):
        await agent.invoke_async("Keep checking FR-7731")
    with pytest.raises(RepeatGuardStopped):
        async for _ in agent.stream_async("Keep checking FR-7731"):
            pass
    assert len(carrier.calls) == 4


def test_is_failure_reads_what_the_model_reads() -> None:
    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now (a carrier that reports its errors as text)."""
        return f"{tracking_number}: carrier timeout, try later"

    def agent(**options: Any) -> Agent:
        numbers = iter(range(100))
        return Agent(
            model=ScriptedModel(
                then=lambda model, messages: [tool_use("track_parcel", {"tracking_number": f"FR-{next(numbers)}"})]
            ),
            tools=[track_parcel],
            hooks=[RepeatGuardHooks(max_errors_in_a_row=2, max_model_calls=6, **options)],
            callback_handler=None,
        )

    failing = agent(is_failure=lambda view: "timeout" in str(view))
    assert stop_of(failing("Where are my parcels?")) == stop_of(failing)
    stop = stop_of(failing)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and model_of(failing).calls == 2

    unchecked = agent()
    unchecked("Where are my parcels?")
    stop = stop_of(unchecked)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS  # Strands' status says success


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"stor": MemoryStore()}, TypeError, r"did you mean store=\.\.\.\?"),
        ({"onstop": "raise"}, TypeError, r"did you mean on_stop=\.\.\.\?"),
        ({"on_stop": "output"}, TypeError, r"on_stop=\.\.\.\) is 'reply' or 'raise', not 'output'"),
        ({"fail": "close"}, TypeError, r"'open' or 'closed', not 'close'"),
        ({"store": MemoryStore}, TypeError, r"not the class: RepeatGuardHooks\(store=MemoryStore\(\.\.\.\)\)"),
        ({"store": "redis://localhost"}, TypeError, r"takes a repeat_hooks StateStore"),
        ({"is_failure": "timeout"}, TypeError, r"is_failure=\.\.\.\) takes a function"),
    ],
)
def test_a_misspelt_or_misplaced_keyword_says_the_right_spelling(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RepeatGuardHooks(**options)


def test_an_agent_used_as_a_tool_keeps_its_own_counts_in_the_conversation(carrier: Carrier) -> None:
    guard = RepeatGuardHooks(SEED_004, store=MemoryStore())
    sub = Agent(
        name="tracker",
        model=ScriptedModel(then=keep_calling("track_parcel", ARGS)),
        tools=[carrier.tool],
        hooks=[guard],
        callback_handler=None,
    )
    orchestrator = Agent(
        model=ScriptedModel([tool_use("tracker", {"input": "Keep checking FR-7731"})], "No news."),
        tools=[sub.as_tool()],
        hooks=[guard],
        callback_handler=None,
    )

    with request(conversation_id="conv-1"):
        result = orchestrator("Where is FR-7731?")

    assert carrier.calls == ["FR-7731"] * 2 and str(result).strip() == "No news."
    assert [text.strip() for text in tool_results(orchestrator)] == [STOPPED]
    assert guard.core.store is not None
    sub_state = stored(guard.core.store, "repeat_hooks:conv-1/default/tracker")  # type: ignore[arg-type]
    top_state = stored(guard.core.store, "repeat_hooks:conv-1/default/Strands Agents")  # type: ignore[arg-type]
    assert sub_state is not None and sorted(sub_state.turn.counts.values()) == [5]
    assert top_state is not None and sorted(top_state.turn.counts.values()) == [1]


def test_the_names_moved_out_of_the_front_door_warn_and_work(carrier: Carrier) -> None:
    import repeat_hooks_strands

    agent = looping_agent(carrier)
    for name in ("tool_call", "model_view", "succeeded"):
        with pytest.deprecated_call(match=f"use repeat_hooks_strands.calls.{name}"):
            assert callable(getattr(repeat_hooks_strands, name))
    with pytest.deprecated_call(match=r"use repeat_hooks\.kit\.hints"):
        assert repeat_hooks_strands.hints(carrier.tool) == {}
    with pytest.deprecated_call(match=r"use agent\.state\.set"):
        repeat_hooks_strands.write_state(agent, GuardState())
    assert read_state(agent) == GuardState()
    with pytest.raises(AttributeError):
        repeat_hooks_strands.nothing  # noqa: B018
