"""This module exists because the SDK has its own trace, beside OpenTelemetry: each refusal and stop the guard keeps
becomes a custom span there, under the span current where it was decided (tool names, call ids, figures only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.tracing import custom_span

from repeat_hooks import GuardEvent, Refusal, RefusalKind

REFUSAL_SPAN = "repeat_hooks.refusal"
"""The name of a refusal's custom span."""
STOP_SPAN = "repeat_hooks.stop"
"""The name of a stop's custom span."""


def trace(events: Sequence[GuardEvent], decided: Sequence[tuple[str | None, Refusal | None]] = ()) -> None:
    """A custom span, under the current span, for each of ``events``; ``decided``: the batch's (call id, decision)
    pairs, so that each refusal's span names its call (every refusal but a turn-ended one keeps an event)."""
    ids = iter([ident for ident, refusal in decided if refusal and refusal.reason is not RefusalKind.TURN_ENDED])
    for event in events:
        refusal = event.kind == "refusal"
        data: dict[str, Any] = {"reason": "repeated_call", "rule": event.reason.value} if refusal else {}
        data.setdefault("reason", event.reason.value)
        call_id = next(ids, None) if refusal else None
        data.update({"tool": event.tool} if event.tool is not None else {}, **({"call_id": call_id} if call_id else {}))
        data.update(count=_figure(event.count), limit=_figure(event.limit), turn=event.turn)
        with custom_span(REFUSAL_SPAN if refusal else STOP_SPAN, data):
            pass


def _figure(value: float) -> float | int:
    return int(value) if value.is_integer() else value
