"""The README blocks of the OpenAI adapter (its own README, and its section of the root README) run as written,
a scripted model at the SDK's model seam (``Model``) in place of OpenAI's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Runner
from readme_blocks import Blocks
from repeat_hooks_openai_agents import GuardState, Policy, RepeatGuardStopped, StopReason
from repeat_hooks_openai_agents.testing import ScriptedModel, keep_calling

BLOCKS = Blocks.owned_by(__file__)
ARGS = {"tracking_number": "FR-7731"}
QUICK_START = "repeat-hooks-openai-agents"
SETTINGS = "repeat-hooks-openai-agents [2]"
STORE = "With a store: several processes, one conversation"
ROOT_SECTION = "OpenAI Agents SDK (`repeat-hooks-openai-agents`)"


def outputs_read(model: ScriptedModel) -> list[str]:
    """The tool outputs the model's last request carried, in order: results and refusals."""
    items = model.requests[-1].input
    return [
        str(item["output"]) for item in items if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


@BLOCKS.cover(QUICK_START, SETTINGS)
def test_the_quick_start_and_the_settings_run_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = BLOCKS.run(QUICK_START)

    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    model = namespace["model"]
    read = outputs_read(model)
    assert read[:2] == ["FR-7731: in transit"] * 2 and len(read) == 4  # 2 ran, then refusals: 5 model calls
    assert model.calls == 5

    BLOCKS.run(SETTINGS, namespace=namespace)

    agent = namespace["agent"]  # the last spelling: on_stop="raise"
    assert agent.hooks.policy == Policy()
    with pytest.raises(RepeatGuardStopped) as stopped:
        asyncio.run(Runner.run(agent, "Keep checking FR-7731", context=GuardState()))
    assert stopped.value.stop.reason is StopReason.IGNORED_REFUSALS


@BLOCKS.cover(QUICK_START, STORE)
def test_the_store_block_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = BLOCKS.run(QUICK_START)
    capsys.readouterr()

    BLOCKS.run(STORE, namespace=namespace)

    assert capsys.readouterr().out.startswith("I stopped: I kept calling track_parcel")
    state = asyncio.run(namespace["store"].load("chat-42/parcel-tracker"))  # the conversation, the agent
    assert state is not None and state.turn.id == "req-1" and state.turn.refusals == 3


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_with_a_scripted_model(carrier: Any) -> None:
    model = ScriptedModel(then=keep_calling("track_parcel", ARGS))

    namespace = BLOCKS.run(ROOT_SECTION, given={"model": model, "track_parcel": carrier.tool})

    assert carrier.calls == ["FR-7731"] * 2
    stop = namespace["stop_of"](namespace["result"])
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert namespace["result"].final_output == stop.message
    saved = asyncio.run(namespace["session"].get_items())
    assert saved[-1] == {"role": "assistant", "content": stop.message}  # save_stop


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
