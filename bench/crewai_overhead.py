"""What ``RepeatGuard`` adds per tool call inside CrewAI's agent loop, side by side with empty hooks of the same kind.

Run it with the CrewAI venv's Python (CrewAI pins openai 2.x, which the main venv rules out)::

    .venv-crewai/bin/python bench/crewai_overhead.py [--rounds 9]

One run: a fresh one-agent crew whose scripted model (``repeat_hooks_crewai.testing.ScriptedLLM``, at CrewAI's model
seam) asks for 20 tool calls, one per response (all different, so none is refused: fresh calls every time), then
answers: 21 model calls, 20 tool runs, on the real ``AgentExecutor`` loop, CrewAI's cache off. The same run goes with
no hooks, with empty hooks (``Empty``: one function that does nothing, registered in CrewAI's global registries at
the five points the guard uses: ``EXECUTION_START``, before/after model call, before/after tool call: what CrewAI
charges for having such hooks at all), and guarded by ``RepeatGuard()`` (the default ``Policy()``), each attached for
its sample and taken out after. They are interleaved (rotating which goes first); each figure is the median over the
rounds of one side's CPU time per tool call (``time.process_time``). The guard's own cost is guarded minus empty.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from crewai import Agent, Crew, Task
from crewai.hooks import (
    register_after_llm_call_hook,
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_llm_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.hooks.dispatch import InterceptionPoint, register, unregister
from crewai.tools import tool
from interleave import cpu_seconds, loop_overhead
from repeat_hooks_crewai import RepeatGuard, stop_of
from repeat_hooks_crewai.testing import Reply, ScriptedLLM, tool_call

CALLS_PER_RUN = 20
RUNS_PER_SAMPLE = 2


@tool("track_parcel")
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


def nothing(ctx: Any) -> None:
    """Does nothing."""


def empty(add: bool) -> None:
    """Register ``nothing`` at the guard's five points (``add``), or take it out."""
    if add:
        register(InterceptionPoint.EXECUTION_START, nothing)
        for hook in (register_before_llm_call_hook, register_after_llm_call_hook):
            hook(nothing)
        for hook in (register_before_tool_call_hook, register_after_tool_call_hook):
            hook(nothing)
    else:
        unregister(InterceptionPoint.EXECUTION_START, nothing)
        for off in (unregister_before_llm_call_hook, unregister_after_llm_call_hook):
            off(nothing)
        for off in (unregister_before_tool_call_hook, unregister_after_tool_call_hook):
            off(nothing)


def twenty_parcels(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Reply:
    step = sum(1 for message in messages if message.get("role") == "tool")
    if step >= CALLS_PER_RUN:
        return "All parcels are in transit."
    return [tool_call("track_parcel", {"tracking_number": f"FR-{step}"})]


def make() -> Crew:
    llm = ScriptedLLM(model="scripted", then=twenty_parcels, record_requests=False)
    agent = Agent(role="tracker", goal="g", backstory="b", llm=llm, tools=[track_parcel], cache=False, max_iter=50)
    task = Task(description="Track my 20 parcels", expected_output="An answer.", agent=agent)
    return Crew(agents=[agent], tasks=[task], cache=False, verbose=False)


def sample(kind: str) -> float:
    """CPU seconds per tool call over ``RUNS_PER_SAMPLE`` runs, each on a fresh crew (a fresh conversation)."""
    crews = [make() for _ in range(RUNS_PER_SAMPLE)]
    guards = [RepeatGuard().attach(crew) for crew in crews] if kind == "guarded" else []
    if kind == "empty hooks":
        empty(True)

    def run() -> None:
        for crew in crews:
            assert crew.kickoff().raw == "All parcels are in transit."

    try:
        elapsed = cpu_seconds(run)
    finally:
        if kind == "empty hooks":
            empty(False)
        for guard in guards:
            guard.detach()
    if kind == "guarded":
        assert all(stop_of(crew) is None for crew in crews)
    return elapsed / (RUNS_PER_SAMPLE * CALLS_PER_RUN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    logging.disable(logging.WARNING)
    loop_overhead(
        f"CrewAI agent loop, {CALLS_PER_RUN} tool calls a run, {RUNS_PER_SAMPLE} runs a sample",
        sample,
        ["no hooks", "empty hooks", "guarded"],
        args.rounds,
    )


if __name__ == "__main__":
    main()
