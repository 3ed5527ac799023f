"""This module exists because Claude Code keeps every session as JSON Lines (the events' ``transcript_path``, under
``~/.claude/projects/``): ``trajectory`` reads one as a replay's ``Trajectory``, each call as the hook command sees
it, so that ``repeat-hooks replay`` and ``tune`` judge a policy on the sessions a user already has, before the guard
is on.

What a transcript holds (Claude Code 2.1.332): a ``user`` entry whose content is the prompt starts a turn; the
``assistant`` entries of one model response share its ``message.id`` (one entry per content block), and their
``tool_use`` blocks are its calls; a ``user`` entry's ``tool_result`` blocks answer them, with ``toolUseResult``
beside (what ``PostToolUse`` hands the hook as ``tool_response``). A sub-agent's entries (``isSidechain``) in its
parent's transcript are left out: its own file (``<session>/subagents/``) is read as a session of its own. Each call
is the hook's: its volatile fields left out, its effect known (``calls.tool_call``), its result as the model reads it
(``calls.result_view``); a failure is its error text; a call a hook denied (``PreToolUse:<tool> hook error: ...``)
never ran, so its result is unrecorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from repeat_hooks import Policy

from .calls import result_view, tool_call

if TYPE_CHECKING:
    from repeat_hooks.offline.replay import RecordedCall, Trajectory


def trajectory(entries: Iterable[Mapping[str, Any]], ident: str | None = None) -> Trajectory:
    """The session of a transcript's ``entries`` (its parsed lines, in order) as a ``Trajectory`` named ``ident``
    (default: its ``sessionId``), with no success label."""
    from repeat_hooks.offline.replay import Trajectory

    policy = Policy()
    turns: list[list[list[tuple[str, str, Any]]]] = []
    responses: dict[str, list[tuple[str, str, Any]]] = {}
    results: dict[str, tuple[Mapping[str, Any], Any]] = {}
    session, side = ident, None
    for entry in entries:
        if entry.get("type") not in ("user", "assistant"):
            continue
        side = entry.get("isSidechain") is True if side is None else side  # a sub-agent's own file is all sidechain
        if (entry.get("isSidechain") is True) != side:
            continue
        session = session or (entry.get("sessionId") if isinstance(entry.get("sessionId"), str) else None)
        message = entry.get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        blocks = [block for block in content if isinstance(block, Mapping)] if isinstance(content, list) else []
        if entry["type"] == "user":
            answered = [block for block in blocks if block.get("type") == "tool_result"]
            for block in answered:
                extra = entry.get("toolUseResult") if len(answered) == 1 else None
                results[str(block.get("tool_use_id"))] = (block, extra)
            if not answered and not entry.get("isMeta") and not entry.get("isCompactSummary"):
                turns.append([])
                responses = {}
            continue
        calls = [block for block in blocks if block.get("type") == "tool_use" and isinstance(block.get("name"), str)]
        if not calls:
            continue
        if not turns:
            turns.append([])
        key = str(message.get("id") if isinstance(message, Mapping) else None)
        if key not in responses:
            responses[key] = []
            turns[-1].append(responses[key])
        responses[key] += [(str(block.get("id")), block["name"], block.get("input")) for block in calls]
    grouped: list[list[list[RecordedCall]]] = [
        [
            [_recorded(name, arguments, results.get(call_id), policy) for call_id, name, arguments in response]
            for response in turn
        ]
        for turn in turns
    ]
    return Trajectory(session or "claude-code", grouped, None)


def _recorded(name: str, arguments: Any, answer: tuple[Mapping[str, Any], Any] | None, policy: Policy) -> RecordedCall:
    """One call as the hook saw it, with its outcome: the tool's structured result (``toolUseResult``) as the model
    reads it, else the result block's text; ``UNRECORDED`` for a call that never ran or was never answered."""
    from repeat_hooks.offline.replay import UNRECORDED, RecordedCall

    call = tool_call(name, arguments, None, policy)
    if answer is None:
        return RecordedCall(call.name, call.arguments, UNRECORDED, True, call.read_only)
    block, structured = answer
    text = _text(block.get("content"))
    if block.get("is_error") is True:
        if text.startswith(f"PreToolUse:{name} hook error: "):
            return RecordedCall(call.name, call.arguments, UNRECORDED, True, call.read_only)
        return RecordedCall(call.name, call.arguments, text, False, call.read_only)
    result = result_view(structured) if structured is not None else text
    return RecordedCall(call.name, call.arguments, result, True, call.read_only)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""
