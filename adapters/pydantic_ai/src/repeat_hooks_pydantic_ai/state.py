"""Where the guard's state lives on pydantic-ai, and how a caller reads what the guard did.

- **The counts**: one run is one turn. ``RepeatGuard.for_run`` gives each run its own copy of the guard
  holding a fresh ``GuardState``, so nothing is loaded or saved: a new run (``message_history=`` or not)
  starts new counts, and concurrent runs of one agent never share them. Under durable execution
  (``pydantic_ai.durable_exec``) the workflow replays the run, and with it every decision.
- **What the guard did** lives in the message history, which the caller keeps anyway:

  - Refusals: each refused call's ``ToolReturnPart`` carries the ``Refusal`` in its ``metadata`` (kept in
    the message history, never sent to the model); ``refusals_of(result)`` lists them.
  - Text output (``output_type=str``, or a union that includes ``str``): the run ends normally and
    ``result.output`` is the stop message. The run's last message is a ``ModelResponse`` the guard wrote
    in place of a model call (``model_name="repeat-hooks"``); ``stop_of(result)`` reads the ``Stop``
    (reason and message) back from it, also later, from a saved message history.
  - Structured output only (no ``str`` in ``output_type``): no value of the output type can say "stopped",
    so the run raises ``RepeatGuardStopped``, carrying the ``Stop`` and the messages so far
    (``stop_of(error)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturn, ToolReturnPart

from repeat_hooks import Refusal, Stop

GUARD_NAME = "repeat-hooks"
"""``model_name`` and ``provider_name`` of the response the guard writes when it ends a run."""
STOP_KEY = "repeat_hooks_stop"
"""The key of the ``Stop`` in that response's ``provider_details``."""
REFUSAL_KEY = "repeat_hooks_refusal"
"""The key of the ``Refusal`` in a refused call's ``ToolReturnPart.metadata``."""


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


def stop_response(stop: Stop) -> ModelResponse:
    """The response the guard puts in place of a model call to end a text-output run."""
    return ModelResponse(
        parts=[TextPart(stop.message)],
        model_name=GUARD_NAME,
        provider_name=GUARD_NAME,
        provider_details={STOP_KEY: stop.model_dump(mode="json")},
        finish_reason="stop",
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
