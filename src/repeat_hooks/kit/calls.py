"""A call as every adapter builds it: the SDK's name, arguments and id, and the tool's effect hints, on ``ToolCall``.

MCP servers annotate their tools (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``); SDKs hand them over
as a mapping in that spelling (a tool's ``metadata``, a wire ``tools/list`` answer) or as an object with those
attributes (``mcp.types.ToolAnnotations``). Only an explicit ``True``/``False`` counts: MCP's defaults for an
unannotated tool say nothing, and the policy's ``read_only`` / ``destructive`` settings decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..call import ToolCall

MCP_HINTS = (("readOnlyHint", "read_only"), ("destructiveHint", "destructive"), ("idempotentHint", "idempotent"))
"""MCP's annotation names, and the ``ToolCall`` keyword each one sets."""


def hints(annotations: object) -> dict[str, bool]:
    """The ``ToolCall`` keywords (``read_only``, ``destructive``, ``idempotent``) that ``annotations`` sets
    explicitly: a mapping in MCP's spelling, or an object with those attributes; ``{}`` for anything else."""
    if annotations is None:
        return {}
    found: dict[str, bool] = {}
    for hint, keyword in MCP_HINTS:
        try:
            value = annotations.get(hint) if isinstance(annotations, Mapping) else getattr(annotations, hint, None)
        except Exception:  # a hostile annotations object: no hint
            continue
        if value is True or value is False:
            found[keyword] = value
    return found


def tool_call(
    name: str, arguments: Any = None, *, call_id: str | None = None, annotations: object = None, **known: bool | None
) -> ToolCall:
    """The ``ToolCall`` of one call the model made: ``call_id`` (``""``: none), the hints its tool's
    ``annotations`` set, and for the hints they do not set, ``known`` ones (``read_only=True`` for an SDK's own
    read-only built-in)."""
    given = {keyword: value for keyword, value in known.items() if value is not None}
    return ToolCall(name, arguments, call_id=call_id or None, **{**given, **hints(annotations)})
