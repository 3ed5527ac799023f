"""The Mistral adapter's README blocks run as written (its quick start; its section of the root README; the
deploy example's guard), with the scripted model in place of Mistral's (``model=`` + ``completion=``: the
SDK's provider seam) and a real Redis where a block names one."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import Any

import pytest
from readme_blocks import ROOT, Blocks
from repeat_hooks_mistral import Policy, RepeatGuardHook, StopReason
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, calls_this_turn, tool_messages
from services import RedisServer, redis_server

from repeat_hooks import Refusal, ToolCall

from .conftest import CARRIER, track_parcel

__all__ = ["redis_server"]  # a fixture

BLOCKS = Blocks.owned_by(__file__)
ARGS = {"tracking_number": "FR-7731"}
LIVE_MODEL = 'model="mistral-medium-latest",'
SCRIPTED = {LIVE_MODEL: "model=SCRIPTED.name, completion=SCRIPTED.completion(),"}
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
ROOT_SECTION = "Mistral Agents SDK (`repeat-hooks-mistral`)"
DEPLOY = "What makes the guard deployable (`parcel_worker/parcel_app.py`)"
RETRY = "A retried request: naming the conversation and the turn"


@BLOCKS.cover("repeat-hooks-mistral")
def test_the_quick_start_runs_and_the_caller_reads_the_stop(capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel.keep_calling("track_parcel", ARGS)

    namespace = BLOCKS.run("repeat-hooks-mistral", given={"SCRIPTED": model}, replace=SCRIPTED)
    asyncio.run(namespace["main"]())

    guard = namespace["ParcelGuard"]
    assert capsys.readouterr().out == STOPPED + "\n", "the first turn's text is the guard's stop message"
    assert guard.policy.max_calls == 2 and len(model.requests) == 10, "two turns of 5 model calls each"


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model() -> None:
    model = ScriptedModel.keep_calling("track_parcel", ARGS)
    CARRIER.calls.clear()

    namespace = BLOCKS.run(ROOT_SECTION, given={"SCRIPTED": model, "track_parcel": track_parcel}, replace=SCRIPTED)

    assert CARRIER.calls == ["FR-7731"] * 2
    stop = namespace["stop"]  # read back by session id, after the session closed
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert namespace["result"].text == stop.message == STOPPED


@BLOCKS.cover("repeat-hooks-mistral", RETRY)
def test_a_retried_request_continues_its_turn_in_a_new_session() -> None:
    """The README's ``handle``: the same conversation and request id, served twice in two sessions (as by two
    workers): the retry's calls count on, so its first call is the turn's 3rd, refused."""
    model = ScriptedModel.replies(ToolUse("track_parcel", ARGS), ToolUse("track_parcel", ARGS), "In transit.")
    namespace = BLOCKS.run("repeat-hooks-mistral", given={"SCRIPTED": model}, replace=SCRIPTED)
    namespace = BLOCKS.run(RETRY, namespace=namespace)

    async def twice() -> tuple[str, list[str], str, list[str]]:
        first = await namespace["handle"]("chat-42", "request-7", "Where is FR-7731?")
        seen = tool_messages(model.requests[-1])
        model.script = lambda request: "Done." if calls_this_turn(request) else ToolUse("track_parcel", ARGS)
        again = await namespace["handle"]("chat-42", "request-7", "Where is FR-7731?")
        return first, seen, again, tool_messages(model.requests[-1])

    first, seen, again, seen_again = asyncio.run(twice())
    assert first == "In transit." and len(seen) == 2 and not any(text.startswith("Refused") for text in seen)
    assert again == "Done."
    assert [text[:44] for text in seen_again] == ["Refused: you already called track_parcel 2 t"], "the turn's 3rd"


@BLOCKS.cover(DEPLOY)
def test_the_deploy_examples_guard_is_the_one_its_workers_run(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location(
        "readme_parcel_app", ROOT / "examples" / "deploy" / "parcel_worker" / "parcel_app.py"
    )
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, app)
    monkeypatch.setenv("REPEAT_HOOKS_REDIS_URL", redis_server.url)
    spec.loader.exec_module(app)
    given: dict[str, Any] = {"RepeatGuardHook": RepeatGuardHook, "Policy": Policy, "redis_store": app.redis_store}

    guard = BLOCKS.run(DEPLOY, given=given)["ParcelGuard"]

    assert guard.policy == app.ParcelGuard.policy and guard.store.prefix == app.ParcelGuard.store.prefix
    call = ToolCall("track_parcel", ARGS)

    async def decide_three_times() -> list[Any]:
        change = lambda state: guard.policy.decide_tool_call(state, call, turn_id="t1")  # noqa: E731
        decisions = [await guard.store.update("s1", change) for _ in range(3)]
        await guard.store.aclose()
        return decisions

    decisions = asyncio.run(decide_three_times())  # the counts live in the real Redis
    assert decisions[:2] == [None, None] and isinstance(decisions[2], Refusal)


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
