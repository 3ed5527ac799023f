"""The README blocks of the Claude Agent SDK adapter (its quick start; its section of the root README) run as
written, Claude swapped for the scripted fake Messages API (the CLI reads ANTHROPIC_BASE_URL from the
environment; no key, no network here)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from cas_parcels import REFUSAL, SEED_004, allowed, call, carrier, keep_calling, scripted
from claude_agent_sdk import ResultMessage
from readme_blocks import Blocks
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, offline_env, offline_options

from repeat_hooks import kit

BLOCKS = Blocks.owned_by(__file__)
ROOT_SECTION = "Claude Agent SDK (`repeat-hooks-claude-agent-sdk`)"


@BLOCKS.cover("Quick start")
def test_the_quick_start_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeMessagesAPI(keep_calling()) as api:
        for name, value in offline_env(api, tmp_path).items():
            monkeypatch.setenv(name, value)
        BLOCKS.run("Quick start")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling mcp__parcels__track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]
    assert len(api.model_requests()) == 5  # the 3rd refusal ends the turn: no model call after it


@BLOCKS.cover(ROOT_SECTION)
def test_the_root_readme_section_runs_against_the_fake_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parcels = carrier()
    with FakeMessagesAPI(keep_calling()) as api:
        options = offline_options(
            api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed("track_parcel")
        )
        BLOCKS.run(ROOT_SECTION, given={"options": options})

    assert parcels.count("track_parcel") == 2
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("I stopped: I kept calling mcp__parcels__track_parcel")
    assert printed[1].startswith("message='I stopped") and "reason=<StopReason.IGNORED_REFUSALS" in printed[1]


@BLOCKS.cover("How it works")
def test_a_retried_request_names_its_turn_as_written(tmp_path: Path) -> None:
    """The request ran its two track calls, then the worker died; its retry (the README's block) continues the turn:
    the model's track calls are its 3rd and 4th, refused."""
    parcels = carrier()
    guard = RepeatGuardHooks(**SEED_004)
    with FakeMessagesAPI(scripted({"Track FR-7731": [call("track_parcel")] * 2})) as api:
        options = offline_options(
            api, tmp_path, mcp_servers={"parcels": parcels.server}, allowed_tools=allowed("track_parcel")
        )

        async def first() -> str:
            with kit.request(turn_id="req-1"):
                messages = [message async for message in guard.query(prompt="Track FR-7731", options=options)]
            return next(message.session_id for message in messages if isinstance(message, ResultMessage))

        session = anyio.run(first)
        given = {"guard": guard, "prompt": "Track FR-7731", "options": options, "request_id": "req-1"}
        BLOCKS.run("How it works", given={**given, "session_id": session})
        requests = api.model_requests()
    assert parcels.count("track_parcel") == 2
    assert REFUSAL in str(requests[-1]["messages"][-1])  # the retry's model read the refusal


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
