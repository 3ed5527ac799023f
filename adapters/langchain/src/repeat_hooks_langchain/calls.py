"""Translating LangChain's messages to the guard's words: tool calls with their hints, the result the model
reads, outcomes, and which call of a response a tool-node request or a ``ToolMessage`` belongs to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langchain_core.tools import BaseTool

from repeat_hooks import ToolCall


class Hints(NamedTuple):
    """What a tool says of its effects, each ``None`` when it does not say (MCP's annotations)."""

    read_only: bool | None = None
    """``readOnlyHint``: it changes nothing."""
    destructive: bool | None = None
    """``destructiveHint``: it may undo or overwrite something."""
    idempotent: bool | None = None
    """``idempotentHint``: calling it again with the same arguments adds nothing."""


NO_HINTS = Hints()

_HINTS = (("readOnlyHint", "read_only"), ("destructiveHint", "destructive"), ("idempotentHint", "idempotent"))


def tool_hints(tools: Sequence[object]) -> dict[str, Hints]:
    """The effect hints of the tools that give any: MCP's ``readOnlyHint``, ``destructiveHint`` and
    ``idempotentHint``, which ``langchain-mcp-adapters`` puts in ``BaseTool.metadata``
    (``langchain_mcp_adapters/tools.py:510-513``, all annotation fields, unset ones as ``None``); any tool may
    set them there. Only a ``bool`` counts: MCP's defaults for an unannotated tool say nothing here.
    """
    hints: dict[str, Hints] = {}
    for tool in tools:
        if isinstance(tool, BaseTool) and isinstance(tool.metadata, Mapping):
            metadata = tool.metadata
            found = {field: metadata.get(key) for key, field in _HINTS if isinstance(metadata.get(key), bool)}
            if found:
                hints[tool.name] = Hints(**found)
    return hints


def dump_hints(hints: Mapping[str, Hints], names: Sequence[str]) -> dict[str, list[bool | None]]:
    """The hints of the tools ``names`` that have any, as plain JSON for the graph state."""
    return {name: list(hints[name]) for name in sorted(set(names)) if name in hints}


def load_hints(saved: Any) -> dict[str, Hints]:
    """Hints saved by ``dump_hints`` (anything else: none)."""
    if not isinstance(saved, Mapping):
        return {}
    return {
        name: Hints(*(flag if isinstance(flag, bool) else None for flag in flags[:3]))
        for name, flags in saved.items()
        if isinstance(name, str) and isinstance(flags, list)
    }


def guard_call(call: LangChainToolCall, hints: Mapping[str, Hints]) -> ToolCall:
    """The guard's ``ToolCall`` for one LangChain tool call (arguments as the model sent them), with its hints.

    No ``call_id``: each response's calls are decided once, in the model node that received them, and
    those decisions are committed with the response in one checkpoint, so no call is ever delivered twice;
    the tool node finds a call's decision by its position in the ``AIMessage`` (``request_position``),
    which holds when ids are empty or repeated.
    """
    name = call["name"]
    hint = hints.get(name, NO_HINTS)
    return ToolCall(
        name,
        call.get("args"),
        read_only=hint.read_only,
        destructive=hint.destructive,
        idempotent=hint.idempotent,
    )


def last_batch(messages: Sequence[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The last ``AIMessage`` with tool calls, if only ``ToolMessage``\\ s follow it, and those messages.

    ``(None, [])`` when the conversation does not end in a batch of tool calls and their results
    (a user message came last, or the model answered in text).
    """
    answers: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answers.append(message)
            continue
        if isinstance(message, AIMessage) and message.tool_calls:
            answers.reverse()
            return message, answers
        break
    return None, []


def answered_positions(calls: Sequence[LangChainToolCall], answers: Sequence[ToolMessage]) -> list[int | None]:
    """For each ``ToolMessage`` of a batch, the position of the call it answers (``None``: none of them).

    Matched by ``tool_call_id`` (and tool name, where the message has one), in order: the tool node appends
    the answers of parallel calls in the order of the calls (``langchain/agents/factory.py:2031-2032``, one
    ``Send`` per call; LangGraph applies a step's writes in task order), so a call id used twice in a
    response, or empty, still pairs each answer with its own call.
    """
    taken = [False] * len(calls)
    positions: list[int | None] = []
    for answer in answers:
        found: int | None = None
        for position, call in enumerate(calls):
            if taken[position] or (call.get("id") or "") != (answer.tool_call_id or ""):
                continue
            if answer.name is not None and answer.name != call["name"]:
                continue
            found = position
            break
        if found is not None:
            taken[found] = True
        positions.append(found)
    return positions


def request_position(message: AIMessage, call: LangChainToolCall) -> int | None:
    """The position in ``message.tool_calls`` of the call a tool-node request runs, or ``None``.

    The tool node hands each request the very dict of the ``AIMessage`` held in the state
    (``factory.py:2031-2032``: ``Send("tools", [tool_call])``), so identity finds it even when ids repeat
    or are empty. When the state was read back from a checkpoint (a resumed run), the first call with the
    same id, tool and arguments; failing that (a reviewer edited the arguments), the only call with that id.
    """
    calls = message.tool_calls
    for position, candidate in enumerate(calls):
        if candidate is call:
            return position
    call_id = call.get("id") or ""
    same_id = [position for position, candidate in enumerate(calls) if (candidate.get("id") or "") == call_id]
    for position in same_id:
        candidate = calls[position]
        if candidate["name"] == call["name"] and candidate.get("args") == call.get("args"):
            return position
    if call_id and len(same_id) == 1:
        return same_id[0]
    return None


def same_call(one: LangChainToolCall, other: LangChainToolCall) -> bool:
    """The two calls name the same tool with the same arguments (a reviewer's edit makes them differ)."""
    return one["name"] == other["name"] and (one.get("args") or {}) == (other.get("args") or {})


HITL_EDITS_KEY = "hitl_edited_tool_calls"
"""``HumanInTheLoopMiddleware``'s graph-state key for its batched edits: ``{tool_call_id: {"name", "args"}}``
(``langchain/agents/middleware/human_in_the_loop.py``, ``_EDITED_TOOL_CALLS_KEY``), which its own
``wrap_tool_call`` applies; read here when the guard's hook runs outside HumanInTheLoopMiddleware's."""


def edit_of(edits: Any, call: LangChainToolCall) -> LangChainToolCall | None:
    """The call a reviewer's batched edit makes of ``call`` (``None``: no edit for it)."""
    call_id = call.get("id")
    if not call_id or not isinstance(edits, Mapping):
        return None
    edit = edits.get(call_id)
    if not isinstance(edit, Mapping) or not isinstance(edit.get("name"), str):
        return None
    return {"name": edit["name"], "args": dict(edit.get("args") or {}), "id": call_id, "type": "tool_call"}


HITL_SOURCE = "hitl_interrupt_decision"
"""The ``additional_kwargs["lc_source"]`` ``HumanInTheLoopMiddleware`` marks its answers with
(``add_notification_metadata``), with the decision in ``additional_kwargs["lc_data"]["decision"]``."""


def rejected_by_reviewer(message: ToolMessage) -> bool:
    """The message is a reviewer's rejection (``HumanInTheLoopMiddleware``): the tool did not run."""
    extra = message.additional_kwargs
    if extra.get("lc_source") != HITL_SOURCE:
        return False
    data = extra.get("lc_data")
    return isinstance(data, Mapping) and data.get("decision") == "reject"


def last_ai_message(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The last ``AIMessage`` of the conversation (the one whose calls the tool node is running)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def failed(message: ToolMessage) -> bool:
    """The tool call failed: LangChain marks errors (raised and handled, bad arguments) ``status="error"``."""
    return message.status == "error"


def model_view(message: ToolMessage) -> Any:
    """What the model reads of a tool's result: the ``ToolMessage``'s content, content-block ids left out.

    The guard digests this to tell progress from no progress, so it must change exactly when what the
    model reads changes. How LangChain builds that content (langchain-core 1.8.3, langchain-mcp-adapters
    0.3.2, under site-packages):

    - A tool's return value becomes the content in ``langchain_core/tools/base.py:1391-1427``
      (``_format_output``): a string or a list of content blocks as it is (``:1430-1451``), anything else
      as ``json.dumps`` text, or ``str()`` when JSON cannot write it (``:1472-1484``; a ``datetime``,
      ``Decimal``, dataclass... reaches the model as its ``repr``, and so it is digested). A ``ToolMessage``
      built by hand coerces other content to ``str`` too (``langchain_core/messages/tool.py:90-128``).
    - ``create_text_block`` / ``create_image_block``... stamp every block with a fresh ``id``
      (``"lc_<uuid4>"``, ``langchain_core/messages/content.py:1010``, ``utils/utils.py:509``). The
      provider integrations never send it to the model, and it is new on every run: left out here, or
      a tool returning the same blocks every time would look like progress every time.
      ``langchain-mcp-adapters`` builds one such block per MCP content item
      (``langchain_mcp_adapters/tools.py:175-223``).
    - The ``artifact`` (``response_format="content_and_artifact"``) is not sent to the model, and an MCP
      result's ``structuredContent`` goes there (``langchain_mcp_adapters/tools.py:276-283``); an MCP
      result's ``_meta`` is dropped before LangChain sees a message. Neither is part of this view.

    A string is returned as it is; in a list, each dict block is copied without its ``id`` (other items
    as they are). Values are left as Python values: the core makes them comparable.
    """
    content = message.content
    if isinstance(content, str):
        return content
    return [_without_id(block) for block in content]


def _without_id(block: Any) -> Any:
    """A content block without its ``id`` (anything else as it is)."""
    if isinstance(block, dict) and "id" in block:
        return {key: value for key, value in block.items() if key != "id"}
    return block


def model_messages(result: Sequence[BaseMessage]) -> list[AIMessage]:
    """The ``AIMessage``\\ s among a model call's result messages."""
    return [message for message in result if isinstance(message, AIMessage)]
