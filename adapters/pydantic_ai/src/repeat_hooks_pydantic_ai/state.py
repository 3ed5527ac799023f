"""Where the guard's state lives on pydantic-ai, and how a caller reads what the guard did.

- **The counts**: a turn is a user message. ``RepeatGuard.for_run`` gives each run its own copy of the
  guard holding its own ``GuardState``, so concurrent runs of one agent never share counts, and nothing
  is saved anywhere but in the messages. A run given a user prompt starts a turn; a run given none (a
  resume: ``deferred_tool_results=``, ``message_history=`` of a stopped or paused run, a workflow's
  ``continue_as_new``) continues the history's last turn, its counts rebuilt from the history by
  replaying its model responses and tool returns through the policy (``rebuild``). Each model
  response the guard saw carries its turn's id in ``metadata`` (``TURN_KEY``), which says where the
  turn began. Under durable execution (``pydantic_ai.durable_exec``) the workflow replays the run, and
  with it every decision.
- **What the guard did** lives in the message history, which the caller keeps anyway:

  - Refusals: each refused call's ``ToolReturnPart`` carries the ``Refusal`` in its ``metadata`` (kept in
    the message history, never sent to the model); ``refusals_of(result)`` lists them.
  - A call a person approved with other arguments: its return's ``metadata`` holds them (``EDIT_KEY``).
  - Plain text output (``output_type=str``, or a union that includes ``str``; ``on_stop="output"``): the
    run ends normally and ``result.output`` is the stop message (output validators never see it). The
    run's last message is a ``ModelResponse`` the guard wrote in place of a model call
    (``model_name="repeat-hooks"``); ``stop_of(result)`` reads the ``Stop`` (reason and message) back
    from it, also later, from a saved message history.
  - Otherwise (an output function such as ``TextOutput(fn)``, structured output only, or
    ``on_stop="raise"``): no value of the output type can say "stopped", so the run raises
    ``RepeatGuardStopped``, carrying the ``Stop`` and the messages so far (``stop_of(error)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition

from repeat_hooks import GuardState, Policy, Refusal, Stop, ToolCall
from repeat_hooks.kit import CostOf

from .calls import FailureCheck, tool_call

GUARD_NAME = "repeat-hooks"
"""``model_name`` and ``provider_name`` of the response the guard writes when it ends a run."""
STOP_KEY = "repeat_hooks_stop"
"""The key of the ``Stop`` in that response's ``provider_details``."""
REFUSAL_KEY = "repeat_hooks_refusal"
"""The key of the ``Refusal`` in a refused call's ``ToolReturnPart.metadata``."""
EDIT_KEY = "repeat_hooks_edited"
"""The key of the arguments a person approved a call with (``override_args``) in its return's ``metadata``."""
TURN_KEY = "repeat_hooks_turn"
"""The key of the turn's id in the ``metadata`` of each model response the guard saw (never sent to the model)."""
DECIDED_KINDS = frozenset({"function", "unapproved"})
"""The tool kinds whose calls the guard decides: ones the agent runs, with or without a person's approval
(an approval-required call is decided before anyone is asked)."""

Batch = dict[str, tuple[ToolCall, "Refusal | None"]]
"""One model response's decided calls: call id -> the call and its decision (``None``: it may run)."""


class RepeatGuardStopped(AgentRunError):
    """The guard ended a run whose ``output_type`` has no text branch (raised from the run).

    ``stop`` says why (``stop.reason``) and what to tell the user (``stop.message``); ``messages`` holds
    the run's messages so far (continue the conversation with ``message_history=error.messages``).
    Under Temporal it is an ``AgentRunError``, so it fails the workflow, not the workflow task: catch it
    in the workflow to return a value instead.
    """

    def __init__(self, stop: Stop, messages: Sequence[ModelMessage] = ()) -> None:
        super().__init__(f"repeat guard stopped the run ({stop.reason.value}): {stop.message}")
        self.stop = stop
        """The stop: ``reason`` (a ``StopReason``) and ``message``."""
        self.messages = list(messages)
        """The run's messages when it stopped (history included), for ``message_history=``."""

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.stop, self.messages)


def stop_response(stop: Stop, turn_id: str | None = None) -> ModelResponse:
    """The response the guard puts in place of a model call to end a text-output run (stamped with its turn)."""
    return ModelResponse(
        parts=[TextPart(stop.message)],
        model_name=GUARD_NAME,
        provider_name=GUARD_NAME,
        provider_details={STOP_KEY: stop.model_dump(mode="json")},
        finish_reason="stop",
        metadata=None if turn_id is None else {TURN_KEY: turn_id},
    )


def stop_of(result: Any) -> Stop | None:
    """The guard's ``Stop`` if it ended this run, else ``None``.

    ``result``: an ``AgentRunResult`` / ``StreamedRunResult`` (anything with ``all_messages()``), a
    ``RepeatGuardStopped``, or a list of messages (a saved history: the last run's stop).
    """
    if isinstance(result, RepeatGuardStopped):
        return result.stop
    messages: Sequence[ModelMessage] = result.all_messages() if hasattr(result, "all_messages") else result
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            details = message.provider_details or {}
            found = details.get(STOP_KEY) if message.provider_name == GUARD_NAME else None
            return None if found is None else Stop.model_validate(found)
    return None


def refusal_return(refusal: Refusal) -> ToolReturn[str]:
    """What a refused call returns: the refusal text for the model, the ``Refusal`` in the metadata."""
    return ToolReturn(refusal.message, metadata={REFUSAL_KEY: refusal.model_dump(mode="json")})


def refusals_of(result: Any) -> list[tuple[str, Refusal]]:
    """``(tool name, Refusal)`` for each call the guard refused, in order.

    ``result``: a run result (its ``new_messages()``: this run's refusals), a ``RepeatGuardStopped``, or
    a list of messages (every refusal in them).
    """
    if isinstance(result, RepeatGuardStopped):
        messages: Sequence[ModelMessage] = result.messages
    elif hasattr(result, "new_messages"):
        messages = result.new_messages()
    else:
        messages = result
    found: list[tuple[str, Refusal]] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            metadata = part.metadata if isinstance(part, ToolReturnPart) else None
            if isinstance(part, ToolReturnPart) and isinstance(metadata, dict) and REFUSAL_KEY in metadata:
                found.append((part.tool_name, Refusal.model_validate(metadata[REFUSAL_KEY])))
    return found


# -- a continued turn, rebuilt from the history ------------------------------------------------------


@dataclass
class Rebuilt:
    """A turn's counts rebuilt from the messages: the ``state``, and the decided calls of its last
    response (``batch``), which a resume with ``deferred_tool_results=`` goes on to run."""

    state: GuardState
    batch: Batch = field(default_factory=dict)


def mark_edited(result: Any, arguments: Any) -> ToolReturn[Any]:
    """``result`` (a tool's return, or a refusal) marked with the arguments a person approved the call with,
    in the ``ToolReturnPart``'s ``metadata`` (never sent to the model): pydantic-ai's history keeps the model's
    arguments only, and a resume must rebuild the call that ran."""
    if isinstance(result, ToolReturn):
        returned: ToolReturn[Any] = result
        metadata = returned.metadata if isinstance(returned.metadata, dict) else {}
        return replace(returned, metadata={**metadata, EDIT_KEY: arguments})
    return ToolReturn(result, metadata={EDIT_KEY: arguments})


def stamp(response: ModelResponse, turn_id: str | None) -> ModelResponse:
    """``response`` with its turn's id in its ``metadata`` (kept in the history, never sent to the model)."""
    if turn_id is None:
        return response
    return replace(response, metadata={**(response.metadata or {}), TURN_KEY: turn_id})


def turn_of(response: ModelResponse) -> str | None:
    """The turn id the guard stamped on ``response``, if any."""
    metadata = response.metadata
    found = metadata.get(TURN_KEY) if isinstance(metadata, Mapping) else None
    return found if isinstance(found, str) else None


def last_turn(messages: Sequence[ModelMessage]) -> tuple[str | None, int]:
    """The history's last turn: its id and the index of its first message to replay.

    Read backwards, whichever comes first: a response the guard stamped (the turn is that stamp's, from
    the first response stamped with it), or a request opening a turn (a user prompt and no tool return:
    the turn starts after it, its id is that request's ``run_id``; a history no guard stamped, or a turn
    whose responses were not stamped, as a streamed run's final response is not). ``(None,
    len(messages))`` when there is no turn to continue.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse):
            turn_id = turn_of(message)
            if turn_id is not None:
                start = next(
                    i for i, m in enumerate(messages) if isinstance(m, ModelResponse) and turn_of(m) == turn_id
                )
                return turn_id, start
        elif _holds_prompt(message):
            return message.run_id, index + 1
    return None, len(messages)


def _holds_prompt(request: ModelRequest) -> bool:
    """A request that opens a turn: a user prompt, and no tool return (whose ``content`` may travel as one)."""
    parts = request.parts
    return any(isinstance(part, UserPromptPart) for part in parts) and not any(
        isinstance(part, (ToolReturnPart, RetryPromptPart)) for part in parts
    )


def rebuild(
    policy: Policy,
    messages: Sequence[ModelMessage],
    *,
    turn_id: str | None,
    start: int,
    tools: Callable[[str], ToolDefinition | None],
    cost: CostOf | None = None,
    is_failure: FailureCheck | None = None,
) -> Rebuilt:
    """Replay turn ``turn_id`` (``messages[start:]``) through ``policy``, as the live hooks saw it.

    Each model response is a model call (``decide_model_call``, then ``record_model_call`` with the
    seconds between its request's and its own timestamps and the cost of its ``usage``), then its calls
    of tools the agent runs (``tools(name).kind`` in ``DECIDED_KINDS``) decided as one batch; each tool
    return of the next request is recorded against its call: a success with its content (what the model
    read of the return value), a failed or retried return as a failure, a denied one (a person said no)
    withdrawn (it never ran), a refusal as nothing (its decision was the refusal). The guard's own stop
    response sets the turn's stop. No clock, no I/O: the same messages rebuild the same state.
    """
    state = GuardState()
    policy.start_turn(state, turn_id=turn_id)
    batch: Batch = {}
    asked_at = None
    for message in messages[start:]:
        if isinstance(message, ModelRequest):
            for returned in message.parts:
                decided = batch.get(getattr(returned, "tool_call_id", None) or "")
                if decided is not None and decided[1] is None:
                    _replay_return(policy, state, decided[0], returned, turn_id, is_failure)
            asked_at = message.timestamp
            continue
        if message.provider_name == GUARD_NAME:
            found = (message.provider_details or {}).get(STOP_KEY)
            if found is not None:
                state.turn.stop = Stop.model_validate(found)
                break
        if policy.decide_model_call(state, turn_id=turn_id) is not None:
            break
        seconds = (message.timestamp - asked_at).total_seconds() if asked_at is not None else 0.0
        policy.record_model_call(
            state,
            seconds=max(seconds, 0.0),
            cost_usd=cost(message.usage) if cost is not None else 0.0,
            turn_id=turn_id,
        )
        parts: list[ToolCallPart] = []
        calls: list[ToolCall] = []
        for part in message.tool_calls:
            tool = tools(part.tool_name)
            if tool is not None and tool.kind in DECIDED_KINDS:
                parts.append(part)
                calls.append(tool_call(part, tool))
        decisions = policy.decide_tool_calls(state, calls, turn_id=turn_id)
        batch = {
            part.tool_call_id: (call, decision) for part, call, decision in zip(parts, calls, decisions, strict=True)
        }
    return Rebuilt(state, batch)


def _replay_return(
    policy: Policy, state: GuardState, call: ToolCall, part: Any, turn_id: str | None, is_failure: FailureCheck | None
) -> None:
    """Record one tool return of the history against its decided ``call``, as the live hooks did."""
    if isinstance(part, RetryPromptPart):  # a deprecated part still in memory: a retry of the call
        policy.record_tool_result(state, call, ok=False, result=part.content, turn_id=turn_id)
        return
    if not isinstance(part, ToolReturnPart):
        return
    metadata = part.metadata
    if isinstance(metadata, dict) and EDIT_KEY in metadata:  # a person edited it: the edited call ran
        policy.record_rejection(state, call, turn_id=turn_id)
        call = replace(call, arguments=metadata[EDIT_KEY])
        if policy.decide_tool_call(state, call, turn_id=turn_id) is not None:
            return  # the edited call was refused: its refusal is the return
    outcome = part.outcome
    if outcome == "denied":
        policy.record_rejection(state, call, turn_id=turn_id)
    elif outcome == "failed":
        result = part.model_response_str(wrap_if_error=False)
        policy.record_tool_result(state, call, ok=False, result=result, turn_id=turn_id)
    elif outcome == "retried":
        policy.record_tool_result(state, call, ok=False, result=part.content, turn_id=turn_id)
    elif outcome == "success":
        failed = is_failure is not None and bool(is_failure(part.content))
        policy.record_tool_result(state, call, ok=not failed, result=part.content, turn_id=turn_id)
    # "interrupted": it may have run, and returned nothing: it stays counted, with no outcome
