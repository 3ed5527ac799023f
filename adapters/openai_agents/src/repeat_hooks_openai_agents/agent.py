"""``guard_agent``: a guarded clone of an agent and of every agent it can hand off to.

What changes on the clone (the agent you pass in, its tools and its handoffs are never modified):

- every ``FunctionTool`` is copied with ``dataclasses.replace`` and gets the adapter's input
  guardrail (refuse repeats) and output guardrail (record the outcome), after its own;
- ``tool_use_behavior`` becomes ``EndTurn(original)``, which ends the turn with the guard's message
  and delegates to the original otherwise;
- handoff targets (``Agent`` entries and ``handoff()`` objects) are guarded the same way, once each,
  cycles included, so counting continues in the same turn after a handoff;
- local MCP servers get the input and output guardrails in their ``tool_input_guardrails`` /
  ``tool_output_guardrails`` (the SDK builds MCP tools from those on every run). The server object
  is shared, so this is the one change made in place; the server's guardrail does nothing for a run
  whose context holds no guard. Each call carries the server's ``readOnlyHint`` for its tool;
- ``hooks`` becomes ``RequireGuardHooks(original)``: your agent hooks still fire, and the first model
  call of a run without ``GuardHooks`` raises ``GuardSetupError`` instead of counting into a stale turn.

Out of reach: hosted tools (web search, file search, code interpreter, hosted MCP, image
generation) run at OpenAI and never pass through a guardrail; shell, apply_patch, computer and
custom tools have no input guardrails (use their ``needs_approval`` / ``on_approval``). They are
left as they are and not counted. An agent used as a tool (``other.as_tool()``) is guarded as a
call; to guard the tools *inside* it, build the tool from a guarded agent:
``guard_agent(other).as_tool(...)``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, TypeVar

from agents import Agent, FunctionTool, Handoff, RunContextWrapper, Tool

from .behavior import EndTurn
from .guardrails import FailureCheck, McpHints, is_ours, record_outcome, refuse_repeats, refuse_repeats_on_server
from .hooks import RequireGuardHooks

TContext = TypeVar("TContext")


def guard_agent(agent: Agent[TContext], *, is_failure: FailureCheck | None = None) -> Agent[TContext]:
    """A guarded clone of ``agent``; call it once at start-up and share the result across runs.

    The clone keeps no state: the counters live in each run's context (a ``StopRepeatedCalls``, or
    an object holding one in ``repeat_guard``), so concurrent runs with different contexts do not
    see each other. Run it with ``hooks=GuardHooks()``.

    ``is_failure(output) -> bool`` marks tool outputs that mean the call failed, on top of the SDK's
    own error text for a tool that raised or timed out (``is_sdk_error``). Guarding a guarded agent
    returns an equivalent clone (nothing is attached twice).
    """
    return _Guarding(is_failure).agent(agent)


class _Guarding:
    """One guard_agent call: guards each agent of the handoff graph once."""

    def __init__(self, is_failure: FailureCheck | None) -> None:
        self.is_failure = is_failure
        self.outcome = record_outcome(is_failure)
        self.done: dict[int, tuple[Agent[Any], Agent[Any]]] = {}

    def agent(self, agent: Agent[TContext]) -> Agent[TContext]:
        done = self.done.get(id(agent))
        if done is not None:
            guarded: Agent[TContext] = done[1]
            return guarded
        clone = agent.clone(
            tools=[self.tool(tool) for tool in agent.tools],
            tool_use_behavior=EndTurn(agent.tool_use_behavior),
            hooks=RequireGuardHooks(agent.hooks),
        )
        self.done[id(agent)] = (agent, clone)  # before the handoffs: they may lead back here
        clone.handoffs = [self.handoff(entry) for entry in agent.handoffs]
        for server in agent.mcp_servers:
            inputs = list(server.tool_input_guardrails or [])
            if not any(is_ours(g) for g in inputs):
                server.tool_input_guardrails = [*inputs, refuse_repeats_on_server(server)]
            outputs = list(server.tool_output_guardrails or [])
            if not any(is_ours(g) for g in outputs):
                server.tool_output_guardrails = [*outputs, record_outcome(self.is_failure, McpHints(server))]
        return clone

    def tool(self, tool: Tool) -> Tool:
        if not isinstance(tool, FunctionTool):
            return tool  # hosted, shell, computer, ... tools: no input guardrails (see module doc)
        inputs = [g for g in tool.tool_input_guardrails or [] if not is_ours(g)]
        outputs = [g for g in tool.tool_output_guardrails or [] if not is_ours(g)]
        return dataclasses.replace(
            tool, tool_input_guardrails=[*inputs, refuse_repeats], tool_output_guardrails=[*outputs, self.outcome]
        )

    def handoff(self, entry: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(entry, Agent):
            return self.agent(entry)
        reference = entry._agent_ref  # the SDK's own link to the target, used to resume a RunState
        target = reference() if reference is not None else None
        guarded_target = self.agent(target) if isinstance(target, Agent) else None
        invoke = entry.on_invoke_handoff

        async def on_invoke_handoff(context: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
            chosen = await invoke(context, arguments)
            if guarded_target is not None and chosen is target:
                return guarded_target
            return self.agent(chosen)

        copy = dataclasses.replace(entry, on_invoke_handoff=on_invoke_handoff)
        if guarded_target is not None:
            copy._agent_ref = weakref.ref(guarded_target)
        return copy
