"""What a user of the Claude Agent SDK sees: the text the model reads for a refusal, a stop that ends the turn
with its message in the caller's result, the next turn counting afresh, a model's own answer left alone."""

from __future__ import annotations

from pathlib import Path

from cas_parcels import REFUSAL, SEED_004, STOPPED, TRACK, TRACKED, allowed, call, carrier, converse, scripted
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, read_state, stop_of
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, tool_results

from repeat_hooks import StopReason, TokenPrices


async def test_seed_004_the_model_reads_each_refusal_and_the_caller_gets_the_stop(tmp_path: Path) -> None:
    parcels = carrier()
    model = scripted({"Keep checking FR-7731": [call("track_parcel")] * 20, "Once more": [call("track_parcel")]})
    guard = RepeatGuardHooks(**SEED_004)
    with FakeMessagesAPI(model) as api:
        first, second = await converse(
            guard,
            api,
            tmp_path,
            ["Keep checking FR-7731", "Once more"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed("track_parcel"),
        )
    requests = api.model_requests()

    # Turn 1: two runs; the 3rd, 4th and 5th calls are refused, and the model reads the refusal as the call's
    # error result; the 3rd refusal ends the turn: no 6th model call.
    assert parcels.count("track_parcel") == 3
    assert [tool_results(request) for request in requests[1:5]] == [[TRACKED], [TRACKED], [REFUSAL], [REFUSAL]]
    refused = requests[3]["messages"][-1]["content"][0]
    assert refused["is_error"] is True
    assert refused["content"].startswith(f"PreToolUse:{TRACK} hook error: {REFUSAL}")
    assert first.seen == [TRACKED, TRACKED, REFUSAL, REFUSAL, REFUSAL]

    # The caller's result says the turn was stopped by a hook, and carries the stop message as its text.
    result = first.result
    assert (result.subtype, result.is_error, result.terminal_reason) == ("success", False, "hook_stopped")
    assert result.result == STOPPED
    stop = await stop_of(result, guard=guard)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS and stop.message == STOPPED

    # Turn 2 (the same session): the model reads its 3rd refusal in its history; the count starts afresh.
    assert len(requests) == 5 + 2
    history = requests[5]["messages"]
    assert sum(REFUSAL in str(message["content"]) for message in history) == 3
    assert second.seen == [TRACKED] and second.result.result == "done"
    assert await stop_of(second.result, guard=guard) is None
    state = await read_state(second.result, guard=guard)
    assert state is not None and state.turn.number == 2
    turn_ids = [event.turn_id for event in state.events if event.kind == "stop"]
    assert len(turn_ids) == 1 and await guard.stop_of(result.session_id, turn_ids[0]) == stop
    assert await stop_of(result.session_id, guard=guard) is None  # the latest turn, the second, was not stopped


async def test_a_model_that_answers_keeps_its_answer(tmp_path: Path) -> None:
    """The guard checks the stop rules once a response's calls have resolved, before the next model call. A response
    that answers ends the turn as the model wrote it, even past a budget: $0.0003 a response at these prices, so the
    answer takes the turn to $0.0006 of $0.0005, and stands. And the guard never grants a call: a tool outside
    allowed_tools stays denied by Claude Code (dontAsk)."""
    parcels = carrier()
    model = scripted(
        {"Where is FR-7731?": [call("track_parcel")], "Order one": [call("place_order")]}, then="It is in Lyon."
    )
    guard = RepeatGuardHooks(max_cost_usd=0.0005, cost=TokenPrices(3, 15))
    with FakeMessagesAPI(model, input_tokens=50, output_tokens=10) as api:
        answered, ordered = await converse(
            guard,
            api,
            tmp_path,
            ["Where is FR-7731?", "Order one"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed("track_parcel"),
        )
    assert len(api.model_requests()) == 2 + 2
    assert answered.result.result == "It is in Lyon." and answered.result.terminal_reason == "completed"
    assert await stop_of(answered.result, guard=guard) is None
    assert parcels.count("track_parcel") == 1
    assert parcels.count("place_order") == 0
    assert len(ordered.seen) == 1 and not ordered.seen[0].startswith("Refused")


async def test_a_budget_ends_the_turn_before_the_model_call_it_forbids(tmp_path: Path) -> None:
    """max_model_calls=2: the 2nd response asks for two calls, both run, and once they have resolved the turn ends
    (PostToolBatch's continue: false): no 3rd model call, and the caller gets the stop message once, as the result."""
    parcels = carrier()
    both = [*call("track_parcel"), *call("parcel_history")]
    model = scripted({"Check FR-7731": [call("track_parcel"), both, both]})
    guard = RepeatGuardHooks(max_model_calls=2)
    with FakeMessagesAPI(model) as api:
        (turn,) = await converse(
            guard,
            api,
            tmp_path,
            ["Check FR-7731"],
            mcp_servers={"parcels": parcels.server},
            allowed_tools=allowed("track_parcel", "parcel_history"),
        )
    assert len(api.model_requests()) == 2
    assert (parcels.count("track_parcel"), parcels.count("parcel_history")) == (2, 1)
    stop = await stop_of(turn.result, guard=guard)
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert turn.result.result == stop.message and turn.result.terminal_reason == "hook_stopped"
    assert turn.seen[0] == TRACKED and sorted(turn.seen[1:]) == ["FR-7731: 3 scans", TRACKED]  # no denied call
    assert str(turn.messages).count(stop.message) == 1
    state = await read_state(turn.result, guard=guard)
    assert state is not None and state.turn.model_calls == 2
