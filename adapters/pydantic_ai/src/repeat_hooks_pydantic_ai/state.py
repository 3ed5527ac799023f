"""Where the state lives: in a store under the run's conversation id, or in the run's own ``Run`` (rebuilt from
the history for a continued turn); what the guard did, in the messages (``stop_of``, ``refusals_of``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturn, ToolReturnPart, UserPromptPart
from pydantic_ai.messages import RetryPromptPart

from repeat_hooks import GuardState, Policy, Refusal, Stop, ToolCall
from repeat_hooks.kit import Batch, GuardCore, GuardStopped, Stopwatch

from .calls import Tools, decided_calls

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


@dataclass
class Run:
    """One run's own: its turn, where its state is (``key`` in the store, else ``state``: this is its ``Slot``), a
    continued turn's ``history`` to rebuild, its latest response's ``batch``, its stop; ``fresh``: names to check."""

    watch: Stopwatch
    turn_id: str | None = None
    key: str | None = None
    state: GuardState = field(default_factory=GuardState)
    history: tuple[list[ModelMessage], int] | None = None
    batch: Batch = field(default_factory=Batch)
    stop: Stop | None = None
    fresh: bool = False

    def read(self) -> GuardState:
        return self.state

    def write(self, state: GuardState) -> None:
        self.state = state


def stop_response(stop: Stop, turn_id: str | None = None) -> ModelResponse:
    """The response the guard puts in place of a model call to end a text-output run."""
    details = {STOP_KEY: stop.model_dump(mode="json")}
    response = ModelResponse([TextPart(stop.message)], model_name=GUARD_NAME, provider_details=details)
    return stamp(replace(response, provider_name=GUARD_NAME, finish_reason="stop"), turn_id)


def stop_of(result: Any, /) -> Stop | None:
    """The guard's ``Stop`` if it ended this run, else ``None``: of a run result (anything with ``all_messages()``),
    a ``RepeatGuardStopped``, or a saved history (its last run's). The whole ``Stop`` is in the messages. Anything
    else: ``GuardSetupError``."""
    if isinstance(result, BaseException):
        return GuardStopped.of(result)
    messages: Sequence[ModelMessage] = result.all_messages() if hasattr(result, "all_messages") else result
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        from .guard import GuardSetupError  # (guard.py imports this module)

        wants = "stop_of takes what agent.run returned (an AgentRunResult), its messages, or a RepeatGuardStopped"
        raise GuardSetupError(f"{wants}; got {type(result).__name__}")
    last = next((message for message in reversed(messages) if isinstance(message, ModelResponse)), None)
    found = (last.provider_details or {}).get(STOP_KEY) if last and last.provider_name == GUARD_NAME else None
    return None if found is None else Stop.model_validate(found)


def as_return(refusal: Refusal) -> ToolReturn[str]:
    """What a refused call returns: the refusal text for the model, the ``Refusal`` in the metadata."""
    return ToolReturn(refusal.message, metadata={REFUSAL_KEY: refusal.model_dump(mode="json")})


def refusals_of(result: Any, /) -> list[tuple[str, Refusal]]:
    """``(tool name, Refusal)`` for each call the guard refused, in order: of a run result (its
    ``new_messages()``), of a ``RepeatGuardStopped`` (its ``messages``), or of a list of messages."""
    if isinstance(result, GuardStopped):
        messages: Sequence[ModelMessage] = getattr(result, "messages", [])
    elif hasattr(result, "new_messages"):
        messages = result.new_messages()
    else:
        messages = result
    return [
        (part.tool_name, Refusal.model_validate(part.metadata[REFUSAL_KEY]))
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and isinstance(part.metadata, dict) and REFUSAL_KEY in part.metadata
    ]


def mark_edited(result: Any, arguments: Any) -> ToolReturn[Any]:
    """``result`` marked with the arguments a person approved the call with, for a resume to rebuild the call."""
    if not isinstance(result, ToolReturn):
        return ToolReturn(result, metadata={EDIT_KEY: arguments})
    metadata = result.metadata if isinstance(result.metadata, dict) else {}
    return replace(result, metadata={**metadata, EDIT_KEY: arguments})


def stamp(response: ModelResponse, turn_id: str | None) -> ModelResponse:
    """``response`` with its turn's id in its ``metadata`` (never sent to the model)."""
    if turn_id is None:
        return response
    return replace(response, metadata={**(response.metadata or {}), TURN_KEY: turn_id})


def turn_of(response: ModelResponse) -> str | None:
    metadata = response.metadata
    found = metadata.get(TURN_KEY) if isinstance(metadata, Mapping) else None
    return found if isinstance(found, str) else None


def last_turn(messages: Sequence[ModelMessage]) -> tuple[str | None, int]:
    """The history's last turn, its id and first index: the latest stamped response's (from its first response),
    or after the latest request opening one (a prompt, no tool return); ``(None, len(messages))``: none."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse):
            turn_id = turn_of(message)
            if turn_id is not None:
                start = next(
                    i for i, m in enumerate(messages) if isinstance(m, ModelResponse) and turn_of(m) == turn_id
                )
                return turn_id, start
        elif any(isinstance(part, UserPromptPart) for part in message.parts) and not any(
            isinstance(part, (ToolReturnPart, RetryPromptPart)) for part in message.parts
        ):
            return message.run_id, index + 1
    return None, len(messages)


def rebuild(
    policy: Policy, messages: Sequence[ModelMessage], turn_id: str | None, start: int, tools: Tools, core: GuardCore
) -> tuple[GuardState, Batch]:
    """Replay turn ``turn_id`` (``messages[start:]``) through ``policy`` as the live hooks saw it: the state (never
    listening: the observers heard it live), and the decided calls of its last response."""
    state, batch, asked_at = GuardState(), Batch(), None
    policy.start_turn(state, turn_id=turn_id)

    def replay(call: ToolCall, part: ToolReturnPart | RetryPromptPart) -> None:
        metadata = getattr(part, "metadata", None)
        if isinstance(metadata, dict) and EDIT_KEY in metadata:  # a person edited it: the edited call ran
            policy.record_rejection(state, call, turn_id=turn_id)
            call = replace(call, arguments=metadata[EDIT_KEY])
            if policy.decide_tool_call(state, call, turn_id=turn_id) is not None:
                return  # the edited call was refused: its refusal is the return
        result: Any = part.content
        if isinstance(part, RetryPromptPart):  # a deprecated part still in memory: a retry of the call
            outcome = "retried"
        else:
            outcome = part.outcome
            result = part.model_response_str(wrap_if_error=False) if outcome == "failed" else result
        if outcome == "denied":
            policy.record_rejection(state, call, turn_id=turn_id)
        elif outcome != "interrupted":  # interrupted: it may have run, and stays counted with no outcome
            ok = outcome == "success" and core.ok(True, result)
            policy.record_tool_result(state, call, ok=ok, result=result, turn_id=turn_id)

    for message in messages[start:]:
        if isinstance(message, ModelRequest):
            for returned in message.parts:
                if isinstance(returned, (ToolReturnPart, RetryPromptPart)) and returned.tool_name:
                    entry = batch.settle(returned.tool_name, returned.tool_call_id, claimed=False)
                    if entry is not None and entry.refusal is None:
                        replay(entry.call, returned)
            asked_at = message.timestamp
            continue
        found = (message.provider_details or {}).get(STOP_KEY) if message.provider_name == GUARD_NAME else None
        if found is not None:
            state.turn.stop = Stop.model_validate(found)
            break
        if policy.decide_model_call(state, turn_id=turn_id) is not None:
            break
        seconds = max((message.timestamp - asked_at).total_seconds(), 0.0) if asked_at is not None else 0.0
        policy.record_model_call(state, seconds=seconds, cost_usd=core.cost_of(message.usage), turn_id=turn_id)
        calls = decided_calls(message, tools)
        batch.decided(calls, policy.decide_tool_calls(state, calls, turn_id=turn_id))
    return state, batch
