"""The guard's refusals and stops in the SDK's own trace, so they show in its traces view.

Each refusal and each stop the guard keeps in the conversation's state (a ``GuardEvent``) also becomes a
custom span of the SDK's trace, opened and closed where the guard decided it, under the span current
there: the SDK's ``turn`` span of the model response whose calls were refused (a response's calls are
decided as a batch in ``on_llm_end``, before any runs; the refused calls' ``function`` spans are children of
the same ``turn`` span), and the same span for the stop (``EndTurn``, after that response's tools). With
``RunConfig(tracing={"include_task_and_turn_spans": False})`` the SDK opens no turn spans: they land on the
agent span::

    repeat_hooks.refusal  {"reason": "repeated_call", "rule": "repeat", "tool": "track_parcel",
                           "call_id": "call_3", "count": 3, "limit": 2, "turn": 1}
    repeat_hooks.stop     {"reason": "ignored_refusals", "tool": "track_parcel", "count": 3, "limit": 3, "turn": 1}

Tool names, call ids and figures only: never an argument, a result, or a message. It follows the SDK's
own tracing: on by default, off with ``RunConfig(tracing_disabled=True)``, ``set_tracing_disabled(True)``
or ``OPENAI_AGENTS_DISABLE_TRACING=1`` (the SDK then opens no span), and exported by your processors
(``add_trace_processor``) as the SDK's own spans are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.tracing import custom_span

from repeat_hooks import GuardState, ToolCall
from repeat_hooks.decision import GuardEvent, Refusal, RefusalKind

REFUSAL_SPAN = "repeat_hooks.refusal"
"""The name of a refusal's custom span."""
STOP_SPAN = "repeat_hooks.stop"
"""The name of a stop's custom span."""
TURN_ENDED = RefusalKind.TURN_ENDED


def last_event(state: GuardState) -> GuardEvent | None:
    """The newest event the state keeps (``None``: none yet); pass it to ``trace_events`` after deciding."""
    return state.events[-1] if state.events else None


def trace_events(
    state: GuardState,
    since: GuardEvent | None,
    calls: Sequence[ToolCall] = (),
    decisions: Sequence[Refusal | None] = (),
) -> None:
    """Open and close a custom span, under the current span, for each event the state kept after ``since``.

    ``calls`` and their ``decisions``: the batch just decided, so that each refusal's span names its call (the
    state keeps an event of every refusal but the ``turn_ended`` ones, in the calls' order).
    """
    events = state.events
    if not events or events[-1] is since:
        return  # nothing refused or stopped
    start = 0
    if since is not None:
        for index in range(len(events) - 1, -1, -1):
            if events[index] is since:
                start = index + 1
                break
    refused = zip(calls, decisions, strict=True)
    ids = iter([call.call_id for call, refusal in refused if refusal and refusal.reason is not TURN_ENDED])
    for event in events[start:]:
        refusal = event.kind == "refusal"
        data: dict[str, Any] = {"reason": "repeated_call", "rule": event.reason.value} if refusal else {}
        if not refusal:
            data["reason"] = event.reason.value
        if event.tool is not None:
            data["tool"] = event.tool
        if refusal:
            call_id = next(ids, None)
            if call_id:
                data["call_id"] = call_id
        data.update(count=_figure(event.count), limit=_figure(event.limit), turn=event.turn)
        with custom_span(REFUSAL_SPAN if refusal else STOP_SPAN, data):
            pass


def _figure(value: float) -> float | int:
    """A count as an ``int`` (3, not 3.0); seconds and dollars as they are."""
    return int(value) if value.is_integer() else value
