"""The stop rules as one table: which setting limits which counter, the reason it stops with, and which
hook point feeds the counter. ``Policy`` checks them in this order, and answers from the same table which
hook points and which figures an adapter must provide (``Policy.hook_points``, ``Policy.feeds``).

A new budget is one row here, its setting on ``Policy``, its counter on ``Turn`` and its text in
``messages.STOP_MESSAGES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .decision import StopReason


class HookPoint(str, Enum):
    """The points at which an adapter calls the guard: one per method of the hook (``StopRepeatedCalls``),
    whose names they are (``pre_tool_calls``, a response's calls at once, is ``PRE_TOOL_CALL`` too)."""

    PRE_AGENT_TURN = "pre_agent_turn"
    """A user message starts a turn."""
    PRE_TOOL_CALL = "pre_tool_call"
    """Before a tool runs: the call is decided."""
    POST_TOOL_CALL = "post_tool_call"
    """After a tool ran: its outcome and result are recorded."""
    POST_TOOL_REJECTED = "post_tool_rejected"
    """A call the guard let through was rejected before it ran (a human, another guardrail): it counts as
    rejected. Only an SDK that can reject calls has it; no policy needs it (``Policy.hook_points``)."""
    PRE_LLM_CALL = "pre_llm_call"
    """Before a model call: the turn may be stopped."""
    POST_LLM_CALL = "post_llm_call"
    """After a model call: it is counted, with its seconds and cost."""

    def __str__(self) -> str:
        return self.value


class Feed(str, Enum):
    """A figure the adapter must hand the guard for a rule to work."""

    OUTCOMES = "outcomes"
    """Whether each call that ran succeeded, and its result (``post_tool_call``)."""
    MODEL_CALLS = "model_calls"
    """Each model call (``post_llm_call``)."""
    SECONDS = "seconds"
    """Each model call's recorded seconds (``post_llm_call(seconds=...)``)."""
    COST = "cost"
    """Each model call's cost in US dollars (``post_llm_call(cost_usd=...)``)."""
    ANSWERS = "answers"
    """Each model call's text answer, when it called no tool (``post_llm_call(answer=...)``)."""
    WARNINGS = "warnings"
    """Not a figure but its return: the guard's warning handed to the model with a result (``Policy.warn``)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StopRule:
    """One rule that ends a turn: ``counter`` (a ``Turn`` field) reaching ``setting`` (a ``Policy`` field)."""

    reason: StopReason
    """The reason the turn stops with."""
    setting: str
    """The ``Policy`` field holding the limit (``None`` there switches the rule off)."""
    counter: str
    """The ``Turn`` field the limit applies to."""
    feed: Feed | None
    """What the adapter must feed for ``counter`` to move; ``None``: the guard counts it itself."""
    fed_at: HookPoint
    """The hook point that moves ``counter``."""
    over: bool = False
    """``True``: trips when ``counter`` goes over the limit (budgets); ``False``: when it reaches it."""
    tool: str | None = None
    """The ``Turn`` field naming the tool the stop message speaks of, if any."""


STOP_RULES: tuple[StopRule, ...] = (
    StopRule(
        StopReason.IGNORED_REFUSALS,
        "max_refusals",
        "refused_responses",
        None,
        HookPoint.PRE_TOOL_CALL,
        tool="last_refused",
    ),
    StopRule(
        StopReason.TOO_MANY_ERRORS,
        "max_errors_in_a_row",
        "errors_in_a_row",
        Feed.OUTCOMES,
        HookPoint.POST_TOOL_CALL,
        tool="last_failed",
    ),
    StopRule(StopReason.REPEATED_ANSWER, "max_same_answers", "same_answers", Feed.ANSWERS, HookPoint.POST_LLM_CALL),
    StopRule(StopReason.MAX_STEPS, "max_model_calls", "model_calls", Feed.MODEL_CALLS, HookPoint.POST_LLM_CALL),
    StopRule(StopReason.TIME, "max_model_seconds", "model_seconds", Feed.SECONDS, HookPoint.POST_LLM_CALL, over=True),
    StopRule(StopReason.COST, "max_cost_usd", "cost_usd", Feed.COST, HookPoint.POST_LLM_CALL, over=True),
)
"""Every stop rule, in the order ``decide_model_call`` checks them."""
