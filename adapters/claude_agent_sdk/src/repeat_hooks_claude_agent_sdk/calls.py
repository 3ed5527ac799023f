"""What Claude Code hands the hooks, as the core counts it, and what the hooks hand back: a call as a ``ToolCall``
with its tool's effect hints (``tool_call``), a result as the model reads it (``result_view``, ``result_text``),
the ``PreToolUse`` output for a decision (``allow``, ``deny``), the ``PostToolUse`` / ``PostToolUseFailure`` output
with the guard's warning (``warned``), and the ``PostToolBatch`` output (``note``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from claude_agent_sdk.types import SyncHookJSONOutput

from repeat_hooks import ToolCall, kit

BUILTIN_READ_ONLY: frozenset[str] = frozenset(
    "Read Glob Grep LS NotebookRead WebFetch WebSearch ToolSearch TaskOutput BashOutput ListMcpResourcesTool "  # noqa: SIM905
    "ReadMcpResourceTool".split()
)
"""Claude Code's own tools that read and change nothing: a call to one restarts no other call's count."""


def tool_call(name: str, tool_input: Any, call_id: str | None, annotations: object = None) -> ToolCall:
    """The ``ToolCall`` of a call Claude Code is about to run, with the hints of its MCP tool's ``annotations`` (as
    ``tools/list`` gave them), else ``read_only=True`` for a tool of ``BUILTIN_READ_ONLY``."""
    arguments = tool_input if tool_input is not None else {}
    builtin = True if name in BUILTIN_READ_ONLY else None
    return kit.tool_call(name, arguments, call_id=call_id, annotations=annotations, read_only=builtin)


_MCP_META = frozenset({"_meta", "meta", "annotations"})

_SAVED_IMAGE = re.compile(
    r"\[Image(?: source|: source): "
    r".+[/\\]tool-results[/\\]mcp-[^/\\]+-blob-\d{13}-[0-9a-z]{0,6}\.[0-9a-z]+"
    r"(?:, (?P<scale>original \d+x\d+, displayed at \d+x\d+\. Multiply coordinates by \d+\.\d{2} to map to "
    r"original image\.))?\]"
)
"""The note Claude Code (2.1.332) adds after an MCP tool's image, naming the file it saved the image to: ``[Image:
source: <file>]`` (``[Image source: <file>]`` when it could not read the image's size), the file
``<CLAUDE_CONFIG_DIR>/projects/<project>/<session>/tool-results/mcp-<server>-blob-<epoch ms>-<random>.<ext>``, new at
every run; ``, original WxH, displayed at wxh. Multiply coordinates by N.NN to map to original image.`` after it when
the image was scaled down."""


def _saved_image(text: str) -> str | None:
    """A text block of an MCP tool's result without Claude Code's note of the file it saved the image to: ``None`` for
    the note alone, ``[Image: <scale>]`` (as Claude Code writes it for an image it did not save) for a scaled-down
    image's, any other text as it is."""
    found = _SAVED_IMAGE.fullmatch(text)
    if found is None:
        return text
    return None if found["scale"] is None else f"[Image: {found['scale']}]"


def result_view(tool_response: Any) -> Any:
    """What the model reads of a tool's result (``PostToolUse``'s ``tool_response``): an MCP tool's content blocks,
    a text block as its text, protocol metadata (``_meta``, ``annotations``) left out, and the note Claude Code adds
    after an image, of the file it saved it to (a new name at every run: ``[Image: source: .../tool-results/mcp-
    <server>-blob-<epoch ms>-<random>.png]``), left out (the image itself is compared as any value); anything else as
    it is."""
    if isinstance(tool_response, Mapping) and isinstance(tool_response.get("content"), list):
        view = {key: value for key, value in tool_response.items() if key not in _MCP_META}
        view["content"] = result_view(tool_response["content"])
        return view
    if isinstance(tool_response, list) and all(isinstance(block, Mapping) for block in tool_response):
        blocks: list[Any] = []
        for block in tool_response:
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text = _saved_image(block["text"])
                if text is not None:
                    blocks.append(text)
            else:
                blocks.append({key: value for key, value in block.items() if key not in _MCP_META})
        return blocks
    return tool_response


def allow() -> SyncHookJSONOutput:
    """The output that lets a call go on: no decision, so Claude Code's own permissions still decide."""
    return {}


def deny(message: str, ends: str | None = None) -> SyncHookJSONOutput:
    """The ``PreToolUse`` output for a refused call: the tool does not run and the model reads ``message`` as its
    error result. ``ends``: the turn ends too (``continue_: False``, no further model call), for that reason."""
    output: SyncHookJSONOutput = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": message,
        }
    }
    if ends is not None:
        output["continue_"] = False
        output["stopReason"] = ends
    return output


def warned(event: str, message: str | None) -> SyncHookJSONOutput:
    """The ``PostToolUse`` (``event``; or ``PostToolUseFailure``) output after a call ran: ``{}``, or with ``message``
    (``Policy.warning``'s note) for the model to read right after that call's result (Claude Code 2.1.332 appends it
    to that very tool result, in a ``<system-reminder>``: "PostToolUse:<tool> hook additional context: ...")."""
    if message is None:
        return {}
    if event == "PostToolUseFailure":
        return {"hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": message}}
    return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": message}}


def note(message: str | None, ends: str | None = None) -> SyncHookJSONOutput:
    """The ``PostToolBatch`` output once a response's calls have all resolved: ``message`` (if any) for the model to
    read with their results (Claude Code 2.1.332 appends it to the batch's last tool result, in a
    ``<system-reminder>``: "PostToolBatch hook additional context: ..."). ``ends``: the turn ends too (``continue_:
    False``, no further model call), for that reason."""
    output: SyncHookJSONOutput = {}
    if message is not None:
        output["hookSpecificOutput"] = {"hookEventName": "PostToolBatch", "additionalContext": message}
    if ends is not None:
        output["continue_"] = False
        output["stopReason"] = ends
    return output


_HOOK_ERROR = re.compile(r"^PreToolUse:\S+ hook error: ")
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*$", re.DOTALL)


def result_text(content: str | list[dict[str, Any]] | None) -> str:
    """The text of a tool result (a ``ToolResultBlock``'s ``content``) as the model reads it, without Claude Code's
    framing (the ``PreToolUse:<tool> hook error: `` before a refusal, a trailing ``<system-reminder>``). Text
    blocks are joined; any other block is written as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    else:
        text = "".join(
            block["text"] if block.get("type") == "text" and isinstance(block.get("text"), str) else json.dumps(block)
            for block in content
        )
    return _HOOK_ERROR.sub("", _REMINDER.sub("", text), count=1).strip()
