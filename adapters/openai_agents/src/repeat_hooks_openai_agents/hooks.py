"""``GuardHooks``: the run hooks that start turns and count model calls.

Pass a ``GuardHooks()`` to every ``Runner.run`` / ``Runner.run_streamed`` of a guarded agent.
Run hooks only observe (the SDK ignores what they return), so they never refuse or stop anything
themselves: they keep the guard's turn and budgets up to date for the guardrails and ``EndTurn``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, AgentHookContext, ModelResponse, RunContextWrapper, RunHooks, Usage
from agents.items import TResponseInputItem

from .context import require_guard
from .turns import turn_for_run, turn_of

CostOf = Callable[[Usage], float]
"""The US dollars one model response cost, from the usage the SDK reports for it."""
Clock = Callable[[], float]
"""A clock in seconds (``time.monotonic``; under Temporal, ``temporalio.workflow.time``)."""


def token_prices(
    input_usd_per_million: float, output_usd_per_million: float, cached_input_usd_per_million: float | None = None
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's ``Usage``.

    Cached input tokens (``usage.input_tokens_details.cached_tokens``) are charged at
    ``cached_input_usd_per_million`` when given, else as ordinary input tokens.
    """

    def cost_of(usage: Usage) -> float:
        cached = 0
        if cached_input_usd_per_million is not None and usage.input_tokens_details is not None:
            cached = usage.input_tokens_details.cached_tokens or 0
        fresh = max(0, usage.input_tokens - cached)
        dollars = fresh * input_usd_per_million + usage.output_tokens * output_usd_per_million
        if cached_input_usd_per_million is not None:
            dollars += cached * cached_input_usd_per_million
        return dollars / 1_000_000

    return cost_of


class GuardHooks(RunHooks[Any]):
    """Run hooks for a guarded agent: pass ``hooks=GuardHooks()`` to ``Runner.run`` / ``run_streamed``.

    - ``on_agent_start`` starts the guard's turn when a run starts, and keeps it after a handoff, in a
      nested agent-as-tool run, and when a saved ``RunState`` resumes (see ``turns``).
    - ``on_llm_end`` feeds the guard's ``post_llm_call``: one model call, its cost from ``cost``
      (``None``: 0 dollars) and its seconds measured with ``clock`` between ``on_llm_start`` and
      ``on_llm_end`` (``None``: 0 seconds; the SDK records no latency of its own).

    Stateless apart from the in-flight clock readings: one instance may serve concurrent runs.
    Subclass it to add your own hooks, and call ``super()`` in the methods you override.
    """

    def __init__(self, *, cost: CostOf | None = None, clock: Clock | None = None) -> None:
        self.cost = cost
        """Maps a response's ``Usage`` to US dollars, for ``max_cost_usd``."""
        self.clock = clock
        """Times each model call, for ``max_model_seconds``."""
        self._started: dict[int, float] = {}

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Fires when an agent starts (run start, handoff, resume, nested run): starts or keeps the turn."""
        guard = require_guard(context.context)
        guard.pre_agent_turn(turn_for_run(context.usage, guard.state))

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Fires before each model call: reads the clock, if there is one. Returns nothing."""
        if self.clock is not None:
            self._started[id(context)] = self.clock()

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        """Fires after each model call: records it with its seconds and cost (``post_llm_call``)."""
        guard = require_guard(context.context)
        seconds = 0.0
        if self.clock is not None:
            started = self._started.pop(id(context), None)
            if started is not None:
                seconds = self.clock() - started
        cost = self.cost(response.usage) if self.cost is not None else 0.0
        guard.post_llm_call(seconds, cost, None, turn_of(context.usage))
