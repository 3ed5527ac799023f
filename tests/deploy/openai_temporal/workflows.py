"""The workflow: a conversation of guarded turns, each a ``Runner.run`` under ``temporalio.contrib.openai_agents``.

Inside a workflow the plugin's runner sends every model call to ``invoke_model_activity`` and the
``track_parcel`` tool is an activity (``activity_as_tool``); everything else (the agent loop, the
guard's agent hooks, its tool guardrails and ``tool_use_behavior``, the conversation's ``GuardState`` in
the run context) is workflow code. A worker that takes the workflow over rebuilds that state by replaying
the history from the start, so the guard must decide the same from the same history: it is pure
(no clock, no randomness, no I/O) and its settings come from the workflow input.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner
    from repeat_hooks_openai_agents import GuardState, Policy, guard_agent
    from temporalio.contrib.openai_agents.workflow import activity_as_tool

    from . import scenario
    from .tools import ParcelTools

RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=1.0, maximum_attempts=5)
"""Activity retries: a call whose worker died is retried (on the other worker) 0.2 s after its heartbeat timeout."""
ACTIVITY_TIMEOUT = timedelta(seconds=20)
HEARTBEAT_TIMEOUT = timedelta(seconds=2)
"""A killed worker's running activity is declared lost after this long without a heartbeat (2 s: a busy
worker's heartbeats, every 1 s, still arrive in time)."""


async def run_conversation(request: scenario.ConversationRequest, policy: Policy) -> scenario.ConversationReport:
    """Run the guarded parcel agent for each prompt (one turn each, one state) and report what the guard did."""
    track_parcel = activity_as_tool(
        ParcelTools.track_parcel,
        start_to_close_timeout=ACTIVITY_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
    )
    agent = guard_agent(
        Agent[GuardState](
            name="parcel_tracker",
            instructions="Track the user's parcels with track_parcel and say where they are.",
            model=scenario.MODEL_NAME,
            tools=[track_parcel],
        ),
        policy,
        # No time budget here, so no clock: with one, use workflow.time (replays the same). Seconds recorded
        # from it would differ between two executions, and the test compares their states field by field.
        clock=None,
    )
    state = GuardState()
    history: list[Any] = []
    turns: list[scenario.TurnReport] = []
    for prompt in request.prompts:
        turn_input: str | list[Any] = [*history, {"role": "user", "content": prompt}] if history else prompt
        result = await Runner.run(
            agent,
            turn_input,
            context=state,  # the conversation's counts live in the run context: workflow state, rebuilt by replay
            max_turns=scenario.MAX_SCRIPTED_STEPS + 2,
            run_config=RunConfig(tracing_disabled=True),
        )
        new_items: list[Any] = [item.to_input_item() for item in result.new_items]
        outputs = [
            scenario.ToolOutput(call_id=str(item["call_id"]), output=str(item["output"]))
            for item in new_items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        turns.append(
            scenario.TurnReport(
                final_output=str(result.final_output),
                stop=state.turn.stop,
                tool_outputs=outputs,
                model_calls=len(result.raw_responses),
            )
        )
        history = result.to_input_list()
    return scenario.ConversationReport(turns=turns, events=list(state.events), guard_json=state.model_dump_json())


@workflow.defn(name=scenario.WORKFLOW_NAME)
class GuardedParcelConversation:
    """The guarded conversation, with the guard's settings from the workflow input."""

    @workflow.run
    async def run(self, request: scenario.ConversationRequest) -> scenario.ConversationReport:
        return await run_conversation(request, Policy(**request.policy))


@workflow.defn(name=scenario.WORKFLOW_NAME)
class SkewedGuardedParcelConversation:
    """TEST ONLY: the same workflow type with a guard that allows one more call than the input says.

    Stands for a guard that decides differently on replay (different settings on another worker,
    a clock, a random number, state from outside the history). Replaying a real history with it must
    fail with a nondeterminism error: that is how a non-deterministic guard gets caught.
    """

    @workflow.run
    async def run(self, request: scenario.ConversationRequest) -> scenario.ConversationReport:
        policy = dict(request.policy)
        policy["max_calls"] = int(policy.get("max_calls", 2)) + 1
        return await run_conversation(request, Policy(**policy))
