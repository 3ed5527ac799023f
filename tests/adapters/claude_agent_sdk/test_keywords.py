"""The common keywords on the real Claude Code CLI: ``store=`` (a ``MemoryStore``, a ``SQLiteStore``) shared by two
guards and a retried request named with ``repeat_hooks.kit.request``; ``on_stop="raise"``; ``is_failure``; and what
a misspelt or misplaced keyword, or a 0.2 spelling, says."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from cas_parcels import REFUSAL, SEED_004, allowed, call, carrier, keep_calling, scripted
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKError,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    ToolAnnotations,
)
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, RepeatGuardStopped, read_state, stop_of
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, offline_options

from repeat_hooks import GuardSetupError, MemoryStore, Policy, StateStore, StopReason, kit
from repeat_hooks.stores.sqlite import SQLiteStore


async def turn_of(guard: RepeatGuardHooks, prompt: str, options: ClaudeAgentOptions) -> tuple[ResultMessage, list[Any]]:
    messages = [message async for message in guard.query(prompt=prompt, options=options)]
    return next(message for message in messages if isinstance(message, ResultMessage)), messages


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_two_guards_on_one_store_share_a_session_and_a_retried_request_keeps_its_turn(
    tmp_path: Path, kind: str
) -> None:
    """Guard A serves request ``order-1`` (two track calls run); the request is retried on guard B, another guard on
    the same store (another worker), resuming the session: the same turn, so its track calls are refused (3rd of 2)."""
    store: StateStore = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "states.db")
    parcels = carrier()
    model = scripted({"Track FR-7731": [call("track_parcel"), call("track_parcel")]})
    first, second = RepeatGuardHooks(store=store, **SEED_004), RepeatGuardHooks(store=store, **SEED_004)
    with FakeMessagesAPI(model) as api:
        base = {"mcp_servers": {"parcels": parcels.server}, "allowed_tools": allowed("track_parcel")}
        with kit.request(turn_id="order-1"):
            done, _ = await turn_of(first, "Track FR-7731", offline_options(api, tmp_path, **base))
        assert parcels.count("track_parcel") == 2 and done.result == "done"
        with kit.request(turn_id="order-1"):
            options = offline_options(api, tmp_path, resume=done.session_id, **base)
            retried, messages = await turn_of(second, "Track FR-7731", options)
    assert parcels.count("track_parcel") == 2  # the retry's calls are the turn's 3rd and 4th: refused
    assert str(messages).count(REFUSAL) >= 2 and retried.result == "done"
    state = await store.load(done.session_id)  # the counts live in the store, under the session id
    assert state is not None and state.turn.id == "order-1" and state.turn.number == 1
    assert state.turn.refusals == 2
    assert await read_state(retried, guard=first) == state


async def test_on_stop_raise_raises_out_of_the_query_at_the_turns_result(tmp_path: Path) -> None:
    parcels = carrier()
    guard = RepeatGuardHooks(on_stop="raise", **SEED_004)
    seen: list[Any] = []
    with FakeMessagesAPI(keep_calling()) as api:
        options = offline_options(api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed())
        with pytest.raises(RepeatGuardStopped) as raised:
            async for message in guard.query(prompt="Keep checking FR-7731", options=options):
                seen.append(message)
    assert isinstance(raised.value, ClaudeSDKError) and raised.value.stop.reason is StopReason.IGNORED_REFUSALS
    assert parcels.count("track_parcel") == 2 and not any(isinstance(message, ResultMessage) for message in seen)
    session = next(message.data["session_id"] for message in seen if isinstance(message, SystemMessage))
    assert await stop_of(session, guard=guard) == raised.value.stop == await stop_of(raised.value)


async def test_is_failure_reads_what_the_model_reads(tmp_path: Path) -> None:
    """The carrier answers a timeout as text, which the SDK calls a success: ``is_failure`` counts it as a failure,
    so two in a row stop the turn (once the 2nd response's call has resolved: no 3rd model call)."""
    parcels = carrier(results={"track_parcel": "carrier timeout"})
    model = scripted({"Where is FR-7731?": [call("track_parcel", {"tracking_number": f"FR-{n}"}) for n in range(5)]})
    guard = RepeatGuardHooks(max_errors_in_a_row=2, is_failure=lambda view: "timeout" in str(view))
    with FakeMessagesAPI(model) as api:
        options = offline_options(api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed())
        result, _ = await turn_of(guard, "Where is FR-7731?", options)
    stop = await stop_of(result, guard=guard)
    assert stop is not None and stop.reason is StopReason.TOO_MANY_ERRORS and result.result == stop.message
    assert parcels.count("track_parcel") == 2 and len(api.model_requests()) == 2


def test_a_misspelt_or_misplaced_keyword_says_the_right_spelling() -> None:
    with pytest.raises(TypeError, match="max_calls"):
        RepeatGuardHooks(max_call=3)
    with pytest.raises(TypeError, match=r"on_stop=\.\.\.\) is 'reply' or 'raise'"):
        RepeatGuardHooks(on_stop="output")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"fail=\.\.\.\) is 'open' or 'closed'"):
        RepeatGuardHooks(fail="closd")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a repeat_hooks StateStore"):
        RepeatGuardHooks(store="redis://localhost:6379")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="is_failure"):
        RepeatGuardHooks(is_failure="timeout")  # type: ignore[arg-type]
    with pytest.raises(GuardSetupError, match="cannot time model calls"):
        RepeatGuardHooks(clock=time.time)


def test_two_guards_on_one_options_object_are_refused() -> None:
    first, second = RepeatGuardHooks(), RepeatGuardHooks()
    guarded = first.options(ClaudeAgentOptions())
    assert first.options(guarded).hooks == guarded.hooks  # the same guard again: its hooks once
    assert guarded.hooks is not None and len(guarded.hooks["PreToolUse"]) == 1
    with pytest.raises(GuardSetupError, match="another RepeatGuardHooks' hooks"):
        second.options(guarded)
    with pytest.raises(GuardSetupError, match="one guard per options object"):
        second.client(guarded)
    assert len(second.hooks({"Stop": [HookMatcher(hooks=[])]})) == 6  # yours are kept


async def test_the_0_2_spellings_warn_and_still_work() -> None:
    with pytest.deprecated_call(match=r'fail="closed"'):
        guard = RepeatGuardHooks(fail_closed=True, max_model_calls=1)
    assert guard.core.fail == "closed"
    policy: Policy = guard.policy

    def stopped(state: Any) -> Any:
        policy.start_turn(state, turn_id="t1")
        policy.record_model_call(state, turn_id="t1")
        return policy.decide_model_call(state, turn_id="t1")

    stop = await guard.store.update("s1", stopped)
    message = ResultMessage("success", 0, 0, False, 1, "s1")
    with pytest.deprecated_call(match=r"stop_of\(message, guard=guard\)"):
        assert await stop_of(guard, message) == stop  # type: ignore[arg-type]
    with pytest.deprecated_call(match=r"stop_of\(message, guard=guard\)"):
        assert await stop_of(guard, "s1", "t1") == stop  # type: ignore[arg-type]
    with pytest.deprecated_call(match=r"read_state\(message, guard=guard\)"):
        assert await read_state(guard, message) == await read_state(message, guard=guard)  # type: ignore[arg-type]
    assert await stop_of(message, guard=guard) == await guard.stop_of("s1", "t1") == stop
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    with pytest.deprecated_call(match=r"stop_of\(message, guard=guard\)"):  # 0.2's keywords
        assert await stop_of(guard=guard, session=message) == stop  # type: ignore[arg-type]
    with pytest.deprecated_call(match=r"stop_of\(message, guard=guard\)"):
        assert await stop_of(guard, session="s1", turn_id="t1") == stop  # type: ignore[arg-type]
    assert await stop_of(RepeatGuardStopped(stop)) == stop  # what on_stop="raise" raised: no guard needed
    with pytest.raises(TypeError, match=r"stop_of\(message, guard=guard\) needs the guard"):
        await stop_of(message)
    with pytest.raises(GuardSetupError, match=r"stop_of takes a ResultMessage of the query or a session id .*got None"):
        await stop_of(None, guard=guard)
    for name, home in [("session_key", "state"), ("GuardedTransport", "stream"), ("NO_TRANSPORT", "guard")]:
        with pytest.deprecated_call(match=rf"use repeat_hooks_claude_agent_sdk\.{home}\.{name}"):
            exec(f"from repeat_hooks_claude_agent_sdk import {name}")
    import repeat_hooks_claude_agent_sdk as package

    with pytest.raises(AttributeError, match=r"Hints is gone: hints travel on ToolCall .*repeat_hooks\.kit\.hints"):
        package.Hints  # noqa: B018


@pytest.mark.parametrize(("closed", "fail"), [(True, "closed"), (False, "open")])
def test_0_2_fail_closed_warns_naming_the_fail_it_means(closed: bool, fail: str) -> None:
    with pytest.deprecated_call(match=rf'RepeatGuardHooks\(fail_closed=\.\.\.\) is deprecated: use fail="{fail}"'):
        guard = RepeatGuardHooks(fail_closed=closed)
    assert guard.core.fail == fail


def test_fail_closed_and_a_fail_saying_otherwise_are_refused() -> None:
    with pytest.raises(GuardSetupError, match=r"got fail_closed=True and fail='open': give only fail='open' or"):
        RepeatGuardHooks(fail_closed=True, fail="open")
    with pytest.raises(GuardSetupError, match=r"got fail_closed=False and fail='closed'"):
        RepeatGuardHooks(fail_closed=False, fail="closed")
    with pytest.raises(GuardSetupError, match=r"got fail_closed='yes': give only fail="):
        RepeatGuardHooks(fail_closed="yes")


async def test_a_write_your_human_rejected_is_not_taken_for_one_that_ran(tmp_path: Path) -> None:
    """Claude Code asks ``can_use_tool`` about a call the guard let through; the human rejects the order (it never
    runs, and no PostToolUse comes), then approves it when the model asks again: the guard records the first as
    rejected (``Policy.record_rejection``), not as a write that may have run, so the second is not refused."""
    parcels = carrier(annotations={"place_order": ToolAnnotations(destructiveHint=True, idempotentHint=False)})
    order = call("place_order", {"tracking_number": "box"})
    asked: list[str] = []

    async def human(name: str, arguments: dict[str, Any], context: Any) -> Any:
        asked.append(name)
        return PermissionResultDeny(message="not yet") if len(asked) == 1 else PermissionResultAllow()

    with FakeMessagesAPI(scripted({"Order a box": [order, order]})) as api:
        options = offline_options(
            api, tmp_path, mcp_servers={"parcels": parcels.server}, permission_mode="default", can_use_tool=human
        )
        result, _ = await turn_of(RepeatGuardHooks(), "Order a box", options)
    assert len(asked) == 2 and parcels.count("place_order") == 1 and result.result == "done"
