"""``StopRepeatedCalls``: a policy and one conversation's state, in one serializable hook for in-process use.

The hook's methods keep the seed's names; each is one verb of the policy on the hook's own state, which the hook
commits at once; with observers (``repeat_hooks.observe``) it tells them what the verb decided, after it (without
any, each method is the verb's call and no more: this is on the path of every tool call):

| hook method | policy verb | ``HookPoint`` |
|---|---|---|
| ``pre_agent_turn`` | ``start_turn`` | ``PRE_AGENT_TURN`` |
| ``pre_tool_calls`` / ``pre_tool_call`` | ``decide_tool_calls`` / ``decide_tool_call`` | ``PRE_TOOL_CALL`` |
| ``post_tool_call`` | ``record_tool_result`` | ``POST_TOOL_CALL`` |
| ``post_tool_rejected`` | ``record_rejection`` | ``POST_TOOL_REJECTED`` |
| ``pre_llm_call`` | ``decide_model_call`` | ``PRE_LLM_CALL`` |
| ``post_llm_call`` | ``record_model_call`` | ``POST_LLM_CALL`` |
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, ValidationInfo, model_validator

from . import observe
from .call import ToolCall
from .decision import GuardEvent, Refusal, Stop
from .policy import Policy
from .state import GuardState, WholeModel

_SETTINGS = frozenset(Policy.model_fields)


class StopRepeatedCalls(WholeModel):
    """A loop guard for one conversation: it holds a ``Policy`` (the settings) and a ``GuardState`` (the counts).

    Build it with the settings as keywords, ``StopRepeatedCalls(max_calls=2, max_refusals=3)``, or with a
    policy, ``StopRepeatedCalls(policy=Policy(...))``; read them back as ``guard.policy``.
    ``StopRepeatedCalls.model_validate_json(guard.model_dump_json())`` restores it exactly, counts included,
    and a guard saved by 0.1 (settings at the top level) loads too. A dump never holds the policy's
    ``digest_key``: restore a keyed guard with ``model_validate_json(saved, context={"digest_key": key})``.
    One guard serves one conversation: for many, keep one ``Policy`` and a ``GuardState`` per conversation
    (in a ``StateStore``), or use an adapter.
    """

    model_config = ConfigDict(extra="forbid")

    policy: Policy = Field(default_factory=Policy)
    """The settings (frozen)."""
    state: GuardState = Field(default_factory=GuardState)
    """The counts: this turn's counters, recent deliveries, refusal and stop events."""

    @model_validator(mode="before")
    @classmethod
    def _settings_as_keywords(cls, data: Any, info: ValidationInfo) -> Any:
        """``StopRepeatedCalls(max_calls=2)``: settings given as keywords (or saved at the top level by 0.1);
        ``context={"digest_key": key}`` gives a restored guard back its key (a dump never holds it)."""
        if not isinstance(data, dict):
            return data
        key = (info.context or {}).get("digest_key") if isinstance(info.context, dict) else None
        if key is not None:
            data = dict(data)
            policy = data.get("policy")
            if isinstance(policy, dict):
                data["policy"] = {**policy, "digest_key": key}
            elif policy is None:
                data["digest_key"] = key
        for name in data:
            if name not in _SETTINGS and name not in ("policy", "state"):
                close = difflib.get_close_matches(name, sorted(_SETTINGS), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise ValueError(f"{name} is not a setting{hint} (the settings are Policy's fields)")
        settings = {name: data[name] for name in data if name in _SETTINGS}
        if not settings:
            return data
        if "policy" in data:
            raise ValueError(
                f"give the settings either as keywords or as policy=Policy(...), not both (got policy and "
                f"{', '.join(sorted(settings))})"
            )
        rest = {name: value for name, value in data.items() if name not in settings}
        return {**rest, "policy": settings}

    if TYPE_CHECKING:  # for type checkers only: a real __init__ would cut model_validate's context off

        def __init__(self, **data: Any) -> None:
            """``StopRepeatedCalls(max_calls=2, ...)``, ``StopRepeatedCalls(policy=Policy(...))`` or
            ``StopRepeatedCalls(policy=..., state=...)``: the settings as keywords type-check too."""

    def pre_agent_turn(self, *, turn_id: str | None = None) -> None:
        """Fires when a user message starts a turn: fresh per-turn counts, unless ``turn_id`` is the current
        turn (a resumed or continued turn keeps its counts). Returns nothing."""
        if observe.OBSERVERS:
            observe.apply(self.policy.start_turn, self.state, turn_id=turn_id)
        else:
            self.policy.start_turn(self.state, turn_id=turn_id)

    def pre_tool_call(self, call: ToolCall, *, turn_id: str | None = None) -> Refusal | None:
        """Fires before each tool call: returns ``None`` to let it run, or the ``Refusal`` to hand the model
        instead of a result (the tool must not run). Counts the call."""
        if observe.OBSERVERS:
            return observe.apply(self.policy.decide_tool_call, self.state, call, turn_id=turn_id)
        return self.policy.decide_tool_call(self.state, call, turn_id=turn_id)

    def pre_tool_calls(self, calls: Sequence[ToolCall], *, turn_id: str | None = None) -> list[Refusal | None]:
        """Fires once per model response with all its tool calls, before any runs: one decision per call, in
        order, as ``pre_tool_call`` gives them. A later ``pre_tool_call`` of one of them returns its decision."""
        if observe.OBSERVERS:
            return observe.apply(self.policy.decide_tool_calls, self.state, calls, turn_id=turn_id)
        return self.policy.decide_tool_calls(self.state, calls, turn_id=turn_id)

    def post_tool_call(
        self,
        call: ToolCall,
        ok: bool = True,
        *,
        result: Any = None,
        turn_id: str | None = None,
        delivery_id: str | None = None,
    ) -> str | None:
        """Fires after a tool ran: records whether it succeeded and what it returned (``result``: what the model
        reads; digested, never stored). Returns ``None``, or with ``warn=True`` the note to hand the model after
        the result (the same call made next would be refused: ``Policy.warning``)."""
        policy, state = self.policy, self.state
        if observe.OBSERVERS:
            observe.apply(policy.record_tool_result, state, call, ok=ok, result=result, turn_id=turn_id,
                          delivery_id=delivery_id)  # fmt: skip
        else:
            policy.record_tool_result(state, call, ok=ok, result=result, turn_id=turn_id, delivery_id=delivery_id)
        return policy.warning(state, call) if policy.warn else None

    def post_tool_rejected(self, call: ToolCall, *, turn_id: str | None = None) -> None:
        """Fires when a call ``pre_tool_call`` let through was rejected before it ran (a human reviewer, another
        guardrail): it waits for no outcome, and counts toward its repeats as a rejection, so the same rejected
        call is refused after ``max_calls`` rejections instead of being asked about again. Returns nothing."""
        if observe.OBSERVERS:
            observe.apply(self.policy.record_rejection, self.state, call, turn_id=turn_id)
        else:
            self.policy.record_rejection(self.state, call, turn_id=turn_id)

    def pre_llm_call(self, *, turn_id: str | None = None) -> Stop | None:
        """Fires before each model call: returns ``None`` to let it happen, or the ``Stop`` that ends the turn
        (no more model calls; ``stop.message`` is the caller's final text)."""
        if observe.OBSERVERS:
            return observe.apply(self.policy.decide_model_call, self.state, turn_id=turn_id)
        return self.policy.decide_model_call(self.state, turn_id=turn_id)

    def post_llm_call(
        self,
        seconds: float = 0.0,
        cost_usd: float = 0.0,
        *,
        answer: str | None = None,
        turn_id: str | None = None,
        delivery_id: str | None = None,
    ) -> None:
        """Fires after each model call: counts it, with its recorded ``seconds`` and ``cost_usd``, for the
        budgets, and its text ``answer`` when it called no tool, for ``max_same_answers``. Returns nothing."""
        if observe.OBSERVERS:
            observe.apply(self.policy.record_model_call, self.state, seconds=seconds, cost_usd=cost_usd, answer=answer,
                          turn_id=turn_id, delivery_id=delivery_id)  # fmt: skip
        else:
            self.policy.record_model_call(self.state, seconds=seconds, cost_usd=cost_usd, answer=answer,
                                          turn_id=turn_id, delivery_id=delivery_id)  # fmt: skip

    @property
    def stop(self) -> Stop | None:
        """The current turn's ``Stop``, once ``pre_llm_call`` has ended it; else ``None``."""
        return self.state.turn.stop

    def stop_of(self, turn_id: str) -> Stop | None:
        """How turn ``turn_id`` was stopped, while its stop event is kept; ``None`` if it was not."""
        return self.state.stop_of(turn_id)

    @property
    def events(self) -> list[GuardEvent]:
        """The refusals and stops kept in the state, oldest first."""
        return self.state.events
