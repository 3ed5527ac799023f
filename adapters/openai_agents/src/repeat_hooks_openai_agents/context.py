"""Where the guard lives: in the run context, so every run carries its own counters.

The context you pass to ``Runner.run(..., context=...)`` is either the ``StopRepeatedCalls`` itself,
or your own object holding one in a ``repeat_guard`` attribute. Nothing else is looked at, so one
guarded agent can serve any number of concurrent runs, each with its own context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from repeat_hooks import StopRepeatedCalls

from .errors import MissingGuard

GUARD_ATTRIBUTE = "repeat_guard"
"""The attribute of your own context object that holds its ``StopRepeatedCalls``."""


def find_guard(context: Any) -> StopRepeatedCalls | None:
    """The guard the run context holds: the context itself or its ``repeat_guard``; ``None`` if neither."""
    if isinstance(context, StopRepeatedCalls):
        return context
    guard = getattr(context, GUARD_ATTRIBUTE, None)
    return guard if isinstance(guard, StopRepeatedCalls) else None


def require_guard(context: Any) -> StopRepeatedCalls:
    """The guard the run context holds; raises ``MissingGuard`` (a ``TypeError``) saying how to pass one.

    A plain dict that looks like a saved guard, or a saved context holding one, is what the SDK's
    ``RunState.from_json`` restores without a ``context_deserializer``: the message then says to pass one.
    """
    guard = find_guard(context)
    if guard is None:
        if _looks_saved(context):
            raise MissingGuard(
                "repeat-hooks: the run context is a plain dict, not a StopRepeatedCalls: this RunState was "
                "restored with RunState.from_json(agent, data) and no context_deserializer, so the SDK "
                "left the saved context as JSON. Restore it with RunState.from_json(agent, data, "
                "context_deserializer=context_deserializer) (from repeat_hooks_openai_agents), or "
                "context_deserializer=YourContext.model_validate for your own pydantic context holding the "
                f"guard in `{GUARD_ATTRIBUTE}`"
            )
        raise MissingGuard(
            "repeat-hooks: a guarded agent needs a StopRepeatedCalls in its run context: pass "
            "Runner.run(agent, input, context=StopRepeatedCalls(...)), or a context object with a "
            f"`{GUARD_ATTRIBUTE}` attribute holding one (got a context of type {type(context).__name__})"
        )
    return guard


def _looks_saved(context: Any) -> bool:
    """``True`` for a dict holding a dumped guard (its ``state``) or a dumped context with ``repeat_guard``."""
    return isinstance(context, Mapping) and ("state" in context or GUARD_ATTRIBUTE in context)


def context_serializer(context: Any) -> Mapping[str, Any]:
    """Serialize a run context for ``RunState.to_json(context_serializer=...)``, guard state included.

    Fires when the SDK saves a ``RunState`` (for example at a human-in-the-loop interruption) and
    returns the context's full JSON dump. Without it the SDK dumps pydantic contexts with
    ``exclude_unset=True``: the guard's own models dump whole anyway, but a context of yours whose
    guard field was left at its default would lose it. Works for a ``StopRepeatedCalls``
    context and for any pydantic model holding one; raises ``TypeError`` for other objects (write
    your own serializer that dumps ``context.repeat_guard.model_dump(mode="json")``).
    """
    if isinstance(context, BaseModel):
        return context.model_dump(mode="json")
    raise TypeError(
        "repeat-hooks: context_serializer handles pydantic contexts; for "
        f"{type(context).__name__}, dump `{GUARD_ATTRIBUTE}.model_dump(mode='json')` yourself"
    )


def context_deserializer(data: Mapping[str, Any]) -> StopRepeatedCalls:
    """Restore a ``StopRepeatedCalls`` context for ``RunState.from_json(context_deserializer=...)``.

    Fires when the SDK loads a saved ``RunState``; returns the guard exactly as it was saved, so the
    resumed turn keeps its counts. For your own pydantic context class, pass
    ``context_deserializer=YourContext.model_validate`` instead.
    """
    return StopRepeatedCalls.model_validate(dict(data))
