"""``Runner.run_live`` offline (``ScriptedLlm.connect``): one turn per user message of the live session."""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig
from google.adk.events.event import Event
from google.genai import types
from repeat_hooks_google_adk import RepeatGuardPlugin
from repeat_hooks_google_adk.testing import ScriptedLlm, function_call

from repeat_hooks import Policy

from .conftest import ARGS, Carrier, new_session, runner_for

ANSWER = "FR-7731 is in transit."


def lookups_then_answer(lookups: int) -> Any:
    def script(model: ScriptedLlm, request: Any) -> Any:
        since_user = 0
        for content in reversed(request.contents):
            if content.role == "user" and any(part.text for part in content.parts or []):
                break
            since_user += sum(1 for part in content.parts or [] if part.function_response is not None)
        if since_user >= lookups:
            return ANSWER
        return [function_call("track_parcel", ARGS, model.new_call_id())]

    return script


async def live_session(runner: Any, session_id: str, messages: int) -> list[Event]:
    """Send ``messages`` user messages, each after the answer to the previous one; the events seen."""
    queue = LiveRequestQueue()
    events: list[Event] = []

    def ask() -> None:
        queue.send_content(types.Content(role="user", parts=[types.Part(text="Where is FR-7731 now?")]))

    async def consume() -> None:
        asked = 1
        ask()
        async for event in runner.run_live(
            user_id="u1",
            session_id=session_id,
            live_request_queue=queue,
            run_config=RunConfig(response_modalities=["TEXT"]),
        ):
            events.append(event)
            text = "".join(part.text or "" for part in (event.content.parts if event.content else None) or [])
            if text == ANSWER or text.startswith("I stopped"):
                if asked == messages:
                    queue.close()
                    return
                asked += 1
                ask()

    await asyncio.wait_for(consume(), 20)
    return events


def refusals(events: list[Event]) -> int:
    return sum(1 for event in events for reply in event.get_function_responses() if "Refused" in str(reply.response))


async def test_each_user_message_of_a_live_session_is_a_turn(carrier: Carrier) -> None:
    model = ScriptedLlm(then=lookups_then_answer(1))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), RepeatGuardPlugin(Policy()))

    events = await live_session(runner, await new_session(runner), messages=4)

    # Four questions about the same parcel, one lookup each: none is refused.
    assert carrier.calls == ["FR-7731"] * 4
    assert refusals(events) == 0


async def test_within_one_live_message_a_repeat_is_refused(carrier: Carrier) -> None:
    model = ScriptedLlm(then=lookups_then_answer(3))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), RepeatGuardPlugin(Policy()))

    events = await live_session(runner, await new_session(runner), messages=2)

    # Each message: 2 lookups run, the 3rd is refused; the next message counts afresh.
    assert carrier.calls == ["FR-7731"] * 4
    assert refusals(events) == 2


async def test_a_stopped_live_turn_refuses_every_further_call_and_the_next_message_starts_afresh(
    carrier: Carrier,
) -> None:
    def script(model: ScriptedLlm, request: Any) -> Any:
        last = request.contents[-1]
        if any(
            "this turn has ended" in str(part.function_response.response)
            for part in last.parts or []
            if part.function_response
        ):
            return ANSWER  # told the turn has ended, the model answers
        if any(part.text for part in last.parts or []) or any(part.function_response for part in last.parts or []):
            return [function_call("track_parcel", ARGS, model.new_call_id())]
        return ANSWER

    model = ScriptedLlm(then=script)
    plugin = RepeatGuardPlugin(Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3))
    runner = runner_for(LlmAgent(name="parcel_tracker", model=model, tools=[carrier.tool]), plugin)

    events = await live_session(runner, await new_session(runner), messages=2)

    # Each message: 2 lookups, 3 refused (refusals in 3 responses), then the turn-ended refusal and the answer.
    assert carrier.calls == ["FR-7731"] * 4
    ended = [
        reply.response
        for event in events
        for reply in event.get_function_responses()
        if "this turn has ended (ignored_refusals)" in str(reply.response)
    ]
    assert len(ended) == 2
