"""Shared pieces of the LlamaIndex adapter's tests: a parcel carrier whose calls are counted, seed 004's texts, and
the warning LlamaIndex itself raises.

The workflows runtime lists a workflow's methods with ``inspect.getmembers`` (workflows/utils.py:331), which reads
pydantic's deprecated ``__fields__`` of every agent: a ``PydanticDeprecatedSince20`` the suite's filter would turn
into an error. It is the SDK's, with or without the guard, so it is ignored here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from repeat_hooks_llama_index import RepeatGuard
from repeat_hooks_llama_index.testing import Script, keep_calling

from repeat_hooks import Policy

HERE = Path(__file__).resolve().parent
ARGS = {"tracking_number": "FR-7731"}
SEED_004 = Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)
"""Seed 004: per tool, 2 calls a turn; the 3rd is refused; after 3 refusals the turn ends."""
REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"))
            item.add_marker(pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"))


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it."""

    calls: list[str] = field(default_factory=list)

    @property
    def tool(self) -> FunctionTool:
        async def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            self.calls.append(tracking_number)
            return f"{tracking_number}: in transit, hub Lyon"

        return FunctionTool.from_defaults(async_fn=track_parcel)


@pytest.fixture
def carrier() -> Carrier:
    return Carrier()


def looping_agent(
    carrier: Carrier, guard: RepeatGuard | None = None, *, parallel: int = 1, **agent_options: Any
) -> tuple[FunctionAgent, Script]:
    """A guarded FunctionAgent (seed 004's policy by default) whose scripted model asks for ``track_parcel(FR-7731)``
    in every response, and its script."""
    script = Script(then=keep_calling("track_parcel", ARGS, parallel))
    options = {"name": "parcel_tracker", "description": "Tracks parcels.", "streaming": False, **agent_options}
    agent = FunctionAgent(llm=script.llm(), tools=[carrier.tool], **options)
    return (guard or RepeatGuard(SEED_004)).agent(agent), script


def read(script: Script) -> list[str]:
    """The tool results each model call received last (the SDK's own history, as the model read it)."""
    return [request[-1].content or "" for request in script.requests if request and request[-1].role == "tool"]
