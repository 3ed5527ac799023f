"""One response's calls are decided as one batch in ``take_step``, before any runs (LlamaIndex then runs them as
concurrent ``call_tool`` steps, num_workers=4): the third identical call of a response is refused though none of
them ran yet, and a slow call cannot let its neighbours' results decide it."""

from __future__ import annotations

import asyncio

from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ToolCall, ToolCallResult
from llama_index.core.tools import FunctionTool
from repeat_hooks_llama_index import RepeatGuard
from repeat_hooks_llama_index.testing import Script, call, tool_results

from .conftest import ARGS


async def test_a_response_asking_a_a_b_a_refuses_the_third_a_before_anything_runs() -> None:
    ran: list[str] = []
    running = {"now": 0, "most": 0}

    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.05)
        running["now"] -= 1
        ran.append("track")
        return "in transit"

    async def parcel_history(tracking_number: str) -> str:
        """Past scans."""
        ran.append("history")
        return "3 scans"

    tools = [FunctionTool.from_defaults(async_fn=f) for f in (track_parcel, parcel_history)]
    track, history = call("track_parcel", ARGS), call("parcel_history", ARGS)
    script = Script([track, track, history, track], "Done.")
    agent = RepeatGuard().agent(FunctionAgent(llm=script.llm(), tools=tools, streaming=False))

    handler = agent.run(user_msg="Check everything on FR-7731")
    events = [event async for event in handler.stream_events()]
    await handler

    assert sorted(ran) == ["history", "track", "track"] and running["most"] == 2  # the two ran at once
    outputs = [event for event in events if isinstance(event, AgentOutput)]
    assert [len(output.tool_calls) for output in outputs][:1] == [4]  # the whole response, before any ToolCall
    first_call = next(i for i, event in enumerate(events) if isinstance(event, ToolCall))
    assert events.index(outputs[0]) < first_call
    results = {event.tool_id: event.tool_output.content for event in events if isinstance(event, ToolCallResult)}
    assert sum(text.startswith("Refused") for text in results.values()) == 1
    seen = await tool_results(handler.ctx)
    assert len(seen) == 4 and sum(text.startswith("Refused") for text in seen) == 1 and script.calls == 2
