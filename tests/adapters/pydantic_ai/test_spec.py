"""``RepeatGuard`` loads where pydantic-ai loads its own capabilities: agent specs (``Agent.from_spec``,
``Agent.from_file``), with ``custom_capability_types=[RepeatGuard]`` (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pai_parcels import Carrier
from pydantic_ai import Agent
from repeat_hooks_pydantic_ai import GuardSetupError, RepeatGuard, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, keep_calling

from repeat_hooks import Policy, StopReason, TokenPrices

STUCK = keep_calling("track_parcel", {"parcel_id": "FR-7731"})


def guard_of(agent: Agent[object, str]) -> RepeatGuard:
    found: list[RepeatGuard] = []
    agent.root_capability.apply(lambda c: found.append(c) if isinstance(c, RepeatGuard) else None)
    assert len(found) == 1
    return found[0]


def test_the_settings_as_keywords_in_a_spec_run_the_seed_004_story(carrier: Carrier) -> None:
    spec = {"capabilities": [{"RepeatGuard": {"match": "tool", "max_calls": 2, "max_refusals": 3}}]}
    model = ScriptedModel(STUCK)
    agent = Agent.from_spec(spec, custom_capability_types=[RepeatGuard], model=model, tools=[carrier.tool])
    assert guard_of(agent).policy == Policy(match="tool", max_calls=2, max_refusals=3)
    result = agent.run_sync("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5


def test_a_bare_name_is_the_default_policy() -> None:
    agent = Agent.from_spec({"capabilities": ["RepeatGuard"]}, custom_capability_types=[RepeatGuard], model="test")
    assert guard_of(agent).policy == Policy()


def test_a_policy_mapping_a_cost_and_on_stop() -> None:
    spec = {
        "capabilities": [
            {
                "RepeatGuard": {
                    "policy": {"max_cost_usd": 0.5, "limits": {"refund": 1}},
                    "cost": {"input_usd_per_million": 3, "output_usd_per_million": 15},
                    "on_stop": "raise",
                }
            }
        ]
    }
    guard = guard_of(Agent.from_spec(spec, custom_capability_types=[RepeatGuard], model="test"))
    assert guard.policy == Policy(max_cost_usd=0.5, limits={"refund": 1})
    assert guard.core.cost == TokenPrices(3, 15)
    assert guard.core.on_stop == "raise"


def test_a_yaml_agent_file(tmp_path: Path, carrier: Carrier) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("capabilities:\n  - RepeatGuard: {match: tool, max_calls: 2, max_refusals: 3, on_stop: raise}\n")
    agent = Agent.from_file(path, custom_capability_types=[RepeatGuard], model=ScriptedModel(STUCK))
    assert guard_of(agent).core.on_stop == "raise"
    assert guard_of(agent).policy.max_refusals == 3


def test_a_misspelt_setting_in_a_spec_fails_naming_the_right_one() -> None:
    spec = {"capabilities": [{"RepeatGuard": {"max_refusal": 3}}]}
    with pytest.raises(
        ValueError, match=r"RepeatGuard got an unknown setting 'max_refusal' \(did you mean max_refusals\?\)"
    ):
        Agent.from_spec(spec, custom_capability_types=[RepeatGuard], model="test")


def test_a_budget_nothing_feeds_fails_in_a_spec_too() -> None:
    spec = {"capabilities": [{"RepeatGuard": {"max_cost_usd": 0.5}}]}
    with pytest.raises(ValueError, match=r"max_cost_usd=\.\.\.\) could never trip.*cost=TokenPrices"):
        Agent.from_spec(spec, custom_capability_types=[RepeatGuard], model="test")


def test_the_same_answer_rule_is_refused_since_each_run_ends_at_its_answer() -> None:
    with pytest.raises(GuardSetupError, match=r"max_same_answers=\.\.\.\) could never trip.*first final result"):
        RepeatGuard(max_same_answers=3)


def test_without_custom_capability_types_pydantic_ai_says_so() -> None:
    with pytest.raises(ValueError, match="custom_capability_types"):
        Agent.from_spec({"capabilities": ["RepeatGuard"]}, model="test")
