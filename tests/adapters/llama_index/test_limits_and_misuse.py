"""How the guard combines with LlamaIndex's own max_iterations, and every misuse failing loudly with the right
spelling (each test has the mistake in it)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, CodeActAgent, FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import WorkflowRuntimeError
from repeat_hooks_llama_index import GuardSetupError, RepeatGuard, StopReason, stop_of
from repeat_hooks_llama_index.testing import Script, keep_calling

from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import ARGS, SEED_004, STOPPED, Carrier, looping_agent


async def test_without_a_stop_max_iterations_raises_as_it_does_unguarded(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(count="per_turn", max_calls=10))

    with pytest.raises(WorkflowRuntimeError, match="Max iterations of 4 reached"):
        await agent.run(user_msg="Keep checking FR-7731", max_iterations=4)

    assert script.calls == 4 and len(carrier.calls) == 3  # the SDK's limit, as without the guard


async def test_with_generate_the_sdks_last_model_call_answers(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(count="per_turn", max_calls=10))

    output = await agent.run(user_msg="Keep checking FR-7731", max_iterations=4, early_stopping_method="generate")

    assert script.calls == 5 and stop_of(output) is None  # one more model call, without tools: the SDK's answer


@pytest.mark.parametrize("method", ["force", "generate"])
async def test_the_guards_stop_at_the_last_iteration_wins(carrier: Carrier, method: str) -> None:
    agent, script = looping_agent(carrier)  # seed 004: the stop is the 6th step

    output = await agent.run(user_msg="Keep checking FR-7731", max_iterations=6, early_stopping_method=method)

    assert output.response.content == STOPPED and script.calls == 5  # no error, no model call after the stop
    stop = stop_of(output)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS


def test_a_codeact_agent_is_refused_with_the_reason(carrier: Carrier) -> None:
    agent = CodeActAgent(code_execute_fn=lambda code: {"output": ""}, llm=Script().llm(), tools=[carrier.tool])

    with pytest.raises(GuardSetupError, match=r"not CodeActAgent: CodeActAgent runs your tools inside the code"):
        RepeatGuard().agent(agent)


def test_a_workflow_given_as_an_agent_names_guard_workflow(carrier: Carrier) -> None:
    workflow = AgentWorkflow(agents=[FunctionAgent(llm=Script().llm(), tools=[carrier.tool])])

    with pytest.raises(GuardSetupError, match=r"guard\.workflow\(workflow\)"):
        RepeatGuard().agent(workflow)  # type: ignore[type-var]


def test_guarding_a_guarded_agent_again_is_refused(carrier: Carrier) -> None:
    agent, _ = looping_agent(carrier)

    with pytest.raises(GuardSetupError, match="guarded already"):
        RepeatGuard().agent(agent)


async def test_a_tool_added_after_guarding_fails_the_first_step_naming_it(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier)

    async def lookup_address(tracking_number: str) -> str:
        """The parcel's address."""
        return "12 Rue du Port"

    agent.tools = [*(agent.tools or []), FunctionTool.from_defaults(async_fn=lookup_address)]  # the mistake

    with pytest.raises(GuardSetupError, match=r"does not wrap: lookup_address.*guard\.tool\(tool, agent\.name\)"):
        await agent.run(user_msg="Where is FR-7731?")
    assert script.calls == 0 and carrier.calls == []


async def test_a_policy_naming_a_tool_the_agent_lacks_fails_the_first_step(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(read_only={"track_parcels"}))

    with pytest.raises(GuardSetupError, match=r"names 'track_parcels'.*did you mean 'track_parcel'"):
        await agent.run(user_msg="Where is FR-7731?")
    assert script.calls == 0


def test_misspelt_keywords_and_budgets_nothing_feeds_are_refused_at_setup() -> None:
    with pytest.raises(TypeError, match=r"did you mean store="):
        RepeatGuard(stor=SQLiteStore(":memory:"))
    with pytest.raises(GuardSetupError, match="max_same_answers"):
        RepeatGuard(max_same_answers=3)
    with pytest.raises(GuardSetupError, match="cost=TokenPrices"):
        RepeatGuard(max_cost_usd=1.0)


async def test_a_store_without_a_conversation_id_says_how_to_name_one(carrier: Carrier, tmp_path: Path) -> None:
    agent, script = looping_agent(carrier, RepeatGuard(SEED_004, store=SQLiteStore(tmp_path / "g.db")))

    with pytest.raises(GuardSetupError, match=r"repeat_hooks\.kit\.request\(conversation_id="):
        await agent.run(user_msg="Where is FR-7731?")
    assert script.calls == 0


def test_a_tool_run_outside_a_guarded_run_says_so(carrier: Carrier) -> None:
    agent, _ = looping_agent(carrier)
    (tool,) = agent.tools or []

    with pytest.raises(GuardSetupError, match="runs only in an agent's run"):
        tool(**ARGS)  # type: ignore[operator]


def test_a_user_module_with_future_annotations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "future_tools.py").write_text(
        textwrap.dedent(
            '''
            from __future__ import annotations

            from llama_index.core.workflow import Context

            RAN: list[str] = []


            async def track_parcel(tracking_number: str) -> str:
                """Where the parcel is now."""
                RAN.append(tracking_number)
                return f"{tracking_number}: in transit"


            async def remember_parcel(ctx: Context, tracking_number: str) -> str:
                """Keeps the parcel in the run's state."""
                await ctx.store.set("parcel", tracking_number)
                return "kept"
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import future_tools  # type: ignore[import-not-found]

    script = Script(then=keep_calling("track_parcel", ARGS))
    agent = RepeatGuard(SEED_004).agent(FunctionAgent(llm=script.llm(), tools=[future_tools.track_parcel]))
    output = __import__("asyncio").run(_run(agent))
    assert future_tools.RAN == ["FR-7731"] * 2 and output == STOPPED  # the guard's own Context passing is unaffected

    with pytest.raises(GuardSetupError, match=r"takes ctx: Context.*from __future__ import annotations"):
        RepeatGuard().agent(FunctionAgent(llm=script.llm(), tools=[future_tools.remember_parcel]))
    sys.modules.pop("future_tools", None)


async def _run(agent: FunctionAgent) -> str:
    output = await agent.run(user_msg="Keep checking FR-7731")
    return str(output.response.content)


async def test_cost_prices_the_usage_the_provider_reports_and_the_budget_ends_the_run(carrier: Carrier) -> None:
    from typing import Any

    from llama_index.core.llms.mock import MockFunctionCallingLLM

    from repeat_hooks import TokenPrices

    class PricedLLM(MockFunctionCallingLLM):
        """The mock, its raw response carrying usage as OpenAI's integration keeps it (``raw["usage"]``)."""

        async def achat(self, messages: Any, **kwargs: Any) -> Any:
            response = await super().achat(messages, **kwargs)
            response.raw = {"usage": {"prompt_tokens": 1000, "completion_tokens": 100}}
            return response

    script = Script(then=keep_calling("track_parcel", ARGS))
    guard = RepeatGuard(count="per_turn", max_calls=10, max_cost_usd=0.01, cost=TokenPrices(3, 15))
    agent = guard.agent(FunctionAgent(llm=PricedLLM(response_generator=script), tools=[carrier.tool], streaming=False))

    output = await agent.run(user_msg="Keep checking FR-7731")

    stop = stop_of(output)  # each response 0.0045 US dollars: the 3rd passes 0.01, and no 4th model call is made
    assert stop is not None and stop.reason is StopReason.COST and script.calls == 3


TOOLS_OF_A_USER = '''
{future}
from typing import TYPE_CHECKING, Optional, Union

from pydantic import BaseModel
from llama_index.core.workflow import Context

if TYPE_CHECKING:
    import workflows as wf
    from shop.models import Basket  # a name this module cannot resolve at run time


class SearchContext(BaseModel):
    topic: str


async def search(query: str, search_context: SearchContext) -> str:
    """Searches within a context the model fills in."""
    return query


async def fill(query: str, basket: "Basket") -> str:
    """Fills the basket (its annotation cannot be resolved, and names no Context)."""
    return query


async def optional_ctx(ctx: Optional[Context], query: str) -> str:
    """Takes the run's Context, maybe."""
    return query


async def union_ctx(query: str, ctx: Context | None = None) -> str:
    """Takes the run's Context, maybe."""
    return query


async def unresolved_ctx(query: str, ctx: "Union[wf.Context, None]", basket: "Basket") -> str:
    """Takes the run's Context, by a name that cannot be resolved."""
    return query
'''


@pytest.mark.parametrize("future", ["", "from __future__ import annotations"], ids=["plain", "future"])
def test_a_context_parameter_llamaindex_cannot_see_is_refused_and_a_lookalike_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, future: str
) -> None:
    name = f"user_tools_{bool(future)}"
    (tmp_path / f"{name}.py").write_text(TOOLS_OF_A_USER.format(future=future))
    monkeypatch.syspath_prepend(str(tmp_path))
    tools = __import__(name)
    llm = Script().llm()

    RepeatGuard().agent(FunctionAgent(llm=llm, tools=[tools.fill]))  # unresolvable, and no Context: guarded
    (guarded,) = RepeatGuard().agent(FunctionAgent(llm=llm, tools=[tools.search])).tools or []
    assert "search_context" in guarded.metadata.fn_schema.model_fields  # the model fills it in, as unguarded
    # (in a plain module, LlamaIndex itself fails on `ctx: Optional[Context]`: no schema for Context)
    for hidden in (tools.optional_ctx, tools.union_ctx, tools.unresolved_ctx) if future else (tools.unresolved_ctx,):
        with pytest.raises(GuardSetupError, match=r"takes ctx: .*Context.*does not see as the run's Context"):
            RepeatGuard().agent(FunctionAgent(llm=llm, tools=[hidden]))
    sys.modules.pop(name, None)


async def test_an_unwrapped_tool_of_the_users_named_handoff_is_caught(carrier: Carrier) -> None:
    agent, script = looping_agent(carrier)

    async def handoff(to_agent: str) -> str:
        """The user's own handoff, not the workflow's."""
        return "handed"

    agent.tools = [*(agent.tools or []), FunctionTool.from_defaults(async_fn=handoff)]  # the mistake

    with pytest.raises(GuardSetupError, match=r"does not wrap: handoff"):
        await agent.run(user_msg="Where is FR-7731?")
    assert script.calls == 0
