"""``GuardHooks``: the run hooks that start turns and count model calls.

Pass a ``GuardHooks()`` to every ``Runner.run`` / ``Runner.run_streamed`` of a guarded agent.
Run hooks only observe (the SDK ignores what they return), so they never refuse or stop anything
themselves: they keep the guard's turn and budgets up to date for the guardrails and ``EndTurn``.
They do raise ``GuardSetupError`` at the first model call of a run set up wrongly (an agent not
built with ``guard_agent``, a budget that can never trip, one guard shared by two runs), and
``RequireGuardHooks`` (the agent hooks ``guard_agent`` installs) raises it when ``GuardHooks`` are
missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, AgentHookContext, AgentHooks, ModelResponse, RunContextWrapper, RunHooks, Tool, Usage
from agents.items import TResponseInputItem

from repeat_hooks import StopRepeatedCalls
from repeat_hooks.cost import TokenPrices

from .behavior import EndTurn
from .context import require_guard
from .errors import NO_HOOKS, GuardSetupError
from .turns import fail, turn_for_run, turn_in_run, turn_of

CostOf = Callable[[Usage], float]
"""The US dollars one model response cost, from the usage the SDK reports for it."""
Clock = Callable[[], float]
"""A clock in seconds (``time.monotonic``; under Temporal, ``temporalio.workflow.time``)."""


def token_prices(
    input_usd_per_million: float, output_usd_per_million: float, cached_input_usd_per_million: float | None = None
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's ``Usage``.

    Cached input tokens (``usage.input_tokens_details.cached_tokens``) are charged at
    ``cached_input_usd_per_million`` when given, else as ordinary input tokens. Invalid prices raise
    ``ValueError`` (``TokenPrices``).
    """

    prices = TokenPrices(input_usd_per_million, output_usd_per_million, cached_input_usd_per_million)

    def cost_of(usage: Usage) -> float:
        details = usage.input_tokens_details
        return prices.dollars(usage.input_tokens, usage.output_tokens, details.cached_tokens if details else 0)

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
        """Fires when an agent starts (run start, handoff, resume, nested run): starts or keeps the turn.

        Raises ``GuardSetupError`` when this run's turn was replaced by another run's on the same guard.
        """
        guard = require_guard(context.context)
        if turn_of(context.usage) is not None:
            turn_in_run(guard, context.usage)  # a handoff or a nested run: the turn goes on, if it is still ours
            return
        guard.pre_agent_turn(turn_for_run(context.usage, guard.state))

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Fires before each model call: checks the run's setup, then reads the clock, if there is one.

        Raises ``GuardSetupError`` when ``agent`` was not built with ``guard_agent``, when the guard
        has a budget these hooks cannot feed (``max_model_seconds`` without ``clock``,
        ``max_cost_usd`` without ``cost``), or when another run took over the guard.
        """
        guard = require_guard(context.context)
        turn_in_run(guard, context.usage)
        if not isinstance(agent.tool_use_behavior, EndTurn):
            fail(context.usage, _not_guarded(agent))
        problem = self._unfed_budget(guard)
        if problem is not None:
            fail(context.usage, problem)
        if self.clock is not None:
            self._started[id(context)] = self.clock()

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        """Fires after each model call: records it with its seconds and cost (``post_llm_call``).

        Raises ``GuardSetupError`` when the guard has ``max_cost_usd`` and the model reported no usage
        at all (some third-party providers): its cost would always be 0 dollars.
        """
        guard = require_guard(context.context)
        turn_id = turn_in_run(guard, context.usage)
        seconds = 0.0
        if self.clock is not None:
            started = self._started.pop(id(context), None)
            if started is not None:
                seconds = self.clock() - started
        cost = 0.0
        if self.cost is not None:
            if guard.max_cost_usd is not None and not _reports_usage(response.usage):
                fail(context.usage, _no_usage(agent, guard.max_cost_usd))
            cost = self.cost(response.usage)
        guard.post_llm_call(seconds, cost, None, turn_id)

    def _unfed_budget(self, guard: StopRepeatedCalls) -> GuardSetupError | None:
        if guard.max_model_seconds is not None and self.clock is None:
            return GuardSetupError(
                f"repeat-hooks: max_model_seconds={guard.max_model_seconds:g} can never trip: GuardHooks() has no "
                "clock, so no model time is recorded. Pass one: GuardHooks(clock=time.monotonic) (inside a "
                "Temporal workflow: GuardHooks(clock=temporalio.workflow.time))"
            )
        if guard.max_cost_usd is not None and self.cost is None:
            return GuardSetupError(
                f"repeat-hooks: max_cost_usd={guard.max_cost_usd:g} can never trip: GuardHooks() has no cost "
                "function, so every model call costs 0 dollars. Pass one: GuardHooks(cost=token_prices("
                "input_usd_per_million=..., output_usd_per_million=...))"
            )
        return None


def _reports_usage(usage: Usage) -> bool:
    return bool(usage.requests or usage.input_tokens or usage.output_tokens or usage.total_tokens)


def _no_usage(agent: Agent[Any], budget: float) -> GuardSetupError:
    return GuardSetupError(
        f"repeat-hooks: max_cost_usd={budget:g} can never trip: the model of agent {agent.name!r} reported no "
        "token usage, so GuardHooks(cost=...) prices every call at 0 dollars. Use a model that reports usage "
        "(streamed Chat Completions need ModelSettings(include_usage=True)), or limit the turn with max_model_calls"
    )


def _not_guarded(agent: Agent[Any]) -> GuardSetupError:
    return GuardSetupError(
        f"repeat-hooks: GuardHooks ran agent {agent.name!r}, which was not built with guard_agent: its tool "
        "calls are neither counted nor refused and a stop never ends its turn. Guard it once at start-up "
        "and run the clone: agent = guard_agent(Agent(...)); Runner.run(agent, input, context=guard, "
        "hooks=GuardHooks()) (for an agent used as a tool: guard_agent(agent).as_tool(...))"
    )


class RequireGuardHooks(AgentHooks[Any]):
    """The agent hooks ``guard_agent`` puts on a guarded agent: yours, plus a check of the run's hooks.

    Every method calls the same method of the agent's own hooks (``inner``), if it had any.
    ``on_llm_start`` first raises ``GuardSetupError`` when the run has no turn, that is, when the run
    was started without ``hooks=GuardHooks()``: without it each run would count on top of the last
    one's turn and show its stop.
    """

    def __init__(self, inner: AgentHooks[Any] | None = None) -> None:
        self.inner: AgentHooks[Any] | None = inner.inner if isinstance(inner, RequireGuardHooks) else inner
        """The agent's own hooks, called after the check."""

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Fires before each model call of the agent: raises ``GuardSetupError`` when GuardHooks are missing."""
        require_guard(context.context)
        if turn_of(context.usage) is None:
            raise GuardSetupError(NO_HOOKS)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        """Fires after each model call of the agent: calls your hooks' ``on_llm_end``."""
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Fires when the agent starts: calls your hooks' ``on_start``."""
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
        """Fires when the agent produced its final output: calls your hooks' ``on_end``."""
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], agent: Agent[Any], source: Agent[Any]) -> None:
        """Fires when the agent is handed off to: calls your hooks' ``on_handoff``."""
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        """Fires before one of the agent's tools runs: calls your hooks' ``on_tool_start``."""
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any) -> None:
        """Fires after one of the agent's tools ran: calls your hooks' ``on_tool_end``."""
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)
