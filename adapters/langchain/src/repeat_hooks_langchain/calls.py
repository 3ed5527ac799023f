"""LangChain's messages in the guard's words: a tool call as a ``ToolCall`` with its tool's hints, the result as the
model reads it, outcomes, which call of a response a request or a ``ToolMessage`` is, and a refused call answered in
the model node (its refusal as its ``ToolMessage``). The README's "How it maps to LangChain" says why each is so."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.tools import BaseTool

from repeat_hooks import RefusalKind, ToolCall
from repeat_hooks.kit import FEEDS as _FEEDS
from repeat_hooks.kit import Feed, hints, tool_call, unnoted
from repeat_hooks.kit import noted as kit_noted

FEEDS = (*_FEEDS, Feed.ANSWERS, Feed.WARNINGS)
"""What the middleware feeds the guard: each call's outcome, each model call, its text answers; and it hands the
model the guard's notes (``noted``)."""

ByTool = Mapping[str, Mapping[str, bool]]
"""``kit.hints`` of a response's tools, by tool name (``{"read_only": True}``): its ``ToolCall`` keywords."""
HINT_NAMES = ("read_only", "destructive", "idempotent")
REFUSED_KEY = "repeat_guard_refused"
"""The ``response_metadata`` key marking a ``ToolMessage`` as the guard's refusal (never sent to the model)."""
HITL_EDITS_KEY = "hitl_edited_tool_calls"
"""``HumanInTheLoopMiddleware``'s graph-state key for its batched edits: ``{tool_call_id: {"name", "args"}}``."""
HITL_SOURCE = "hitl_interrupt_decision"
"""The ``additional_kwargs["lc_source"]`` ``HumanInTheLoopMiddleware`` marks its answers with."""


def tool_hints(tools: Sequence[object]) -> dict[str, dict[str, bool]]:
    """The explicit MCP effect hints of the ``tools`` that give any, from ``BaseTool.metadata``."""
    found = {tool.name: hints(tool.metadata) for tool in tools if isinstance(tool, BaseTool)}
    return {name: known for name, known in found.items() if known}


def saved_hints(saved: Any) -> dict[str, dict[str, bool]]:
    """Hints as the graph state kept them (0.3.0 kept ``[read_only, destructive, idempotent]`` lists)."""
    if not isinstance(saved, Mapping):
        return {}
    pairs = {name: zip(HINT_NAMES, flags, strict=False) if isinstance(flags, list) else flags.items() for name, flags in
             saved.items() if isinstance(flags, (list, Mapping))}  # fmt: skip
    return {name: {k: v for k, v in items if k in HINT_NAMES and isinstance(v, bool)} for name, items in pairs.items()}


def guard_call(call: LangChainToolCall, known: ByTool) -> ToolCall:
    """The guard's ``ToolCall`` of a LangChain tool call, with its tool's hints; no ``call_id`` (calls are found by
    their position in the ``AIMessage``, which holds when ids are empty or repeated)."""
    return tool_call(call["name"], call.get("args"), **known.get(call["name"], {}))  # type: ignore[arg-type]


def last_batch(messages: Sequence[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The last ``AIMessage`` with tool calls, if only ``ToolMessage``\\ s follow it, and those; else ``(None, [])``."""
    answers: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answers.append(message)
            continue
        if isinstance(message, AIMessage) and message.tool_calls:
            return message, answers[::-1]
        break
    return None, []


def answered_positions(calls: Sequence[LangChainToolCall], answers: Sequence[ToolMessage]) -> list[int | None]:
    """For each ``ToolMessage`` of a batch, the position of the call it answers (``None``: none of them), matched
    by ``tool_call_id`` and name, in order (the tool node appends answers in the order of the calls)."""
    ids, taken, positions = [call.get("id") or "" for call in calls], set(), []
    for answer in answers:
        found = [n for n, ident in enumerate(ids) if ident == (answer.tool_call_id or "") and n not in taken]
        found = [n for n in found if answer.name in (None, calls[n]["name"])][:1]
        positions.append(found[0] if found else None)
        taken.update(found)
    return positions


def request_position(message: AIMessage, call: LangChainToolCall) -> int | None:
    """The position in ``message.tool_calls`` of the call a tool-node request runs: the very dict, else (read back
    from a checkpoint) the first call with its id, tool and arguments, else (edited) the only call with its id."""
    calls = message.tool_calls
    for position, candidate in enumerate(calls):
        if candidate is call:
            return position
    call_id = call.get("id") or ""
    same_id = [position for position, candidate in enumerate(calls) if (candidate.get("id") or "") == call_id]
    for position in same_id:
        if same_call(calls[position], call):
            return position
    return same_id[0] if call_id and len(same_id) == 1 else None


def same_call(one: LangChainToolCall, other: LangChainToolCall) -> bool:
    """The two calls name the same tool with the same arguments (a reviewer's edit makes them differ)."""
    return one["name"] == other["name"] and (one.get("args") or {}) == (other.get("args") or {})


def edit_of(edits: Any, call: LangChainToolCall) -> LangChainToolCall | None:
    """The call a reviewer's batched edit (``HITL_EDITS_KEY``) makes of ``call`` (``None``: no edit for it)."""
    edit = edits.get(call.get("id")) if call.get("id") and isinstance(edits, Mapping) else None
    if not isinstance(edit, Mapping) or not isinstance(edit.get("name"), str):
        return None
    return {"name": edit["name"], "args": dict(edit.get("args") or {}), "id": call.get("id"), "type": "tool_call"}


def rejected_by_reviewer(message: ToolMessage) -> bool:
    """The message is a reviewer's rejection (``HumanInTheLoopMiddleware``): the tool did not run."""
    extra = message.additional_kwargs
    data = extra.get("lc_data")
    return extra.get("lc_source") == HITL_SOURCE and isinstance(data, Mapping) and data.get("decision") == "reject"


def last_ai_message(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The last ``AIMessage`` of the conversation (the one whose calls the tool node is running)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def succeeded(message: ToolMessage) -> bool:
    """LangChain marks a failed call (raised and handled, bad arguments, unknown tool) ``status="error"``."""
    return message.status != "error"


def model_view(message: ToolMessage) -> Any:
    """What the model reads of a tool's result: the ``ToolMessage``'s content, each content block without the
    ``id`` LangChain stamps on it (``lc_<uuid4>``, new on every run, never sent to the model); never the
    ``artifact``. Values are left as Python values: the core makes them comparable."""
    content = message.content
    if isinstance(content, str):
        return unnoted(content)
    blocks = [{k: v for k, v in block.items() if k != "id"} if isinstance(block, dict) else block for block in content]
    last = blocks[-1] if blocks else None
    if isinstance(last, dict) and last.get("type") == "text" and unnoted("\n\n" + str(last.get("text"))) == "":
        blocks.pop()  # the guard's own note (``noted``), not the tool's
    return blocks


def noted(message: ToolMessage, note: str) -> ToolMessage:
    """``message`` (a result the model is about to read) with the guard's ``note`` after its content; the same id,
    so the agent state's messages reducer replaces it in place."""
    content = message.content
    if isinstance(content, str):
        return message.model_copy(update={"content": kit_noted(content, note)})
    return message.model_copy(update={"content": [*content, {"type": "text", "text": note}]})


def refuse(result: Sequence[BaseMessage], message: AIMessage, refused: Mapping[int, str]) -> list[BaseMessage]:
    """``result`` (a model call's messages) with the calls of ``message`` at the positions ``refused`` moved to its
    ``invalid_tool_calls`` (``error``: the refusal), each answered by a refusal ``ToolMessage`` at the end. When an
    id of ``message`` is empty or shared, every call of it gets ``"<id>_<position>"``, so LangChain tells the
    answered calls from the pending ones."""
    calls = message.tool_calls
    ids = [call.get("id") or "" for call in calls]
    if not all(ids) or len(set(ids)) < len(ids):
        calls = [{**call, "id": f"{ids[position] or 'call'}_{position}"} for position, call in enumerate(calls)]
    args = {n: json.dumps(calls[n].get("args") or {}, default=str) for n in sorted(refused)}
    moved = [invalid_tool_call(name=calls[n]["name"], args=args[n], id=calls[n]["id"], error=refused[n]) for n in args]
    kept = [call for position, call in enumerate(calls) if position not in refused]
    invalid = [*message.invalid_tool_calls, *moved]
    rewritten = message.model_copy(update={"tool_calls": kept, "invalid_tool_calls": invalid})
    answers = [answer(calls[n], refused[n], {REFUSED_KEY: True}) for n in sorted(refused)]
    return [*(rewritten if item is message else item for item in result), *answers]


def answer(call: LangChainToolCall, text: str, metadata: dict[str, Any]) -> ToolMessage:
    """The guard's answer to a call that does not run: ``text`` as its ``ToolMessage`` (``status="error"``)."""
    tool_call_id, name = call.get("id") or "", call["name"]
    return ToolMessage(text, tool_call_id=tool_call_id, name=name, status="error", response_metadata=metadata)


def ended_on_refusals(messages: Sequence[BaseMessage]) -> bool:
    """The conversation ends with the guard's refusals of every call of the last response: the loop ended because
    no call was left to run, not because the model answered."""
    last = messages[-1] if messages else None
    metadata: Any = last.response_metadata if isinstance(last, ToolMessage) else None
    if not isinstance(metadata, dict) or metadata.get(REFUSED_KEY) is not True:
        return False
    message = last_ai_message(messages)
    return message is not None and not message.tool_calls


EDIT_REASONS = (
    (RefusalKind.OPAQUE, "it repeats a call that already ran as many times as this turn allows"),
    (RefusalKind.FAILURE, "it repeats a call that already failed the same way, and it would fail again"),
    (RefusalKind.CYCLE, "it would start a loop of calls again whose results did not change"),
    (RefusalKind.FORBIDDEN, "{tool} may not be called in this turn"),
    (RefusalKind.DUPLICATE_WRITE, "the same call already succeeded, and running it again would do it twice"),
    (RefusalKind.REJECTED, "the same call was already rejected before it ran, and nothing has changed since"),
    (RefusalKind.TURN_ENDED, "this turn has ended"),
    (RefusalKind.STORE_UNAVAILABLE, "the guard could not reach this conversation's counts"),
)
"""Why the guard refused a reviewer's edit, by refusal kind (the core's texts say "you called": the reviewer did);
any other kind (``REPEAT``): "it repeats a call that already ran, and nothing has changed since..."."""


def edit_refusal(kind: RefusalKind, tool: str) -> str:
    """What the model reads, after LangChain's edit notice, when the guard refuses a reviewer's replacement call."""
    reason = dict(EDIT_REASONS).get(
        kind, "it repeats a call that already ran, and nothing has changed since that could change its result"
    )
    return (
        f"Refused: the reviewer's replacement call did not run: {reason.format(tool=tool)}. Neither your call nor "
        "the replacement ran; use the earlier results, or give your answer with what you know."
    )
