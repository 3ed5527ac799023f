"""Mistakes fail loudly, with the right spelling in the message: at ``guard_agent`` when it can see them, else at
the first model or tool call that meets them (issues 12 and 15).

Each test has the mistake in it and, past construction, runs the real Runner: settings given wrongly, a budget
nothing feeds, a tool name that matches no tool, one conversation's state shared by two concurrent runs, agent
hooks replaced after guarding, a 0.1-style context, a RunState restored with the SDK's default context handling.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    AgentHooks,
    CodeInterpreterTool,
    FileSearchTool,
    Runner,
    RunState,
    ShellTool,
    WebSearchTool,
    function_tool,
)
from agents.mcp import MCPServerStdio
from openai.types.responses import ResponseFunctionWebSearch
from openai.types.responses.response_function_web_search import ActionSearch
from repeat_hooks_openai_agents import (
    GuardSetupError,
    GuardState,
    Policy,
    TokenPrices,
    context_deserializer,
    context_serializer,
    guard_agent,
)
from repeat_hooks_openai_agents.guard import MissingGuard
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling, message, tool_call

import repeat_hooks
from repeat_hooks import StopRepeatedCalls

ARGS = {"tracking_number": "FR-7731"}
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
SEED_004: dict[str, Any] = {"count": "per_turn", "match": "tool", "max_calls": 2, "max_refusals": 3}


def guarded(model: ScriptedModel, carrier: Any, **settings: Any) -> Agent[Any]:
    return guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool]), **(settings or SEED_004))


# -- settings given wrongly ------------------------------------------------------------------------------


def test_settings_are_a_policy_or_keywords(carrier: Any) -> None:
    agent = Agent(name="parcel-tracker", tools=[carrier.tool])

    with pytest.raises(TypeError, match=r"not a StopRepeatedCalls.*: guard_agent\(agent, Policy\(\.\.\.\)\)"):
        guard_agent(agent, StopRepeatedCalls(policy=Policy(max_calls=2)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"not the class Policy: pass guard_agent\(agent, Policy\(\.\.\.\)\)"):
        guard_agent(agent, Policy)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unknown setting 'max_call' \(did you mean max_calls\?\)"):
        guard_agent(agent, max_call=2)
    with pytest.raises(TypeError, match=r"not both"):
        guard_agent(agent, Policy(), max_calls=2)

    assert guard_agent(agent).hooks.policy == Policy()  # type: ignore[union-attr]
    assert guard_agent(agent, Policy(max_calls=4)).hooks.policy.max_calls == 4  # type: ignore[union-attr]


# -- a budget nothing feeds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"max_model_seconds": 30.0, "clock": None},
            r"max_model_seconds=.*guard_agent\(\.\.\., clock=repeat_hooks.kit.monotonic\)",
        ),
        ({"max_cost_usd": 0.5}, r"max_cost_usd=.*guard_agent\(\.\.\., cost=TokenPrices\("),
        ({"max_same_answers": 3}, r"max_same_answers=.*cannot feed answers \(a text answer ends the run"),
    ],
)
def test_a_budget_without_what_feeds_it_is_refused_at_construction(
    carrier: Any, settings: dict[str, Any], expected: str
) -> None:
    with pytest.raises(GuardSetupError, match=expected) as caught:
        guard_agent(Agent(name="parcel-tracker", tools=[carrier.tool]), **settings)
    assert isinstance(caught.value, repeat_hooks.GuardSetupError)  # the core's, and the SDK's UserError


async def test_the_same_budgets_with_their_feeds_run(carrier: Any) -> None:
    ticks = itertools.count(step=1.0)
    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In Lyon.")])
    agent = guarded(
        model,
        carrier,
        max_model_seconds=30.0,
        max_cost_usd=0.5,
        clock=lambda: float(next(ticks)),
        cost=TokenPrices(2.0, 8.0),
    )
    state = GuardState()

    result = await Runner.run(agent, "Where?", context=state)

    assert result.final_output == "In Lyon."
    assert state.turn.model_seconds == 2.0 and state.turn.cost_usd > 0


async def test_a_cost_budget_with_a_model_that_reports_no_usage_is_refused_at_its_first_response(
    carrier: Any,
) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS), reports_usage=False)  # some providers do this
    agent = guarded(model, carrier, max_cost_usd=0.5, cost=TokenPrices(2, 8))

    with pytest.raises(GuardSetupError, match=r"max_cost_usd=0.5 can never trip.*reported no token usage"):
        await Runner.run(agent, "Track", context=GuardState())
    assert model.calls == 1 and carrier.calls == []  # its tool call never ran


# -- a tool name that matches no tool ---------------------------------------------------------------------------


async def test_a_tool_name_in_the_policy_that_matches_no_tool_fails_at_the_first_model_call(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guarded(model, carrier, limits={"track_parcels": 1})  # the mistake: a typo

    with pytest.raises(GuardSetupError, match=r"limits=.*'track_parcels'.*did you mean 'track_parcel'"):
        await Runner.run(agent, "Track", context=GuardState())
    assert model.calls == 0 and carrier.calls == []


SERVER = textwrap.dedent(
    """
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("carrier")

    @server.tool()
    def list_hubs() -> str:
        "The carrier's hubs."
        return "Lyon, Paris"

    server.run("stdio")
    """
)


async def test_a_tool_name_of_a_handoff_target_or_an_mcp_server_is_known(carrier: Any, tmp_path: Path) -> None:
    script = tmp_path / "hubs_server.py"
    script.write_text(SERVER)
    server = MCPServerStdio(
        params={"command": sys.executable, "args": [str(script)]}, client_session_timeout_seconds=20
    )

    @function_tool
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    async with server:
        model = ScriptedModel([tool_call("list_hubs", {}, "h1")], [message("Lyon and Paris.")])
        specialist = Agent(name="specialist", tools=[refund])
        agent = guard_agent(
            Agent(name="desk", model=model, tools=[carrier.tool], mcp_servers=[server], handoffs=[specialist]),
            read_only={"list_hubs"},
            limits={"refund": 1},
        )
        result = await Runner.run(agent, "Which hubs?", context=GuardState())

    assert result.final_output == "Lyon and Paris."


def _web_search(n: int, model: Any) -> list[Any]:
    """A response holding one hosted web search call (it ran at OpenAI: the SDK only reports it)."""
    action = ActionSearch(type="search", query="FR-7731")
    return [ResponseFunctionWebSearch(id=f"ws_{n}", status="completed", type="web_search_call", action=action)]


HOSTED: dict[str, Any] = {
    "web_search": WebSearchTool(),
    "file_search": FileSearchTool(vector_store_ids=["vs_parcels"]),
    "code_interpreter": CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": {"type": "auto"}}),
}


@pytest.mark.parametrize("setting", ["limits", "exempt", "read_only", "destructive"])
@pytest.mark.parametrize("name", HOSTED)
async def test_a_policy_naming_a_hosted_tool_fails_at_guard_agent(carrier: Any, name: str, setting: str) -> None:
    """Hosted tools run on OpenAI's servers: no guardrail sees their calls, so a limit on one would never hold."""
    model = ScriptedModel(_web_search, _web_search, _web_search, _web_search, [message("Searched.")])
    value: Any = {name: 0} if setting == "limits" else {name}

    with pytest.raises(GuardSetupError) as raised:
        agent = guard_agent(
            Agent(name="researcher", model=model, tools=[carrier.tool, HOSTED[name]]), **{setting: value}
        )
        await Runner.run(agent, "Where is FR-7731?", context=GuardState())

    text = str(raised.value)
    assert f"Policy({setting}=...) names {name!r}, a hosted tool" in text
    assert "run on OpenAI's servers" in text and "can neither count nor refuse" in text
    assert "max_tool_calls" in text and "@function_tool" in text  # what to do instead
    assert model.calls == 0  # before the fix: four searches ran, none refused


async def test_a_hosted_tool_fails_with_check_tools_false_and_passes_when_the_policy_does_not_name_it(
    carrier: Any,
) -> None:
    with pytest.raises(GuardSetupError, match=r"names 'web_search', a hosted tool"):
        guard_agent(Agent(name="researcher", tools=[WebSearchTool()]), limits={"web_search": 1}, check_tools=False)

    model = ScriptedModel(_web_search, [tool_call("track_parcel", ARGS, "c1")], [message("In transit.")])
    agent = guard_agent(
        Agent(name="researcher", model=model, tools=[WebSearchTool(), carrier.tool]), limits={"track_parcel": 1}
    )
    result = await Runner.run(agent, "Where is FR-7731?", context=GuardState())
    assert result.final_output == "In transit." and carrier.calls == ["FR-7731"]


async def test_a_policy_naming_a_local_tool_without_guardrails_fails_at_guard_agent(carrier: Any) -> None:
    """Shell, apply_patch, computer and custom tools run here, but the SDK gives them no tool guardrails."""

    def run_shell(request: Any) -> str:
        return "ok"

    shell = ShellTool(executor=run_shell)
    with pytest.raises(GuardSetupError) as raised:
        guard_agent(Agent(name="operator", tools=[carrier.tool, shell]), destructive={"shell"})
    text = str(raised.value)
    assert "names 'shell', a ShellTool" in text and "no tool guardrails" in text and "needs_approval" in text


# -- one state, two concurrent runs ---------------------------------------------------------------------------


async def test_one_state_shared_by_two_concurrent_runs_fails_one_of_them() -> None:
    reached: list[str] = []

    @function_tool
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        reached.append(tracking_number)
        await asyncio.sleep(0.002)
        return f"{tracking_number}: in transit"

    def agent_for(parcel: str) -> Agent[Any]:
        model = ScriptedModel(then=keep_calling("track_parcel", {"tracking_number": parcel}))
        return guard_agent(Agent(name="parcel-tracker", model=model, tools=[track_parcel]), **SEED_004)

    state = GuardState()  # the mistake: a double-sent message runs twice on one conversation's state
    outcomes = await asyncio.gather(
        Runner.run(agent_for("A"), "Keep checking A", context=state),
        Runner.run(agent_for("B"), "Keep checking B", context=state),
        return_exceptions=True,
    )

    errors = [o for o in outcomes if isinstance(o, BaseException)]
    finished = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], GuardSetupError)
    assert "one GuardState per conversation" in str(errors[0])
    # The run that kept the state kept exact counts: 2 calls reached the tool, 3 refusals, then the stop.
    (survivor,) = finished
    assert survivor.final_output == STOPPED
    parcel = "A" if outcomes[0] is survivor else "B"
    assert reached.count(parcel) == 2
    assert state.turn.refusals == 3
    assert state.turn.number == 2


async def test_sequential_runs_on_one_state_are_fine(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))
    agent = guarded(model, carrier)
    state = GuardState()

    for _ in range(3):
        result = await Runner.run(agent, "Keep checking", context=state)
        assert result.final_output == STOPPED

    assert state.turn.number == 3 and carrier.calls == ["FR-7731"] * 6


# -- agent hooks replaced after guarding, a guarded tool in an unguarded agent ------------------------------------


async def test_your_agent_hooks_still_fire_and_replacing_them_fails_at_the_first_tool_call(carrier: Any) -> None:
    seen: list[str] = []

    class Mine(AgentHooks[Any]):
        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            seen.append("llm_start")

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            seen.append(f"tool_end {result}")

    model = ScriptedModel([tool_call("track_parcel", ARGS, "c1")], [message("In Lyon.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool], hooks=Mine()))
    result = await Runner.run(agent, "Where is FR-7731?", context=GuardState())
    assert result.final_output == "In Lyon."
    assert seen == ["llm_start", "tool_end FR-7731: in transit, hub Lyon", "llm_start"]

    # The mistake: the guard's hooks replaced after guarding. The tool guardrail catches it before the tool runs.
    bare = agent.clone(hooks=Mine(), model=ScriptedModel(then=keep_calling("track_parcel", ARGS)))
    with pytest.raises(GuardSetupError, match=r"never started a turn.*guard_agent\(Agent\(\.\.\., hooks=yours\)\)"):
        await Runner.run(bare, "Keep checking", context=GuardState())
    assert carrier.calls == ["FR-7731"]


async def test_a_guarded_tool_moved_into_an_unguarded_agent_fails_before_it_runs(carrier: Any) -> None:
    guarded_tool = guard_agent(Agent(name="parcel-tracker", tools=[carrier.tool])).tools[0]
    plain = Agent(name="other", model=ScriptedModel(then=keep_calling("track_parcel", ARGS)), tools=[guarded_tool])

    with pytest.raises(GuardSetupError, match="never started a turn"):
        await Runner.run(plain, "Keep checking", context=GuardState())
    assert carrier.calls == []


# -- the context: 0.1's guard, a RunState restored without context_deserializer ---------------------------------


async def test_a_context_holding_a_0_1_guard_says_where_the_settings_go_now(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))

    with pytest.raises(MissingGuard, match=r"StopRepeatedCalls \(repeat-hooks 0.1\).*context=GuardState\(\)"):
        await Runner.run(guarded(model, carrier), "Track", context=StopRepeatedCalls(policy=Policy(max_calls=2)))
    assert model.calls == 0


async def test_a_state_restored_without_context_deserializer_says_to_pass_it(carrier: Any) -> None:
    notified: list[str] = []

    @function_tool(needs_approval=True)
    def notify_customer(text: str) -> str:
        """Tell the customer (needs a human's approval)."""
        notified.append(text)
        return "notified"

    model = ScriptedModel([tool_call("notify_customer", {"text": "Still looking"}, "c1")], [message("Done.")])
    agent = guard_agent(Agent(name="parcel-tracker", model=model, tools=[carrier.tool, notify_customer]))
    paused = await Runner.run(agent, "Tell them", context=GuardState())
    saved = paused.to_state().to_json(context_serializer=context_serializer)

    state = await RunState.from_json(agent, saved)  # the mistake: the SDK's default leaves the context a dict
    for item in state.get_interruptions():
        state.approve(item)
    with pytest.raises(MissingGuard, match=r"context_deserializer=context_deserializer"):
        await Runner.run(agent, state)
    assert notified == []  # the approved call did not run unguarded

    state = await RunState.from_json(agent, saved, context_deserializer=context_deserializer)
    for item in state.get_interruptions():
        state.approve(item)
    resumed = await Runner.run(agent, state)
    assert notified == ["Still looking"] and resumed.final_output == "Done."


def test_the_names_0_3_took_out_of_the_front_door_warn_and_still_work() -> None:
    import repeat_hooks_openai_agents as package
    from repeat_hooks_openai_agents import calls, guard, state

    for name, home in [
        ("MissingGuard", guard),
        ("EndTurn", guard),
        ("RefuseRepeats", guard),
        ("RecordOutcome", guard),
        ("AskUnlessRefused", guard),
        ("require_state", guard),
        ("find_state", state),
        ("GUARD_ATTRIBUTE", state),
        ("model_view", calls),
        ("is_sdk_error", calls),
    ]:
        with pytest.warns(DeprecationWarning, match=rf"repeat_hooks_openai_agents\.{name} is deprecated: use "):
            assert getattr(package, name) is getattr(home, name)
    with pytest.raises(AttributeError, match="McpHints is gone: hints travel on ToolCall"):
        package.McpHints  # noqa: B018
    assert len(package.__all__) <= 14
