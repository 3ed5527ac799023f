"""What ``RepeatGuardHooks`` adds per tool call inside Strands' agent loop, side by side with an empty hook provider.

One run: a scripted model (``repeat_hooks_strands.testing.ScriptedModel``, at Strands' model seam) asks for
20 tool calls, one per response (all different, so none is refused), then answers: 21 model calls, 20 tool
runs, on the real ``Agent`` loop with its default (concurrent) tool executor. The same run goes on the agent
with no hooks, with an empty hook provider (``Empty``: a callback that does nothing on each of the 8 events
the guard uses: what Strands charges for having such hooks at all), and with ``RepeatGuardHooks()`` (the
default ``Policy()``). They are interleaved (rotating which goes first), many rounds; each figure is the
median over the rounds of one side's CPU time per tool call (``time.process_time``: with a scripted model
the loop is CPU-bound, and other processes on a loaded machine do not count). The guard's own cost is
guarded minus empty.

    .venv/bin/python bench/strands_overhead.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from interleave import cpu_seconds, loop_overhead
from repeat_hooks_strands import RepeatGuardHooks, stop_of
from repeat_hooks_strands.testing import Reply, ScriptedModel, tool_use
from strands import Agent, tool
from strands.hooks import (
    AfterModelCallEvent,
    AfterToolCallEvent,
    AfterToolsEvent,
    AgentInitializedEvent,
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    BeforeToolsEvent,
    HookProvider,
    HookRegistry,
)
from strands.types.content import Messages

CALLS_PER_RUN = 20
RUNS_PER_SAMPLE = 3
EVENTS = (
    AgentInitializedEvent,
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    AfterModelCallEvent,
    BeforeToolsEvent,
    BeforeToolCallEvent,
    AfterToolCallEvent,
    AfterToolsEvent,
)


@tool
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


class Empty(HookProvider):
    """A hook provider whose callbacks do nothing, on the events the guard registers."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        for event in EVENTS:
            registry.add_callback(event, self.nothing)

    def nothing(self, event: Any) -> None:
        """Does nothing."""


def twenty_parcels(model: ScriptedModel, messages: Messages) -> Reply:
    step = sum(1 for message in messages if message["role"] == "assistant")
    if step >= CALLS_PER_RUN:
        return "All parcels are in transit."
    return [tool_use("track_parcel", {"tracking_number": f"FR-{step}"})]


def make(kind: str) -> Agent:
    hooks: dict[str, list[Any]] = {"no hooks": [], "empty hooks": [Empty()], "guarded": [RepeatGuardHooks()]}
    return Agent(
        model=ScriptedModel(then=twenty_parcels, record_requests=False),
        tools=[track_parcel],
        hooks=hooks[kind],
        callback_handler=None,
    )


def sample(kind: str) -> float:
    """CPU seconds per tool call over ``RUNS_PER_SAMPLE`` runs, each on a fresh agent (a fresh conversation)."""
    agents = [make(kind) for _ in range(RUNS_PER_SAMPLE)]

    def run() -> None:
        for agent in agents:
            result = agent("Track my 20 parcels")
            assert str(result).strip() == "All parcels are in transit."

    elapsed = cpu_seconds(run)
    if kind == "guarded":
        assert all(stop_of(agent) is None for agent in agents)
    return elapsed / (RUNS_PER_SAMPLE * CALLS_PER_RUN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # Strands warns about nothing here; keep the figures readable
    loop_overhead(
        f"Strands agent loop, {CALLS_PER_RUN} tool calls a run, {RUNS_PER_SAMPLE} runs a sample",
        sample,
        ["no hooks", "empty hooks", "guarded"],
        args.rounds,
    )


if __name__ == "__main__":
    main()
