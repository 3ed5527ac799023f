"""The names of the tools an agent has registered, before any ``prepare`` hides one at a run step.

The policy's tool names (``limits``, ``exempt``, ``read_only``, ``destructive``) are checked against the
agent's tools at the run's first request. The request offers only the tools prepared for that step: a
tool's ``prepare``, an agent's ``prepare_tools`` or a toolset's ``.prepared()`` / ``.filtered()`` may hide
a tool until a later step, which is still the agent's tool. ``registered`` reads the toolset tree instead,
naming each function tool as the model calls it (through ``.prefixed()`` and ``.renamed()``).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.toolsets import (
    AbstractToolset,
    CombinedToolset,
    ExternalToolset,
    FunctionToolset,
    PrefixedToolset,
    RenamedToolset,
    WrapperToolset,
)


def registered(toolset: AbstractToolset[Any]) -> set[str]:
    """The names the model calls ``toolset``'s function and external tools by, hidden ones included.

    A toolset that lists its tools only when asked (an MCP server, a dynamic toolset) adds none here: its
    tools are the ones a request offers.
    """
    if isinstance(toolset, CombinedToolset):
        return set().union(*(registered(child) for child in toolset.toolsets))
    if isinstance(toolset, PrefixedToolset):
        return {f"{toolset.prefix}_{name}" for name in registered(toolset.wrapped)}
    if isinstance(toolset, RenamedToolset):
        new_names = {original: new for new, original in toolset.name_map.items()}
        return {new_names.get(name, name) for name in registered(toolset.wrapped)}
    if isinstance(toolset, WrapperToolset):  # prepared, filtered, approval-required, ...: the same names
        return registered(toolset.wrapped)
    if isinstance(toolset, FunctionToolset):
        return set(toolset.tools)
    if isinstance(toolset, ExternalToolset):
        return {tool.name for tool in toolset.tool_defs}
    return set()
