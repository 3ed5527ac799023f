"""``StopRepeatedCalls``: the policy and its own state in one serializable hook, for in-process use."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .call import ToolCall
from .decision import GuardEvent, Refusal, Stop
from .policy import Policy
from .state import GuardState


class StopRepeatedCalls(Policy):
    """A loop guard that keeps its counters with it: settings and state are pydantic fields.

    ``StopRepeatedCalls.model_validate_json(guard.model_dump_json())`` restores it exactly, state
    included, and the restored guard decides as the original would. For state kept elsewhere (an
    SDK's context, a store shared by processes), use a ``Policy`` and a ``GuardState`` directly.
    """

    state: GuardState = Field(default_factory=GuardState)
    """The counters: this turn's counts, recent deliveries, refusal and stop events."""

    def pre_agent_turn(self, turn_id: str | None = None) -> None:
        """Fires when a turn starts: resets the per-turn counters (unless ``turn_id`` is the current turn)."""
        self.start_turn(self.state, turn_id)

    def pre_tool_call(self, call: ToolCall, turn_id: str | None = None) -> Refusal | None:
        """Fires before each tool call: ``None`` lets it run; a ``Refusal`` is handed to the model instead."""
        return self.check_tool_call(self.state, call, turn_id)

    def post_tool_call(
        self,
        call: ToolCall,
        ok: bool = True,
        turn_id: str | None = None,
        delivery_id: str | None = None,
        *,
        result: Any = None,
    ) -> None:
        """Fires after a tool ran: records its outcome and its ``result`` (digested, never stored)."""
        self.record_tool_result(self.state, call, ok, turn_id, delivery_id, result=result)

    def pre_llm_call(self, turn_id: str | None = None) -> Stop | None:
        """Fires before each model call: ``None`` lets it happen; a ``Stop`` ends the turn with its message."""
        return self.check_model_call(self.state, turn_id)

    def post_llm_call(
        self, seconds: float = 0.0, cost_usd: float = 0.0, delivery_id: str | None = None, turn_id: str | None = None
    ) -> None:
        """Fires after each model call: counts it, with its recorded seconds and cost, for the budgets."""
        self.record_model_call(self.state, seconds, cost_usd, delivery_id, turn_id)

    def stop_of(self, turn_id: str) -> Stop | None:
        """How turn ``turn_id`` was stopped, while its stop event is kept; ``None`` if it was not."""
        return self.state.stop_of(turn_id)

    @property
    def events(self) -> list[GuardEvent]:
        """The refusals and stops kept in the state, oldest first."""
        return self.state.events
