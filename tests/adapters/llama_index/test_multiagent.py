"""``AgentWorkflow``: ``guard.workflow(...)`` guards every agent; each agent counts its own calls (a handoff carries
no counts over), one run of the workflow is one turn, and a stop in any agent ends the whole workflow run with the
stop message (its ``take_step`` output becomes the workflow's ``StopEvent``, multi_agent_workflow.py:571-628). The
handoff tool the workflow adds (multi_agent_workflow.py:73,245) is not wrapped: never refused, never counted."""

from __future__ import annotations

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from repeat_hooks_llama_index import RepeatGuard, StopReason, stop_of
from repeat_hooks_llama_index.testing import Script, call, keep_calling, tool_results

from .conftest import ARGS, SEED_004, STOPPED, Carrier


def workflow(carrier: Carrier, router: Script, specialist: Script, guard: RepeatGuard) -> AgentWorkflow:
    agents = [
        FunctionAgent(
            name="router",
            description="Routes requests.",
            llm=router.llm(),
            tools=[carrier.tool],
            can_handoff_to=["specialist"],
            streaming=False,
        ),
        FunctionAgent(
            name="specialist",
            description="Tracks parcels.",
            llm=specialist.llm(),
            tools=[carrier.tool],
            streaming=False,
        ),
    ]
    return guard.workflow(AgentWorkflow(agents=agents, root_agent="router"))


async def test_each_agent_counts_apart_and_a_stop_in_the_specialist_ends_the_workflow(carrier: Carrier) -> None:
    track = [call("track_parcel", ARGS)]
    handoff = [call("handoff", {"to_agent": "specialist", "reason": "parcel question"})]
    router = Script(track, track, handoff, "Router's answer.")
    specialist = Script(then=keep_calling("track_parcel", ARGS))

    output = await workflow(carrier, router, specialist, RepeatGuard(SEED_004)).run(user_msg="Keep checking FR-7731")

    assert carrier.calls == ["FR-7731"] * 4  # 2 by the router, 2 more by the specialist: counted per agent
    assert router.calls == 3 and specialist.calls == 5  # nothing ran after the specialist's stop
    assert output.response.content == STOPPED and output.current_agent_name == "specialist"
    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


async def test_the_handoff_tool_is_never_refused(carrier: Carrier) -> None:
    nowhere = [call("handoff", {"to_agent": "nobody", "reason": "lost"})]
    router = Script(nowhere, nowhere, nowhere, "Router's answer.")

    handler = workflow(carrier, router, Script(), RepeatGuard()).run(user_msg="Where is FR-7731?")
    output = await handler

    seen = await tool_results(handler.ctx)
    assert len(seen) == 3 and all(text.startswith("Agent nobody not found") for text in seen)  # the SDK's own text
    assert output.response.content == "Router's answer." and stop_of(output) is None


def test_guard_workflow_keeps_the_workflows_settings(carrier: Carrier) -> None:
    original = AgentWorkflow(
        agents=[FunctionAgent(name="solo", description="Alone.", llm=Script().llm(), tools=[carrier.tool])],
        initial_state={"customer": "c-1"},
        early_stopping_method="generate",
        timeout=42,
    )

    guarded = RepeatGuard().workflow(original)

    assert guarded is not original and guarded.root_agent == "solo" and guarded.initial_state == {"customer": "c-1"}
    assert guarded.early_stopping_method == "generate" and guarded._timeout == 42
    assert type(guarded.agents["solo"]).__name__ == "GuardedFunctionAgent"
