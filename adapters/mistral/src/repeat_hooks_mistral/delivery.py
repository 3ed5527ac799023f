"""Which hook call is which: the delivery id that makes a re-delivered hook call count once.

rc11 gives no id that is unique per hook call. ``call.tool_call.call_id`` is the model's id (models
reuse them: ``call_1`` in every session), and ``call.action_id`` / ``call.tool_call.action_id`` are
derived from it, so two distinct calls that share a model call id share those too. Keying
idempotency on any of them would merge distinct calls and let a loop through.

What *is* unique per hook call, and stable when it is delivered again, is the Temporal activity a
deployed worker runs it in: ``(workflow_id, workflow_run_id, activity_id)``; a retried activity keeps
all three. In-process runtimes (``create_session()``, ``local_runtime()``) call each hook once and
never re-deliver, so there the delivery id is ``None`` and every call counts.
"""

from __future__ import annotations

from temporalio import activity


def delivery_id() -> str | None:
    """The id of the hook call being run: its Temporal activity identity, or ``None`` outside an activity."""
    if not activity.in_activity():
        return None
    info = activity.info()
    return f"temporal:{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
