"""The conformance kit on LlamaIndex's real FunctionAgent loop: every scenario the SDK can express (``UNSUPPORTED``
says why for the rest, and ``test_unsupported_facts`` shows the SDK's own behaviour), and the retried turn in two
processes sharing a SQLiteStore."""

from __future__ import annotations

from pathlib import Path

import pytest
from repeat_hooks_llama_index.testing import UNSUPPORTED, Driver

from repeat_hooks.kit.conformance import RETRIED, SCENARIOS, ToolBox, check, check_retried, run_retried

ADAPTER = Path(__file__).resolve().parents[3] / "adapters" / "llama_index" / "src"


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.name not in UNSUPPORTED], ids=lambda s: s.name)
def test_conformance(scenario) -> None:  # type: ignore[no-untyped-def]
    box = ToolBox(scenario)
    check(scenario, box, Driver().run(scenario, box))


def test_a_turn_retried_in_another_process_runs_no_write_again(tmp_path: Path) -> None:
    code, outcome, box = run_retried("repeat_hooks_llama_index.testing:Driver", RETRIED, tmp_path, path=[str(ADAPTER)])
    check_retried(RETRIED, code, outcome, box)


def test_every_unsupported_scenario_exists() -> None:
    assert set(UNSUPPORTED) <= {scenario.name for scenario in SCENARIOS}


async def test_the_sdk_ends_a_run_at_the_first_text_answer() -> None:
    """Why the rounds scenarios are unsupported: nothing in LlamaIndex runs the agent again within one run."""
    from llama_index.core.agent.workflow import FunctionAgent
    from repeat_hooks_llama_index.testing import Script, call

    script = Script("First answer.", [call("track_parcel", {"query": "FR-7731"})], "Second answer.")

    async def track_parcel(query: str) -> str:
        """Where the parcel is now."""
        return "in transit"

    output = await FunctionAgent(llm=script.llm(), tools=[track_parcel], streaming=False).run(user_msg="Track")

    assert output.response.content == "First answer." and script.calls == 1


async def test_the_sdk_runs_one_agent_at_a_time() -> None:
    """Why isolated branches are unsupported: two handoffs in one response leave one current agent."""
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from repeat_hooks_llama_index.testing import Script, call

    scripts = {name: Script(f"{name} answers.") for name in ("a", "b")}
    both = [call("handoff", {"to_agent": name, "reason": "split"}) for name in ("a", "b")]
    router = Script(both)
    agents = [FunctionAgent(name="router", description="Routes.", llm=router.llm(), streaming=False)] + [
        FunctionAgent(name=name, description=f"Agent {name}.", llm=script.llm(), streaming=False)
        for name, script in scripts.items()
    ]

    output = await AgentWorkflow(agents=agents, root_agent="router").run(user_msg="Ask both")

    assert sorted(script.calls for script in scripts.values()) == [0, 1]  # one of them ran, never both
    assert output.current_agent_name in scripts
