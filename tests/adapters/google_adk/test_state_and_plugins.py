"""What the guard writes into the session (small deltas, bounded growth on SQLite), how it fails on a
foreign value there, how user callbacks tell a refusal from a result, how it sits with ADK's
``ReflectAndRetryToolPlugin``, and ``adk web --extra_plugins`` loading it."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
from google.adk.runners import Runner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from repeat_hooks_google_adk import STATE_KEY, RepeatGuardPlugin, refusal_of, stop_of
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call, keep_calling

from repeat_hooks import Policy, RefusalKind, StopReason
from repeat_hooks.messages import STORE_DOWN_STOP

from .conftest import APP, ARGS, USER, Carrier, new_session, run_turn, runner_for


def two_lookups_then_answer(model: ScriptedLlm, request: Any) -> Any:
    """A typical turn: the parcel is looked up twice (a re-check), then the model answers."""
    answered = sum(
        1 for content in request.contents[-3:] for part in content.parts or [] if part.function_response is not None
    )
    if answered >= 2:
        return "FR-7731 is in transit."
    return [function_call("track_parcel", ARGS, model.new_call_id())]


def one_lookup_then_answer(model: ScriptedLlm, request: Any) -> Any:
    """The most common turn: one lookup, then the answer."""
    if any(part.function_response is not None for part in request.contents[-1].parts or []):
        return "FR-7731 is in transit."
    return [function_call("track_parcel", ARGS, model.new_call_id())]


def guard_delta_sizes(events: list[Event]) -> list[int]:
    sizes = []
    for event in events:
        ours = {key: value for key, value in event.actions.state_delta.items() if key.startswith(STATE_KEY)}
        if ours:
            sizes.append(len(json.dumps(ours)))
    return sizes


# -- the state written ------------------------------------------------------------------------------


async def test_each_event_carries_a_small_delta_that_does_not_grow_with_the_session(carrier: Carrier) -> None:
    model = ScriptedLlm(then=two_lookups_then_answer)
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), RepeatGuardPlugin())
    session_id = await new_session(runner)

    sizes: list[list[int]] = []
    for _ in range(10):
        turn = await run_turn(runner, session_id, "Where is FR-7731?")
        sizes.append(guard_delta_sizes(turn.events))

    assert all(sizes)
    assert max(max(turn) for turn in sizes) <= 1024
    # The 10th turn writes what the 2nd did (give or take the digits of its numbers): no history rides along.
    assert len(sizes[-1]) == len(sizes[1])
    assert all(abs(late - early) <= 16 for late, early in zip(sizes[-1], sizes[1], strict=True))


async def _sixty_turns_on_sqlite(directory: str, guarded: bool) -> int:
    from google.adk.sessions import DatabaseSessionService

    path = os.path.join(directory, f"{'guarded' if guarded else 'plain'}.db")
    sessions = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    model = ScriptedLlm(then=one_lookup_then_answer, record_requests=False)
    carrier = Carrier()
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool])
    plugins: list[BasePlugin] = [RepeatGuardPlugin()] if guarded else []
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=plugins), session_service=sessions)
    session_id = await new_session(runner)
    start = os.path.getsize(path)
    for _ in range(60):
        await run_turn(runner, session_id, "Where is FR-7731?")
    assert len(carrier.calls) == 60
    return os.path.getsize(path) - start


async def test_sixty_turns_on_sqlite_grow_the_database_at_most_twice_as_much() -> None:
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as directory:
        plain, guarded = await asyncio.gather(
            _sixty_turns_on_sqlite(directory, False), _sixty_turns_on_sqlite(directory, True)
        )

    assert plain > 0
    assert guarded <= 2 * plain, (plain, guarded)


async def test_a_foreign_value_under_the_state_key_is_logged_saying_how_to_recover(
    carrier: Carrier, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    plugin = RepeatGuardPlugin(fail="closed")
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), plugin)
    session = await runner.session_service.create_session(app_name=APP, user_id=USER, state={STATE_KEY: {"visits": 3}})

    turn = await run_turn(runner, session.id, "Where is FR-7731?")

    # An outage of the state, as a store's would be: fail="closed" ends the turn; the log says the way out.
    assert turn.final_text == STORE_DOWN_STOP
    assert carrier.calls == []
    (record,) = {r.getMessage() for r in caplog.records if "could not reach" in r.getMessage()}
    assert "StateCorrupt" in record and STATE_KEY in record and "state_delta" in record and "None" in record

    # The recovery the message names: write None under the key; the guard starts afresh.
    stored = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    await runner.session_service.append_event(
        stored, Event(author="user", actions=EventActions(state_delta={STATE_KEY: None}))
    )
    turn = await run_turn(runner, session.id, "Where is FR-7731?")
    assert carrier.calls == ["FR-7731"] * 2
    assert turn.final_text.startswith("I stopped")


# -- refusals as user callbacks see them ---------------------------------------------------------------


async def test_a_refusal_is_marked_so_user_callbacks_can_tell_it_from_a_result(carrier: Carrier) -> None:
    seen: list[tuple[str, Any]] = []

    def after_tool(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any) -> None:
        refusal = refusal_of(tool_response)
        seen.append(("refused", refusal.reason) if refusal is not None else ("ran", tool_response))

    model = ScriptedLlm(then=keep_calling("track_parcel", ARGS))
    agent = LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool], after_tool_callback=after_tool)
    runner = runner_for(agent, RepeatGuardPlugin())

    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")

    assert seen[:2] == [("ran", {"status": "FR-7731: in transit, hub Lyon"})] * 2
    assert seen[2:] == [("refused", RefusalKind.REPEAT)] * 3
    # What the model reads is unchanged: the refusal text, nothing else.
    assert set(turn.tool_responses[2]) == {"error"}


# -- ADK's ReflectAndRetryToolPlugin --------------------------------------------------------------------


@pytest.mark.parametrize("retry_first", [True, False], ids=["retry_plugin_first", "guard_first"])
async def test_reflect_and_retry_answers_are_failures_whichever_plugin_runs_first(retry_first: bool) -> None:
    attempts: list[str] = []

    def track_parcel(tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        attempts.append(tracking_number)
        raise TimeoutError(f"carrier timeout ({len(attempts)})")

    numbers = iter(range(100))
    model = ScriptedLlm(then=keep_calling("track_parcel", lambda request: {"tracking_number": f"FR-{next(numbers)}"}))
    guard = RepeatGuardPlugin(Policy(max_errors_in_a_row=3))
    retry = ReflectAndRetryToolPlugin(max_retries=10)
    plugins = [retry, guard] if retry_first else [guard, retry]
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[track_parcel]), *plugins)
    session_id = await new_session(runner)

    turn = await run_turn(runner, session_id, "Where are my parcels?")

    assert len(attempts) == 3
    assert turn.final_text.startswith("I stopped")
    session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    stop = stop_of(turn.final)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS


# -- adk web / adk api_server: --extra_plugins -------------------------------------------------------------


async def test_adk_web_extra_plugins_builds_the_guard_with_the_default_policy(carrier: Carrier) -> None:
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.auth.credential_service.in_memory_credential_service import InMemoryCredentialService
    from google.adk.cli.api_server import ApiServer
    from google.adk.cli.utils.base_agent_loader import BaseAgentLoader
    from google.adk.memory import InMemoryMemoryService
    from google.adk.sessions import InMemorySessionService

    agent = LlmAgent(
        name="parcel_tracker", model=ScriptedLlm(then=keep_calling("track_parcel", ARGS)), tools=[carrier.tool]
    )

    class Loader(BaseAgentLoader):
        def load_agent(self, agent_name: str) -> Any:
            return agent

        def list_agents(self) -> list[str]:
            return [APP]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ADK marks its in-memory credential service experimental
        credentials = InMemoryCredentialService()
    with tempfile.TemporaryDirectory() as agents_dir:
        Path(agents_dir, APP).mkdir()
        server = ApiServer(
            agent_loader=Loader(),
            session_service=InMemorySessionService(),
            memory_service=InMemoryMemoryService(),
            artifact_service=InMemoryArtifactService(),
            credential_service=credentials,
            eval_sets_manager=None,
            eval_set_results_manager=None,
            agents_dir=agents_dir,
            extra_plugins=["repeat_hooks_google_adk.RepeatGuardPlugin"],
        )
        runner = await server.get_runner_async(APP)

    guards = [plugin for plugin in runner.plugin_manager.plugins if isinstance(plugin, RepeatGuardPlugin)]
    assert len(guards) == 1 and guards[0].policy == Policy()
    turn = await run_turn(runner, await new_session(runner), "Where is FR-7731?")
    assert carrier.calls == ["FR-7731"] * 2  # guarded: the default refuses the 3rd same call
    assert turn.final_text.startswith("I stopped")
