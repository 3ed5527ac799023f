"""repeat-hooks for pydantic-ai 2.x: ``Agent(model, capabilities=[RepeatGuard(Policy())])`` stops an agent calling
the same tool over and over; ``stop_of(result)`` and ``refusals_of(result)`` say what it did."""

from typing import Any

from repeat_hooks import Policy, Stop, StopReason, TokenPrices, kit

from . import calls
from .calls import model_view
from .guard import GuardSetupError, RepeatGuard, RepeatGuardStopped
from .state import refusals_of, stop_of

__all__ = [
    "GuardSetupError",
    "Policy",
    "RepeatGuard",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "TokenPrices",
    "model_view",
    "refusals_of",
    "stop_of",
]

__version__ = "0.3.0"


def _tool_hints(tool_def: Any) -> dict[str, bool]:
    return kit.hints(calls.annotations_of(tool_def))


def _read_only_hint(tool_def: Any) -> bool | None:
    return _tool_hints(tool_def).get("read_only")


_HINTS = "repeat_hooks.kit.hints(tool_def.metadata['annotations'])"
__getattr__ = kit.moved(
    __name__,
    {
        "GUARD_NAME": f"{__name__}.state:GUARD_NAME",
        "FailureCheck": "repeat_hooks.kit:FailureCheck",
        "accepts_text": f"{__name__}.guard:accepts_text",
        "tool_hints": (_HINTS, lambda: _tool_hints),
        "read_only_hint": (
            f"{_HINTS}.get('read_only')",
            lambda: lambda tool_def: _tool_hints(tool_def).get("read_only"),
        ),
    },
)
"""The names 0.3 dropped from ``__all__`` and their new spelling: they import, with a warning, for one release."""
