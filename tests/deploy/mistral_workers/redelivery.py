"""The deployed parcel tracker of ``examples/deploy``, with every ``pre_tool_call`` delivered twice.

Temporal runs each hook call as an activity and retries an activity whose worker did not report back,
so the same hook call can run again after it already counted. Here that happens on purpose: on an
activity's first attempt, the guard decides (and stores the count), then the reply is lost; Temporal
retries the activity, possibly on the other worker, and the guard must answer the retry from its
delivery record (the activity's ``workflow_id/run_id/activity_id``) without counting it again.

Every ``pre_tool_call``, and the ``pre_llm_call`` that ends the turn, write a line to the witness log
(see ``parcel_app``): the decision, the attempt, and whether the reply was lost.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import temporalio.activity
from mistralai.vibe_agents.sdk.authoring.contracts import HookContext

EXAMPLE_APP = Path(__file__).resolve().parents[3] / "examples" / "deploy" / "parcel_worker"
if str(EXAMPLE_APP) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_APP))

from parcel_app import ParcelGuard, build_agent, witness  # noqa: E402


class ReplyLost(BaseException):
    """The hook's reply never reaches Temporal. A ``BaseException`` on purpose: rc11 turns any ``Exception``
    a hook raises into a failed result that is never retried (``DirectCapabilityCallableAdapter.call``,
    ``vibe/harness/runtime/capabilities/callables.py:24``); anything else fails the activity, which
    Temporal retries (3 attempts, 1 s apart at first, by the workflows SDK's default retry policy)."""


class RedeliveredParcelGuard(ParcelGuard):
    """``ParcelGuard`` (same policy, same Redis store) whose replies are lost once: the first delivery of
    every ``pre_tool_call``, and of the ``pre_llm_call`` that ends the turn."""

    async def pre_tool_call(self, ctx: HookContext, call: Any) -> Any:
        return _lose_first_reply(ctx, "pre_tool_call", await super().pre_tool_call(ctx, call))

    async def pre_llm_call(self, ctx: HookContext, invocation: Any) -> Any:
        decision = await super().pre_llm_call(ctx, invocation)
        if type(decision).__name__ == "PreLlmCallHookContinue":
            return decision
        return _lose_first_reply(ctx, "pre_llm_call", decision)


def _lose_first_reply(ctx: HookContext, hook: str, decision: Any) -> Any:
    """Write the witness line; on an activity's first attempt raise ``ReplyLost`` instead of answering."""
    attempt = temporalio.activity.info().attempt if temporalio.activity.in_activity() else 0
    lost = attempt == 1
    witness(
        hook, session_id=ctx.session.id, turn_id=ctx.session.turn_id, decision=type(decision).__name__, reply_lost=lost
    )
    if lost:
        raise ReplyLost(f"{hook} reply lost on attempt {attempt} (test fault)")
    return decision


agent = build_agent(RedeliveredParcelGuard)
