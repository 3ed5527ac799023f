"""The parcel carrier the LangChain tests drive, and the texts the user notices (seed 004)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Checkpointer
from repeat_hooks_langchain import RepeatGuardMiddleware
from repeat_hooks_langchain.testing import ScriptedChatModel

from repeat_hooks import Policy

ARGS = {"tracking_number": "FR-7731"}
IN_TRANSIT = "FR-7731: in transit, hub Lyon"
REFUSAL = (
    "Refused: you already called track_parcel 2 times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
STOPPED = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
USER = {"messages": [("user", "Keep checking FR-7731")]}


@dataclass
class Carrier:
    """The parcel carrier's API: records every call that reached it; the parcel stays in transit."""

    calls: list[str] = field(default_factory=list)
    tool: BaseTool = field(init=False)

    def __post_init__(self) -> None:
        @tool
        def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            self.calls.append(tracking_number)
            return f"{tracking_number}: in transit, hub Lyon"

        self.tool = track_parcel


def thread(name: str) -> Any:
    """The run config of a conversation thread (``RunnableConfig``)."""
    return {"configurable": {"thread_id": name}}


def seed_004() -> Policy:
    """Seed 004: per tool, 2 calls a turn run, the 3rd is refused, 3 refusals end the turn."""
    return Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3)


def parcel_agent(
    model: ScriptedChatModel,
    carrier: Carrier,
    policy: Policy | None = None,
    *,
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] | None = None,
    checkpointer: Checkpointer = None,
    tools: Sequence[BaseTool] = (),
) -> Any:
    """``create_agent`` with the carrier's tool and the guard (``middleware`` replaces the guard alone)."""
    if middleware is None:
        middleware = [RepeatGuardMiddleware(policy or seed_004())]
    if checkpointer is None:
        checkpointer = InMemorySaver()
    return create_agent(model, tools=[carrier.tool, *tools], middleware=middleware, checkpointer=checkpointer)


def kinds(messages: Sequence[BaseMessage]) -> list[str]:
    """The message types of a conversation, e.g. ``["human", "ai", "tool", ...]``."""
    return [message.type for message in messages]
