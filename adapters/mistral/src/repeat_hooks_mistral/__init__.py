"""repeat-hooks for the Mistral Agents SDK (mistralai-agents 1.1).

``hooks=[StopRepeatedCalls()]`` is seed 004's guard; ``RepeatGuardHook`` takes any ``Policy``: subclass it and set
``policy`` (``store``, ``cost``, ``fail``...) in the class body. Read a turn's stop with ``await stop_of(session,
guard=Guard)``, or run a turn with ``Guard.run(agent_or_session, text)``. ``.testing``: a scripted model, the
conformance driver.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices
from repeat_hooks.kit import moved

from .guard import GuardSetupError, RepeatGuardHook, RepeatGuardStopped, StopRepeatedCalls
from .state import events_of, read_state, stop_of

__all__ = [
    "GuardSetupError",
    "Policy",
    "RepeatGuardHook",
    "RepeatGuardStopped",
    "Stop",
    "StopReason",
    "StopRepeatedCalls",
    "TokenPrices",
    "events_of",
    "read_state",
    "stop_of",
]

__version__ = "0.3.0"

__getattr__ = moved(
    __name__,
    {
        **{name: f"repeat_hooks:{name}" for name in ("GuardEvent", "GuardState", "MemoryStore", "StateStore")},
        **{name: f"repeat_hooks.messages:{name}" for name in ("STORE_DOWN_REFUSAL", "STORE_DOWN_STOP")},
    },
    gone={"StoreDownStop": "every stop is a Stop: compare stop.reason == StopReason.STORE_UNAVAILABLE"},
)
"""0.2's names, now imported from ``repeat_hooks`` or ``repeat_hooks.messages`` (``StoreDownStop``: gone)."""
