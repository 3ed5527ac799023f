"""repeat-hooks for the Mistral Agents SDK (mistralai-agents 1.1).

``RepeatGuardHook`` is an ``agents.Hook``: add it to ``agents.Harness(hooks=[...])`` as it is (the default
``Policy()``), or subclass it and set ``policy`` (and ``store``, ``cost``, ...) in the class body. Read a
turn's stop with ``stop_of(Guard, session_id)``, or run a turn with ``Guard.run(agent_or_session, text)``.
``repeat_hooks_mistral.testing`` has a scripted model for offline runs and the conformance driver.
"""

from repeat_hooks import (
    GuardEvent,
    GuardSetupError,
    GuardState,
    MemoryStore,
    Policy,
    StateStore,
    Stop,
    StopReason,
    TokenPrices,
)

from .guard import RepeatGuardHook
from .state import STORE_DOWN_REFUSAL, STORE_DOWN_STOP, StoreDownStop, events_of, read_state, stop_of

__all__ = [
    "STORE_DOWN_REFUSAL",
    "STORE_DOWN_STOP",
    "GuardEvent",
    "GuardSetupError",
    "GuardState",
    "MemoryStore",
    "Policy",
    "RepeatGuardHook",
    "StateStore",
    "Stop",
    "StopReason",
    "StoreDownStop",
    "TokenPrices",
    "events_of",
    "read_state",
    "stop_of",
]

__version__ = "0.3.0"
