"""Where the state lives: in a store under the run's conversation id, or in the run's own ``Run`` (rebuilt from
the history for a continued turn); what the guard did, in the messages (``stop_of``, ``refusals_of``; a return
with the guard's note after it, ``noted_part``, and the tool's own, ``unnoted_part``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturn, ToolReturnPart, UserPromptPart
from pydantic_ai.messages import RetryPromptPart, is_multi_modal_content

from repeat_hooks import GuardState, Policy, Refusal, Stop, ToolCall
from repeat_hooks.kit import Batch, GuardCore, GuardStopped, Stopwatch, noted, unnoted

from .calls import DECIDED_KINDS, Tools, decided_calls, tool_call

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
NOTE_KEY = "repeat_hooks_note"
"""The key, in the ``metadata`` of a return the guard put its note after (``Policy(warn=True)``), of ``{"note": ...}``,
with the tool's own ``content`` where the note made a value text (``noted_part``)."""
NOTED_OUTCOMES = frozenset({"success", "failed", "retried"})
"""The outcomes of a return the guard may put its note after: a call that ran, or was answered as a failure (never
a denied or interrupted one, nor a refusal)."""


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


def refused_part(part: ToolReturnPart, refusal: Refusal) -> ToolReturnPart:
    """``part``, pydantic-ai's retry of a call no tool hook saw, answered with ``refusal`` instead: the return a
    refused call has (its text for the model, the ``Refusal`` in the metadata), its name, id and time kept."""
    metadata = {REFUSAL_KEY: refusal.model_dump(mode="json")}
    return replace(part, content=refusal.message, outcome="success", retry=None, metadata=metadata)


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


def answered(messages: Sequence[ModelMessage], tools: Tools) -> list[tuple[ToolReturnPart, ToolCall]]:
    """The returns in the history's last request (the one being sent) the guard may put its note after, each with
    the call it answers in the last response (as a person approved it, for an edited one): of calls the guard
    decides (``DECIDED_KINDS``, or a name the agent lacks), with an outcome in ``NOTED_OUTCOMES``, not a refusal,
    not noted yet."""
    request = messages[-1] if messages else None
    if not isinstance(request, ModelRequest):
        return []
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    asked = {(c.tool_name, c.tool_call_id): c for c in response.tool_calls} if response is not None else {}
    found: list[tuple[ToolReturnPart, ToolCall]] = []
    for part in request.parts:
        if not isinstance(part, ToolReturnPart) or part.outcome not in NOTED_OUTCOMES or _has_note(part):
            continue
        metadata = part.metadata if isinstance(part.metadata, dict) else {}
        call, tool = asked.get((part.tool_name, part.tool_call_id)), tools(part.tool_name)
        if REFUSAL_KEY in metadata or call is None or (tool is not None and tool.kind not in DECIDED_KINDS):
            continue
        decided = tool_call(call, tool)
        found.append((part, replace(decided, arguments=metadata[EDIT_KEY]) if EDIT_KEY in metadata else decided))
    return found


def noted_part(part: ToolReturnPart, note: str) -> ToolReturnPart:
    """``part`` with the guard's ``note`` after its content, as the model reads it: after a text (``kit.noted``), as
    the last item of a list, after a file; a value (a dict, a number...) becomes its text as pydantic-ai sends it,
    then the note. ``metadata[NOTE_KEY]`` holds the note (and the value), so ``unnoted_part`` gives the tool's own
    back; a ``metadata`` that is not a dict is left as it is."""
    content: Any = part.content
    marker: dict[str, Any] = {"note": note}
    if isinstance(content, str):
        new: Any = noted(content, note)
    elif isinstance(content, list):
        new = [*content, note]
    elif is_multi_modal_content(content):
        new, marker["item"] = [content, note], True
    else:
        new, marker["content"] = noted(part.model_response_str(wrap_if_error=False), note), content
    metadata = part.metadata
    if metadata is None or isinstance(metadata, dict):
        metadata = {**(metadata or {}), NOTE_KEY: marker}
    return replace(part, content=new, metadata=metadata)


def unnoted_part(part: ToolReturnPart) -> ToolReturnPart:
    """``part`` as the tool returned it: without the guard's note (``noted_part``), or ``part`` itself."""
    metadata = part.metadata
    marker = metadata.get(NOTE_KEY) if isinstance(metadata, dict) else None
    content: Any = part.content
    if isinstance(marker, dict) and "content" in marker:
        own: Any = marker["content"]
    elif isinstance(content, str) and unnoted(content) != content:
        own = unnoted(content)
    elif isinstance(content, list) and content and _is_note(content[-1]):
        own = content[:-1]
        own = own[0] if isinstance(marker, dict) and marker.get("item") and len(own) == 1 else own
    else:
        return part
    if isinstance(metadata, dict) and NOTE_KEY in metadata:
        metadata = {key: value for key, value in metadata.items() if key != NOTE_KEY} or None
    return replace(part, content=own, metadata=metadata)


def _is_note(item: object) -> bool:
    return isinstance(item, str) and unnoted("\n\n" + item) == ""


def _has_note(part: ToolReturnPart) -> bool:
    """``part`` already carries the guard's note (a request sent again: one note a return)."""
    metadata = part.metadata
    return (isinstance(metadata, dict) and NOTE_KEY in metadata) or unnoted_part(part) is not part


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
    policy: Policy,
    messages: Sequence[ModelMessage],
    turn_id: str | None,
    start: int,
    tools: Tools | None,
    core: GuardCore,
) -> tuple[GuardState, Batch]:
    """Replay turn ``turn_id`` (``messages[start:]``) through ``policy`` as the live hooks saw it: the state (never
    listening: the observers heard it live), and the decided calls of its last response (``tools`` ``None``: the
    run's tools are not known yet, and no call is replayed)."""
    state, batch, asked_at = GuardState(), Batch(), None
    policy.start_turn(state, turn_id=turn_id)

    def replay(call: ToolCall, part: ToolReturnPart | RetryPromptPart) -> None:
        metadata = getattr(part, "metadata", None)
        if isinstance(metadata, dict) and EDIT_KEY in metadata:  # a person edited it: the edited call ran
            policy.record_rejection(state, call, turn_id=turn_id)
            call = replace(call, arguments=metadata[EDIT_KEY])
            if policy.decide_tool_call(state, call, turn_id=turn_id) is not None:
                return  # the edited call was refused: its refusal is the return
        if isinstance(part, ToolReturnPart):
            part = unnoted_part(part)  # what the tool returned, as the live hook recorded it
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
        calls = decided_calls(message, tools) if tools is not None else []
        batch.decided(calls, policy.decide_tool_calls(state, calls, turn_id=turn_id))
    return state, batch
