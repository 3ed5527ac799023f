"""The guarded agent and the workflow that runs it, turn by turn, under ``pydantic_ai.durable_exec.temporal``.

``TemporalDurability`` makes each model request and each ``track_parcel`` call an activity; the agent
graph and the ``RepeatGuard`` hooks (``before_run``, ``before_model_request``, ``after_model_request``,
``wrap_tool_execute``) run in workflow code. A worker that takes the workflow over rebuilds the
guard's per-run state by replaying the history from the start: the guard is deterministic because it
reads only the history (model responses and tool results are activity results, ``run_id`` is
replay-stable) and the run clock (``workflow.now()``), and its settings are the same code in every
process. A turn continued in a new workflow run (``continue_as_new``) is rebuilt from the messages it is
handed (``ContinuedParcelConversation``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent, CallToolsNode
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo
    from repeat_hooks_pydantic_ai import RepeatGuard, RepeatGuardStopped, refusals_of, stop_of
    from repeat_hooks_pydantic_ai.testing import ScriptedModel, call, step_of, tool_returns
    from temporal_harness import tracking_status
    from temporalio.workflow import ActivityConfig

    from repeat_hooks import Policy

    from . import scenario

RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=1.0, maximum_attempts=5)
"""Activity retries: a call whose worker died is retried (on the other worker) 0.2 s after its heartbeat timeout."""
ACTIVITIES = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=20), heartbeat_timeout=timedelta(seconds=2), retry_policy=RETRY
)
"""Every activity (model requests, tool calls): pydantic-ai heartbeats them in the background every
second, so a killed worker's activity is declared lost 2 s after its last heartbeat."""


def respond(step: int) -> list[Any]:
    """The scripted model's response at conversation step ``step``: the scenario's calls."""
    return [call(name, arguments, step=step, index=i) for i, (name, arguments) in enumerate(scenario.script(step))]


class LedgerModel(ScriptedModel):
    """The scripted model, logging each attempt that reaches it (and blocking at a ``model:N`` kill point)."""

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await scenario.checkpoint("model", {"step": step_of(messages), "received": tool_returns(messages)})
        return await super()._respond(messages, info)


async def track_parcel(parcel_id: str) -> str:
    """Return the tracking status of a parcel."""
    await scenario.checkpoint("tool", {"parcel_id": parcel_id})
    return tracking_status(parcel_id)


agent: Agent[None, str] = Agent(
    LedgerModel(respond),
    name=scenario.AGENT_NAME,
    instructions="Track the user's parcels with track_parcel and say where they are.",
    tools=[track_parcel],
    capabilities=[RepeatGuard(Policy(**scenario.POLICY)), TemporalDurability(activity_config=ACTIVITIES)],
)


async def run_conversation(
    agent: Agent[None, str], request: scenario.ConversationRequest
) -> scenario.ConversationReport:
    """Run ``agent`` for each prompt, continuing the conversation (one run, one turn, each)."""
    history: list[ModelMessage] | None = None
    turns: list[scenario.TurnReport] = []
    run_ids: list[str] = []
    for prompt in request.prompts:
        result = await agent.run(prompt, message_history=history)
        new = result.new_messages()
        returns = [
            str(part.content)
            for message in new
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)
        ]
        responses = [m for m in new if isinstance(m, ModelResponse) and m.model_name != "repeat-hooks"]
        turns.append(
            scenario.TurnReport(
                output=result.output,
                stop=stop_of(result),
                tool_returns=returns,
                refused=[tool for tool, _ in refusals_of(result)],
                model_responses=len(responses),
            )
        )
        run_ids.append(result.run_id)
        history = result.all_messages()
    return scenario.ConversationReport(turns=turns, run_ids=run_ids)


@workflow.defn(name=scenario.WORKFLOW_NAME)
class GuardedParcelConversation(PydanticAIWorkflow):
    """The guarded conversation: the agent above, for each prompt of the input."""

    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, request: scenario.ConversationRequest) -> scenario.ConversationReport:
        return await run_conversation(agent, request)


skewed_agent: Agent[None, str] = Agent(
    LedgerModel(respond),
    name=scenario.AGENT_NAME,
    instructions="Track the user's parcels with track_parcel and say where they are.",
    tools=[track_parcel],
    capabilities=[
        RepeatGuard(Policy(**{**scenario.POLICY, "max_calls": scenario.POLICY["max_calls"] + 1})),
        TemporalDurability(activity_config=ACTIVITIES),
    ],
)


@workflow.defn(name=scenario.WORKFLOW_NAME)
class SkewedGuardedParcelConversation(PydanticAIWorkflow):
    """TEST ONLY: the same workflow type with a guard that allows one more call.

    Stands for a guard that decides differently on replay (other settings on another worker, a wall
    clock, state from outside the history): replaying a real history with it must fail.
    """

    __pydantic_ai_agents__ = (skewed_agent,)

    @workflow.run
    async def run(self, request: scenario.ConversationRequest) -> scenario.ConversationReport:
        return await run_conversation(skewed_agent, request)


structured_agent: Agent[None, scenario.Delivery] = Agent(
    LedgerModel(respond),
    name="parcel_lookup",
    output_type=scenario.Delivery,
    tools=[track_parcel],
    capabilities=[RepeatGuard(Policy(**scenario.POLICY)), TemporalDurability(activity_config=ACTIVITIES)],
)


@workflow.defn(name=scenario.STRUCTURED_WORKFLOW_NAME)
class StructuredParcelLookup(PydanticAIWorkflow):
    """A structured-output agent the guard stops: ``RepeatGuardStopped`` caught in the workflow, or not."""

    __pydantic_ai_agents__ = (structured_agent,)

    @workflow.run
    async def run(self, request: scenario.LookupRequest) -> scenario.LookupReport:
        if not request.catch:
            await structured_agent.run(scenario.PROMPTS[0])
            raise AssertionError("the guard should have stopped the run")
        try:
            await structured_agent.run(scenario.PROMPTS[0])
        except RepeatGuardStopped as stopped:
            return scenario.LookupReport(stop=stopped.stop, messages=len(stopped.messages))
        raise AssertionError("the guard should have stopped the run")


@workflow.defn(name=scenario.CONTINUED_WORKFLOW_NAME)
class ContinuedParcelConversation(PydanticAIWorkflow):
    """One turn cut by ``continue_as_new``: the first workflow run pauses the agent after
    ``pause_after`` tool steps (at a ``CallToolsNode``: the history holds every response and the results
    before it) and continues as new with the history; the next resumes it (``message_history=``, no new
    prompt), so the guard continues the same turn, its counts rebuilt from the history."""

    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, request: scenario.ContinuedRequest) -> scenario.ContinuedReport:
        if request.messages is None:
            steps = 0
            async with agent.iter(scenario.PROMPTS[0]) as run:
                async for node in run:
                    if isinstance(node, CallToolsNode):
                        steps += 1
                        if steps == request.pause_after:
                            break
                messages = run.all_messages()
                run_id = run.run_id
            workflow.continue_as_new(
                scenario.ContinuedRequest(pause_after=request.pause_after, messages=messages, run_ids=[run_id])
            )
        result = await agent.run(message_history=request.messages)
        history = result.all_messages()
        return scenario.ContinuedReport(
            output=result.output,
            stop=stop_of(result),
            refused=[tool for tool, _ in refusals_of(history)],
            model_responses=sum(1 for m in history if isinstance(m, ModelResponse) and m.model_name != "repeat-hooks"),
            run_ids=[*request.run_ids, result.run_id],
        )
