"""Invalid configuration fails at construction, with an error that names the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from repeat_hooks import MemoryStore, Policy, StopReason, StopRepeatedCalls


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_calls": -1}, "max_calls"),
        ({"max_refusals": -2}, "max_refusals"),
        ({"max_model_calls": 0}, "max_model_calls"),
        ({"max_model_seconds": 0}, "max_model_seconds"),
        ({"max_cost_usd": -0.01}, "max_cost_usd"),
        ({"max_errors_in_a_row": 0}, "max_errors_in_a_row"),
        ({"window": 0}, "window"),
        ({"max_keys": 0}, "max_keys"),
        ({"match": "arguments"}, "match"),
        ({"limits": {"place_order": -1}}, "limits"),
        ({"refusal_message": "stop calling {tool} with {arguments}"}, "refusal_message"),
        ({"refusal_message": "unbalanced {tool"}, "refusal_message"),
        ({"stop_messages": {"time": "{seconds} spent"}}, "stop_messages"),
        ({"stop_messages": {"bored": "done"}}, "stop_messages"),
        ({"max_call": 3}, "max_call"),
    ],
)
def test_invalid_settings_name_the_field(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as error:
        StopRepeatedCalls(**settings)
    assert field in str(error.value)


def test_a_window_no_limit_can_fill_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"window \(3\) must be larger than every call limit \(3\)"):
        Policy(window=3, max_calls=3)
    with pytest.raises(ValidationError, match="window"):
        Policy(window=4, max_calls=2, limits={"search": 5})


def test_settings_are_frozen() -> None:
    policy = Policy()
    with pytest.raises(ValidationError):
        policy.max_calls = 5  # type: ignore[misc]


def test_memory_store_rejects_an_empty_bound() -> None:
    with pytest.raises(ValueError, match="max_sessions"):
        MemoryStore(max_sessions=0)


def test_defaults_are_the_argument_aware_guard() -> None:
    policy = Policy()
    assert (policy.match, policy.max_calls, policy.max_refusals, policy.count_failures) == (
        "tool_and_arguments",
        2,
        3,
        True,
    )


def test_a_template_with_an_unknown_placeholder_names_it_and_the_allowed_ones() -> None:
    with pytest.raises(ValidationError) as raised:
        Policy(refusal_message="{tool} {who} {why}")
    assert "uses {who}, {why}; a template may use only {tool}, {count} and {limit}" in str(raised.value)
    with pytest.raises(ValidationError, match="is not a valid template"):
        Policy(stop_messages={StopReason.COST: "{tool"})


def test_a_stop_without_a_tool_reads_a_tool_in_custom_texts() -> None:
    guard = StopRepeatedCalls(max_model_calls=1, stop_messages={StopReason.MAX_STEPS: "{tool} hit {limit} at {count}"})
    guard.post_llm_call()
    stop = guard.pre_llm_call()
    assert stop is not None and stop.message == "a tool hit 1 at 1"
