"""The resuming side of a human-in-the-loop test, run in a fresh Python process (``test_approval.py``).

It knows the agent's shape and nothing of the run that paused: it loads the saved ``RunState`` (the guard's
counts inside, through ``context_deserializer``), applies the human's decision to every pending approval,
resumes the run with a scripted model, and prints what happened as one JSON line. A run that pauses again is
saved to ``--save``.

    python approval_child.py STATE.json --decision approve|reject --replies REPLIES.json [--save NEXT.json]

``REPLIES.json``: the model's responses, in order: ``{"call": [call_id, order]}`` (a ``send_refund`` call) or
``{"text": "..."}`` (its answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
from repeat_hooks_openai_agents import GuardState, context_deserializer, context_serializer, guard_agent
from repeat_hooks_openai_agents.testing import ScriptedModel, message, tool_call

set_tracing_disabled(True)
POLICY: dict[str, Any] = {"count": "per_turn", "max_calls": 1}
"""The policy of the tests: one refund per order and turn."""


def refund_agent(model: ScriptedModel, refunds: list[str]) -> Agent[GuardState]:
    """The agent both sides build: ``send_refund`` needs a human's approval."""

    @function_tool(needs_approval=True)
    def send_refund(order: str) -> str:
        """Refund an order (a human approves each refund)."""
        refunds.append(order)
        return f"refunded {order}"

    return guard_agent(Agent[GuardState](name="refunds", model=model, tools=[send_refund]), **POLICY)


def scripted(replies: list[dict[str, Any]]) -> ScriptedModel:
    """A model answering ``replies`` in order."""
    return ScriptedModel(
        *[
            [tool_call("send_refund", {"order": reply["call"][1]}, reply["call"][0])]
            if "call" in reply
            else [message(reply["text"])]
            for reply in replies
        ]
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state")
    parser.add_argument("--decision", choices=["approve", "reject"], required=True)
    parser.add_argument("--replies", required=True)
    parser.add_argument("--save")
    args = parser.parse_args()

    refunds: list[str] = []
    model = scripted(json.loads(Path(args.replies).read_text()))
    agent = refund_agent(model, refunds)
    saved = json.loads(Path(args.state).read_text())
    state = await RunState.from_json(agent, saved, context_deserializer=context_deserializer)
    asked = [item.call_id for item in state.get_interruptions()]
    for item in state.get_interruptions():
        state.approve(item) if args.decision == "approve" else state.reject(item)

    result = await Runner.run(agent, state)

    guard = result.context_wrapper.context
    if result.interruptions and args.save:
        Path(args.save).write_text(json.dumps(result.to_state().to_json(context_serializer=context_serializer)))
    print(
        json.dumps(
            {
                "decided": asked,
                "refunds": refunds,
                "asked": [item.call_id for item in result.interruptions],
                "final": result.final_output,
                "model_calls": model.calls,
                "read": [model.outputs_received(n) for n in range(model.calls)],
                "turn_id": guard.turn.id,
                "counts": sorted(guard.turn.counts.values()),
                "refusals": guard.turn.refusals,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
