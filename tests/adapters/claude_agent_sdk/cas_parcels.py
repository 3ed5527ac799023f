"""Shared pieces of the Claude Agent SDK adapter's tests: a parcel carrier on an in-process MCP server whose
runs are counted, scripted models, and a helper that runs turns on the real Claude Code CLI (bundled with the
SDK) against the fake Messages API."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    Message,
    ResultMessage,
    ToolAnnotations,
    ToolResultBlock,
    UserMessage,
    create_sdk_mcp_server,
    tool,
)
from claude_agent_sdk.types import McpSdkServerConfig
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, result_text
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, Reply, offline_options, steps, tool_use

TRACK = "mcp__parcels__track_parcel"
ARGS = {"tracking_number": "FR-7731"}
TRACKED = "FR-7731: in transit, hub Lyon"
REFUSAL = (
    "Refused: you already called mcp__parcels__track_parcel 2 times in this turn, and its result will not change "
    "before the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
"""Seed 004's refusal (``count="per_turn", match="tool", max_calls=2``), word for word."""
STOPPED = (
    "I stopped: I kept calling mcp__parcels__track_parcel, and its result would not change in this turn. "
    "Ask me again later."
)
"""Seed 004's stop after 3 refusals, word for word."""
SEED_004: dict[str, Any] = {"match": "tool", "count": "per_turn", "max_calls": 2, "max_refusals": 3}


@dataclass
class Carrier:
    """The parcels MCP server: each tool's runs, by tool name (its arguments, in order)."""

    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    server: McpSdkServerConfig | None = None

    def count(self, name: str) -> int:
        return len(self.runs.get(name, []))


def carrier(
    annotations: Mapping[str, ToolAnnotations] | None = None, results: Mapping[str, str] | None = None
) -> Carrier:
    """A parcels MCP server with ``track_parcel``, ``parcel_history``, ``parcel_scans`` and ``place_order``;
    ``annotations`` by tool name; each returns the same text every run (``results`` by tool name)."""
    annotations = annotations or {}
    texts = {"track_parcel": TRACKED, "parcel_history": "FR-7731: 3 scans", "parcel_scans": "3 scans"}
    texts.update(results or {})
    box = Carrier()

    def make(name: str) -> Any:
        async def run(arguments: dict[str, Any]) -> dict[str, Any]:
            box.runs.setdefault(name, []).append(arguments)
            answer = texts.get(name) or f"order ORD-{box.count(name)} placed"
            return {"content": [{"type": "text", "text": answer}]}

        return tool(name, f"The {name} tool.", {"tracking_number": str}, annotations=annotations.get(name))(run)

    names = ("track_parcel", "parcel_history", "parcel_scans", "place_order")
    box.server = create_sdk_mcp_server("parcels", tools=[make(name) for name in names])
    return box


def allowed(*names: str) -> list[str]:
    return [
        f"mcp__parcels__{name}" for name in names or ("track_parcel", "parcel_history", "parcel_scans", "place_order")
    ]


def keep_calling(name: str = TRACK, arguments: Mapping[str, Any] = ARGS) -> Callable[[dict[str, Any]], Reply]:
    """A model that calls ``name`` in every response, forever."""
    return lambda request: [tool_use(name, arguments)]


def scripted(prompts: Mapping[str, Sequence[Reply]], then: Reply = "done") -> Callable[[dict[str, Any]], Reply]:
    """A model that answers, in the turn of each prompt, its replies in order (by the request's history), then
    ``then``."""

    def answer(request: dict[str, Any]) -> Reply:
        prompt = max(prompts, key=lambda text: _last_index(request, text))
        replies = prompts[prompt]
        step = steps(request, prompt)
        return replies[step] if step < len(replies) else then

    return answer


def _last_index(request: Mapping[str, Any], prompt: str) -> int:
    from repeat_hooks_claude_agent_sdk.testing import messages_text

    messages = request.get("messages") or []
    return max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and prompt in messages_text(m)), default=-1
    )


def call(name: str, arguments: Mapping[str, Any] = ARGS) -> list[dict[str, Any]]:
    """A response with one call of the parcels tool ``name``."""
    return [tool_use(f"mcp__parcels__{name}", arguments)]


@dataclass
class Turn:
    """What the caller got from one turn: every message, the result."""

    messages: list[Message]

    @property
    def result(self) -> ResultMessage:
        return next(message for message in self.messages if isinstance(message, ResultMessage))

    @property
    def seen(self) -> list[str]:
        """The tool results of the turn, as text, in the caller's stream."""
        return [
            result_text(block.content)
            for message in self.messages
            if isinstance(message, UserMessage) and isinstance(message.content, list)
            for block in message.content
            if isinstance(block, ToolResultBlock)
        ]


async def converse(
    guard: RepeatGuardHooks, api: FakeMessagesAPI, home: Path, prompts: Sequence[str], **options: Any
) -> list[Turn]:
    """Each prompt as one turn of one session (``guard.client``), on the real CLI against ``api``."""
    turns: list[Turn] = []
    async with guard.client(offline_options(api, home, **options)) as client:
        for prompt in prompts:
            await client.query(prompt)
            turns.append(Turn([message async for message in client.receive_response()]))
    return turns
