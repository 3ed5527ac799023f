"""repeat-hooks for the Mistral Agents SDK (mistralai-agents 1.1).

``StopRepeatedCalls`` is an ``agents.Hook``: subclass it, set ``policy``, add it to
``agents.Harness(hooks=[...])``. ``repeat_hooks_mistral.testing`` has a scripted model for offline runs.
"""

from repeat_hooks import GuardEvent, GuardState, MemoryStore, Policy, StateStore, Stop, StopReason

from .guard import STORE_DOWN_REFUSAL, STORE_DOWN_STOP, StopRepeatedCalls, StoreDownStop

__all__ = [
    "STORE_DOWN_REFUSAL",
    "STORE_DOWN_STOP",
    "GuardEvent",
    "GuardState",
    "MemoryStore",
    "Policy",
    "StateStore",
    "Stop",
    "StopReason",
    "StopRepeatedCalls",
    "StoreDownStop",
]

__version__ = "0.1.0"
