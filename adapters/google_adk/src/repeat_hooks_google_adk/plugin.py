"""``RepeatGuardPlugin``: the guard as an ADK Runner plugin.

One plugin instance serves every session and invocation of its runner, concurrently. It holds no
counters: each callback reads the session's ``GuardState`` (see ``session_state``), applies one rule of
the ``Policy`` and writes the state back through ADK's state delta. A turn is one invocation: the
invocation id is the turn id, so sub-agents, ``transfer_to_agent`` and a resumed invocation all count
in the same turn, and the next ``run_async`` starts a new one. An agent used as a tool (``AgentTool``)
runs a nested Runner with an invocation of its own inside the call: it counts in the caller's turn.
The only things kept in the process are per call in flight (whether the call was refused, so its
outcome is not recorded; the enclosing turn, in a context variable of the call's task) and a cache of
the state last written, by identity (``session_state.ParsedStates``).

Which callback does what:

- ``before_tool_callback``: counts the call; a refusal is returned as the tool's response
  (``{"error": <refusal text>}``), so the tool does not run and the model reads the text.
- ``after_tool_callback`` / ``on_tool_error_callback``: the outcome and the result, for the
  error and progress rules.
- ``before_model_callback``: a stop ends the turn with a text-only ``LlmResponse``: the final event
  the caller sees (``event.is_final_response()``), with ``custom_metadata["repeat_hooks_stop"]`` set to
  the stop reason. The model is not called.
- ``after_model_callback``: counts the model call, its seconds and its cost (``usage_metadata``).
- ``before_run_callback``: checks the setup once per invocation (see ``RepeatGuardPlugin``).
- ``on_event_callback``: makes the event's delta carry the latest guard state (parallel calls).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from repeat_hooks import GuardState, Policy, Stop, StopRepeatedCalls

from .calls import error_text, tool_call
from .prices import CostOf
from .session_state import STATE_KEY, ParsedStates

if TYPE_CHECKING:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.tools.tool_context import ToolContext

Clock = Callable[[], float]
"""A clock in seconds, read before and after each model call (``time.monotonic`` by default)."""
FailureCheck = Callable[[dict[str, Any]], bool]
"""Says whether a tool's response dict reports a failure (for tools that return errors instead of raising)."""

STOP_METADATA = "repeat_hooks_stop"
"""The ``custom_metadata`` key of the guard's final event: the stop reason (``"ignored_refusals"``, ...)."""
_MAX_TIMERS = 4096

_enclosing_turn: ContextVar[str | None] = ContextVar("repeat_hooks_enclosing_turn", default=None)
"""The turn of the tool call running in this task: an agent used as a tool (``AgentTool``) runs a
nested Runner inside the call, with an invocation id of its own, which belongs to the caller's turn."""


class RepeatGuardPlugin(BasePlugin):
    """The loop guard for an ADK ``Runner``: ``App(..., plugins=[RepeatGuardPlugin(Policy(...))])``.

    ``policy`` is the settings (a ``Policy``; the state is kept in each session, so a
    ``StopRepeatedCalls``, which carries its own state, is refused). ``prices`` turns a response's
    ``usage_metadata`` into dollars (``token_prices(...)``), for ``max_cost_usd``; ``clock`` times model
    calls, for ``max_model_seconds``; ``is_failure`` says whether a tool's response dict reports a
    failure (tools that raise are failures anyway). ``state_key`` is the session-state key.

    Misuse fails loudly: at construction, a limit that could never trip (``max_cost_usd`` without
    ``prices``, ``max_model_seconds`` without ``clock``); at the start of each invocation, two guard
    plugins on one state key, or a ``RunConfig.max_llm_calls`` lower than ``max_model_calls`` (ADK
    would raise first). ADK re-raises what a plugin raises as a ``RuntimeError`` naming the plugin,
    with the guard's message in it, out of ``run_async``.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        prices: CostOf | None = None,
        clock: Clock | None = time.monotonic,
        is_failure: FailureCheck | None = None,
        state_key: str = STATE_KEY,
        name: str = "repeat_hooks",
    ) -> None:
        super().__init__(name=name)
        if isinstance(policy, StopRepeatedCalls):
            raise TypeError(
                "repeat-hooks: RepeatGuardPlugin takes a Policy, not a StopRepeatedCalls: one plugin serves every "
                "session, and each session keeps its own state. Write RepeatGuardPlugin(Policy(...)) with the same "
                "settings."
            )
        if not isinstance(policy, Policy):
            raise TypeError(
                f"repeat-hooks: RepeatGuardPlugin(policy) needs a repeat_hooks.Policy, got {type(policy).__name__}"
            )
        if policy.max_cost_usd is not None and prices is None:
            raise ValueError(
                "repeat-hooks: Policy(max_cost_usd=...) can never trip without prices: write "
                "RepeatGuardPlugin(policy, prices=token_prices(input_usd_per_million, output_usd_per_million))"
            )
        if policy.max_model_seconds is not None and clock is None:
            raise ValueError(
                "repeat-hooks: Policy(max_model_seconds=...) can never trip without a clock: leave "
                "RepeatGuardPlugin(clock=time.monotonic) as it is, or pass your own"
            )
        if ":" not in state_key or state_key.startswith("temp:"):
            raise ValueError(
                f"repeat-hooks: state_key={state_key!r} must hold a ':' (ADK validates plain keys against an agent's "
                "state_schema) and must not start with 'temp:' (ADK does not persist those); e.g. 'repeat_hooks:guard'"
            )
        self.policy = policy
        """The settings; the counters live in each session's state."""
        self.prices = prices
        self.clock = clock
        self.is_failure = is_failure
        self.state_key = state_key
        self._started: dict[int, float] = {}
        self._states = ParsedStates()
        self._calls: weakref.WeakKeyDictionary[ToolContext, _Call] = weakref.WeakKeyDictionary()

    # -- setup checks --------------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        """Fires once when an invocation starts (and again when one resumes): checks the setup.

        Raises ``ValueError`` for a second guard plugin on the same state key (every call would be
        counted twice) and for ``RunConfig.max_llm_calls`` below ``max_model_calls``. Returns ``None``:
        the turn itself starts lazily, at the first callback that sees the new invocation id.
        """
        guards = [
            plugin
            for plugin in invocation_context.plugin_manager.plugins
            if isinstance(plugin, RepeatGuardPlugin) and plugin.state_key == self.state_key
        ]
        if len(guards) > 1:
            raise ValueError(
                f"repeat-hooks: {len(guards)} RepeatGuardPlugins share the session-state key {self.state_key!r} "
                f"({', '.join(repr(p.name) for p in guards)}): every call would be counted twice. Register one "
                "RepeatGuardPlugin, on the Runner or on the App, not both."
            )
        run_config = invocation_context.run_config
        max_llm_calls = run_config.max_llm_calls if run_config is not None else 0
        limit = self.policy.max_model_calls
        if limit is not None and 0 < max_llm_calls < limit:
            raise ValueError(
                f"repeat-hooks: Policy(max_model_calls={limit}) can never trip: RunConfig(max_llm_calls="
                f"{max_llm_calls}) raises LlmCallsLimitExceededError first. Lower max_model_calls to "
                f"{max_llm_calls} or less, or raise max_llm_calls."
            )
        return None

    # -- tools ---------------------------------------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Fires before each tool call (parallel calls: once each). Returns ``None`` to let it run, or
        ``{"error": <refusal text>}``: ADK then skips the tool and hands the model that response."""
        turn_id = turn_of(tool_context)
        state = self._load(tool_context)
        refusal = self.policy.check_tool_call(state, tool_call(tool, tool_args, None), turn_id)
        self._calls[tool_context] = _Call(refused=refusal is not None)
        if refusal is not None:
            self._states.write(tool_context, state, self.state_key)
            return {"error": refusal.message}
        if isinstance(tool, AgentTool):
            # Its nested Runner starts from a copy of this session's state: the count must be in it.
            self._states.write(tool_context, state, self.state_key)
        else:
            # The call runs: its outcome callback writes the state into this same event's delta.
            # Siblings running in parallel read the staged state meanwhile.
            self._states.stage(tool_context, state, self.state_key)
        _enclosing_turn.set(turn_id)  # this call's task only: ADK runs each call in a task of its own
        return None

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Fires after each tool call, refused ones included (those are not recorded again): records the
        outcome and the result. Returns ``None``: the response is left as it is."""
        ok = True
        if self.is_failure is not None:
            ok = not self.is_failure(result)
        self._record(tool, tool_args, tool_context, ok, result)
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        """Fires when a tool raises (or its name is unknown): records a failure. Returns ``None``, so ADK
        goes on as it would without the guard (another plugin or callback may answer the error; if none
        does, ADK raises it out of the invocation). A cancelled call is not recorded."""
        if isinstance(error, asyncio.CancelledError):
            return None
        self._record(tool, tool_args, tool_context, False, error_text(error))
        return None

    # -- model ---------------------------------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Fires before each model call. Returns ``None`` to let it happen, or, when the turn must stop,
        the final text-only response (the stop message): the model is not called and the agent's turn
        ends with it."""
        turn_id = turn_of(callback_context)
        state = self._load(callback_context)
        stop = self.policy.check_model_call(state, turn_id)  # numbers the response, for max_refusals
        if stop is not None:
            self._states.write(callback_context, state, self.state_key)
            return stop_response(stop)
        # after_model_callback (or on_model_error_callback) writes into this same event's delta.
        self._states.stage(callback_context, state, self.state_key)
        if self.clock is not None:
            if len(self._started) >= _MAX_TIMERS:
                del self._started[next(iter(self._started))]
            self._started[id(callback_context.actions)] = self.clock()
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Fires after each model response; a streamed call's partial chunks are skipped, its final
        response counts once. Records the call with its seconds and its cost. Returns ``None``."""
        if llm_response.partial:
            return None
        seconds = 0.0
        if self.clock is not None:
            started = self._started.pop(id(callback_context.actions), None)
            if started is not None:
                seconds = self.clock() - started
        cost = 0.0
        if self.prices is not None and llm_response.usage_metadata is not None:
            cost = self.prices(llm_response.usage_metadata)
        state = self._load(callback_context)
        self.policy.record_model_call(state, seconds, cost, turn_id=turn_of(callback_context))
        self._states.write(callback_context, state, self.state_key)
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """Fires when a model call raises: forgets its start time and writes the state. Returns ``None``
        (ADK raises the error, unless another plugin or callback answers it)."""
        self._started.pop(id(callback_context.actions), None)
        self._states.write(callback_context, self._load(callback_context), self.state_key)
        return None

    # -- events --------------------------------------------------------------------------------

    async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> Event | None:
        """Fires for each event before the session service appends it. When the event carries the guard's
        state, makes it the latest one: ADK merges the deltas of parallel calls key by key, which could
        persist a mix of two calls' writes. Returns ``None`` (the event, changed in place)."""
        delta = event.actions.state_delta
        if self.state_key in delta:
            latest = invocation_context.session.state.get(self.state_key)
            if latest is not None:
                delta[self.state_key] = latest
        return None

    # -- helpers -------------------------------------------------------------------------------

    def _load(self, context: CallbackContext) -> GuardState:
        return self._states.read(context.session, self.state_key)

    def _record(
        self, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, ok: bool, result: Any
    ) -> None:
        # Only calls this plugin counted get an outcome, and once: not a refused call (ADK runs the after
        # callbacks on the refusal too), not one another plugin answered before us, and not twice when an
        # error callback answered an error (ADK then runs the after callbacks as well).
        call = self._calls.get(tool_context)
        if call is None or call.refused or call.settled:
            return
        call.settled = True
        state = self._load(tool_context)
        core_call = tool_call(tool, tool_args, None)
        self.policy.record_tool_result(state, core_call, ok, turn_of(tool_context), result=result)
        self._states.write(tool_context, state, self.state_key)


@dataclass
class _Call:
    """One call in flight, from ``before_tool_callback`` to its outcome (kept with its ``ToolContext``)."""

    refused: bool
    settled: bool = False


def turn_of(context: CallbackContext) -> str:
    """The turn a callback belongs to: its invocation's id, or, inside a nested run of an agent used as a
    tool, the id of the turn whose tool call runs it."""
    enclosing = _enclosing_turn.get()
    return enclosing if enclosing is not None else context.invocation_id


def stop_response(stop: Stop) -> LlmResponse:
    """The response that ends a turn: the stop message as the model's text, the reason in ``custom_metadata``."""
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=stop.message)]),
        custom_metadata={STOP_METADATA: stop.reason.value},
    )
