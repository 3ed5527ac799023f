"""Parallel calls: the guard's chat middleware sees every ``function_call`` of one response before any runs, and
decides them as one batch; the loop then runs them concurrently (``asyncio.gather``, ``_tools.py:2667``) or, with
``allow_concurrent_invocation=False``, one after another: the same decisions either way."""

from __future__ import annotations

import asyncio

import pytest
from agent_framework import Agent, tool
from repeat_hooks_agent_framework import RepeatGuardMiddleware
from repeat_hooks_agent_framework.testing import ScriptedClient, function_call, tool_results

FR = {"tracking_number": "FR-7731"}


@pytest.mark.parametrize("concurrent", [True, False], ids=["concurrent", "sequential"])
async def test_one_responses_calls_are_decided_before_any_runs(concurrent: bool) -> None:
    started: list[str] = []
    running = 0
    overlap = 0

    @tool
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        nonlocal running, overlap
        started.append(tracking_number)
        running += 1
        overlap = max(overlap, running)
        await asyncio.sleep(0.01)
        running -= 1
        return f"{tracking_number}: in transit"

    batch = [function_call("track_parcel", FR), function_call("track_parcel", {"tracking_number": "FR-1"})] + [
        function_call("track_parcel", FR)
    ] * 3
    client = ScriptedClient(batch, "Done.")
    client.function_invocation_configuration["allow_concurrent_invocation"] = concurrent
    agent = Agent(client=client, tools=[track_parcel], middleware=[RepeatGuardMiddleware()])

    response = await agent.run("Check my parcels")

    assert sorted(started) == ["FR-1", "FR-7731", "FR-7731"]  # the 3rd and 4th FR-7731 were refused
    assert [text.startswith("Refused") for text in tool_results(response)] == [False, False, False, True, True]
    assert overlap == (3 if concurrent else 1)
