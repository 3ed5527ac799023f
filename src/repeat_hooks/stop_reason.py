"""The named reasons a refusal or a stop carries."""

from __future__ import annotations

from enum import Enum


class StopReason(str, Enum):
    """Why a call was refused or a turn was ended. Every refusal and every stop has exactly one."""

    REPEATED_CALL = "repeated_call"
    """A tool call repeated past its limit in this turn."""
    IGNORED_REFUSALS = "ignored_refusals"
    """The model kept calling after ``max_refusals`` refusals."""
    TOO_MANY_ERRORS = "too_many_errors"
    """``max_errors_in_a_row`` tool calls failed in a row."""
    MAX_STEPS = "max_steps"
    """The turn made ``max_model_calls`` model calls."""
    TIME = "time"
    """The turn's recorded model time went over ``max_model_seconds``."""
    COST = "cost"
    """The turn's recorded cost went over ``max_cost_usd``."""

    def __str__(self) -> str:
        return self.value
