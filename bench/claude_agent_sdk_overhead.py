"""What the guard adds to a tool call on the Claude Agent SDK, side by side with an empty hook.

One turn: the scripted model (a fake Messages API on 127.0.0.1, in this process) asks for 20 tool calls, one per
response (all different, so none is refused), then answers: 21 model calls, 20 runs of an in-process MCP tool,
on the real Claude Code CLI that the SDK bundles. The same turn runs two ways, interleaved (alternating which
goes first), ``ROUNDS`` rounds:

- **empty hook**: the SDK's own ``query()`` and transport, with a hook that returns ``{}`` on the same events the
  guard uses (``UserPromptSubmit``, ``PreToolUse``, ``PostToolUse``, ``PostToolUseFailure``): what any hook costs;
- **guard**: ``RepeatGuardHooks()`` (``Policy()``, a ``MemoryStore``) through ``guard.query()``, its hooks and its
  transport.

Per tool call, it prints the wall time and this process's CPU time (the SDK's parsing, the hooks, the MCP tool,
the fake model: the CLI itself is another process) of each, medians over the rounds, and the guard's own work:
the CPU time inside its hooks and its transport's reading of the CLI's lines, timed from inside. The wall time
is the CLI's (about 100 ms a tool call on a 2-core machine, and noisy): the guard's share of it is its own
work, a fraction of a millisecond; the CPU difference between the two is that work plus the machine's noise.

    .venv/bin/python bench/claude_agent_sdk_overhead.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import functools
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    ResultMessage,
    create_sdk_mcp_server,
    query,
    tool,
)
from interleave import ainterleave
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks
from repeat_hooks_claude_agent_sdk.stream import GuardedTransport
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, Reply, offline_options, steps, tool_use

CALLS_PER_TURN = 20
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
PROMPT = "Track my 20 parcels"
TOOL = "mcp__parcels__track_parcel"
ANSWER = "All parcels are in transit."


@tool("track_parcel", "The carrier's latest scan of a parcel.", {"tracking_number": str})
async def track_parcel(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"{arguments['tracking_number']}: in transit"}]}


def twenty_parcels(request: dict[str, Any]) -> Reply:
    step = steps(request, PROMPT)
    return [tool_use(TOOL, {"tracking_number": f"FR-{step}"})] if step < CALLS_PER_TURN else ANSWER


async def empty(event: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
    return {}


EMPTY_HOOKS: dict[Any, list[HookMatcher]] = {
    event: [HookMatcher(hooks=[empty])]
    for event in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure")
}


class TimedGuard(RepeatGuardHooks):
    """The guard, adding up the CPU time spent in its hooks."""

    spent = 0.0

    async def on_user_prompt_submit(self, event: Any) -> Any:
        return await _timed(super().on_user_prompt_submit(event))

    async def on_pre_tool_use(self, event: Any) -> Any:
        return await _timed(super().on_pre_tool_use(event))

    async def on_post_tool_use(self, event: Any) -> Any:
        return await _timed(super().on_post_tool_use(event))


async def _timed(work: Awaitable[Any]) -> Any:
    started = time.process_time()
    try:
        return await work
    finally:
        TimedGuard.spent += time.process_time() - started


_note = GuardedTransport._note


def _timed_note(self: GuardedTransport, message: dict[str, Any]) -> dict[str, Any] | None:
    started = time.process_time()
    try:
        return _note(self, message)
    finally:
        TimedGuard.spent += time.process_time() - started


GuardedTransport._note = _timed_note  # type: ignore[method-assign]


async def turn(messages: AsyncIterator[Any]) -> None:
    result = None
    async for message in messages:
        if isinstance(message, ResultMessage):
            result = message
    assert result is not None and result.result == ANSWER, result


def sides(options: ClaudeAgentOptions) -> dict[str, Callable[[], Awaitable[None]]]:
    guard = TimedGuard()
    plain = ClaudeAgentOptions(**{**vars(options), "hooks": EMPTY_HOOKS})
    return {
        "empty hook": lambda: turn(query(prompt=PROMPT, options=plain)),
        "guard": lambda: turn(guard.query(prompt=PROMPT, options=options)),
    }


async def measure(run: Callable[[], Awaitable[None]]) -> tuple[float, float, float]:
    """Wall seconds, this process's CPU seconds, and the guard's own CPU seconds of one turn."""
    TimedGuard.spent = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    await run()
    return time.perf_counter() - wall, time.process_time() - cpu, TimedGuard.spent


async def main() -> None:
    logging.disable(logging.WARNING)
    with FakeMessagesAPI(twenty_parcels) as api, tempfile.TemporaryDirectory() as home:
        options = offline_options(
            api,
            home,
            mcp_servers={"parcels": create_sdk_mcp_server("parcels", tools=[track_parcel])},
            allowed_tools=[TOOL],
        )
        samples = {name: functools.partial(measure, run) for name, run in sides(options).items()}
        # Warmed up once each (the CLI's first start reads its 400 MB binary), then alternating which goes first.
        figures = await ainterleave(samples, ROUNDS)
    print(
        f"Claude Agent SDK {CALLS_PER_TURN} tool calls a turn (one per response), {ROUNDS} interleaved rounds; "
        "per tool call, medians:"
    )
    print(f"{'':12} {'wall ms':>9} {'process CPU ms':>15} {'guard own CPU ms':>17}")
    for name, rows in figures.items():
        wall, cpu, own = (statistics.median(row[i] for row in rows) / CALLS_PER_TURN * 1000 for i in range(3))
        print(f"{name:12} {wall:9.2f} {cpu:15.2f} {own if name == 'guard' else 0.0:17.3f}")
    base = statistics.median(row[0] for row in figures["empty hook"])
    own = statistics.median(row[2] for row in figures["guard"])
    print(f"the guard's own work is {own / base * 100:.2f}% of an empty-hook turn's wall time")


if __name__ == "__main__":
    asyncio.run(main())
