"""Refused calls answered in the model node, so nothing after it sees them as calls to make.

The guard decides a response's calls in ``wrap_model_call``, before any ``after_model`` hook. A refused call
then leaves the ``AIMessage``'s ``tool_calls`` for its ``invalid_tool_calls`` (LangChain's place for a call
that will not run: chat model integrations send both lists back to the model as the calls it made, and
``create_agent`` answers an unanswered one with an error ``ToolMessage``, ``_patch_invalid_tool_calls`` in
``langchain/agents/factory.py``), and its refusal follows the response as that call's ``ToolMessage``
(``status="error"``). So:

- ``HumanInTheLoopMiddleware`` never asks about a refused call, in either interrupt mode and either order:
  its batched review (``after_model``) lists ``tool_calls``; its per-call review runs in the tool node.
- The tool node runs only the allowed calls: ``create_agent`` sends it the calls of ``tool_calls`` that
  have no answer yet.
- The model reads each refusal as the answer to its own call.

When every call was refused, ``create_agent`` sees no call left and ends the loop; the guard's
``after_agent`` sends it back to the model (``ended_on_refusals``), which reads the refusals.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langchain_core.messages.tool import invalid_tool_call

from repeat_hooks import RefusalKind

REFUSED_KEY = "repeat_guard_refused"
"""The ``response_metadata`` key marking a ``ToolMessage`` as the guard's refusal (never sent to the model:
chat model integrations do not send ``response_metadata``)."""


def refuse(result: Sequence[BaseMessage], message: AIMessage, refused: Mapping[int, str]) -> list[BaseMessage]:
    """``result`` (a model call's messages) with the calls of ``message`` at the positions ``refused`` moved to
    its ``invalid_tool_calls`` (``error``: the refusal), each answered by a refusal ``ToolMessage`` at the end.

    Calls need an id of their own for ``create_agent`` to tell an answered call from a pending one: when an
    id of ``message`` is empty or shared, every call of it gets ``"<id>_<position>"`` instead.
    """
    calls = _with_own_ids(message.tool_calls)
    moved = [
        invalid_tool_call(
            name=call["name"],
            args=json.dumps(call.get("args") or {}, default=str),
            id=call["id"],
            error=refused[position],
        )
        for position, call in enumerate(calls)
        if position in refused
    ]
    rewritten = message.model_copy(
        update={
            "tool_calls": [call for position, call in enumerate(calls) if position not in refused],
            "invalid_tool_calls": [*message.invalid_tool_calls, *moved],
        }
    )
    answers = [
        ToolMessage(
            content=refused[position],
            tool_call_id=calls[position]["id"] or "",
            name=calls[position]["name"],
            status="error",
            response_metadata={REFUSED_KEY: True},
        )
        for position in sorted(refused)
    ]
    return [*(rewritten if item is message else item for item in result), *answers]


def kept_positions(count: int, refused: Mapping[int, str]) -> dict[int, int]:
    """For each call of a response of ``count`` calls the guard did not refuse: its new position in
    ``tool_calls`` (``refuse`` keeps them in order)."""
    kept = [position for position in range(count) if position not in refused]
    return {old: new for new, old in enumerate(kept)}


def ended_on_refusals(messages: Sequence[BaseMessage]) -> bool:
    """The conversation ends with the guard's refusals of every call of the model's last response: the loop
    ended because no call was left to run, not because the model answered."""
    if not messages or not isinstance(messages[-1], ToolMessage) or not _is_refusal(messages[-1]):
        return False
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return not message.tool_calls
    return False


def _is_refusal(message: ToolMessage) -> bool:
    metadata: Any = message.response_metadata
    return isinstance(metadata, dict) and metadata.get(REFUSED_KEY) is True


def _with_own_ids(calls: Sequence[LangChainToolCall]) -> list[LangChainToolCall]:
    """``calls``, each with an id no other call of them has (unchanged when they already do)."""
    ids = [call.get("id") or "" for call in calls]
    if all(ids) and len(set(ids)) == len(ids):
        return list(calls)
    return [{**call, "id": f"{ids[position] or 'call'}_{position}"} for position, call in enumerate(calls)]


_EDIT_REASONS: dict[RefusalKind, str] = {
    RefusalKind.REPEAT: (
        "it repeats a call that already ran, and nothing has changed since that could change its result"
    ),
    RefusalKind.OPAQUE: "it repeats a call that already ran as many times as this turn allows",
    RefusalKind.FAILURE: "it repeats a call that already failed the same way, and it would fail again",
    RefusalKind.CYCLE: "it would start a loop of calls again whose results did not change",
    RefusalKind.FORBIDDEN: "{tool} may not be called in this turn",
    RefusalKind.DUPLICATE_WRITE: "the same call already succeeded, and running it again would do it twice",
    RefusalKind.REJECTED: "the same call was already rejected before it ran, and nothing has changed since",
    RefusalKind.TURN_ENDED: "this turn has ended",
}
"""Why the guard refused a reviewer's edit, by refusal kind (the core's texts say "you called", which the
model did not: the reviewer did)."""


def edit_refusal(kind: RefusalKind, tool: str) -> str:
    """The text the model reads when the guard refuses the call a reviewer put in place of the model's (after
    LangChain's own notice, "Executed instead: <tool> with arguments {...}. Tool response:")."""
    reason = _EDIT_REASONS.get(kind, "it repeats a call that already ran").format(tool=tool)
    return (
        f"Refused: the reviewer's replacement call did not run: {reason}. Neither your call nor the "
        "replacement ran; use the earlier results, or give your answer with what you know."
    )
