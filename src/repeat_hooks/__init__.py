"""repeat-hooks: stop LLM agents from calling the same tool over and over.

The front door holds what a user of the core needs: the hook (``StopRepeatedCalls``), its settings
(``Policy``), a tool call (``ToolCall``), the decisions and their reasons, one conversation's ``GuardState``, the
store seam with its in-process store, the prices a cost budget reads and the errors. The rest lives in its wing:

- ``repeat_hooks.stores``: ``MemoryStore``, ``stores.redis.RedisStore``;
- ``repeat_hooks.observe``: observers, ``observe.otel`` (OpenTelemetry);
- ``repeat_hooks.kit``: for adapter authors (setup checks, clock, usage readers, the conformance kit);
- ``repeat_hooks.offline``: recordings, replay, tune, the HTML report, the console script.

Importing ``repeat_hooks`` loads none of the offline tools, nor OpenTelemetry.
"""

import logging

from . import _moved
from .call import ToolCall
from .decision import GuardEvent, Refusal, RefusalKind, Stop, StopReason
from .errors import GuardSetupError, StateCorrupt, StoreContention, StoreUnavailable
from .hook import StopRepeatedCalls
from .kit.usage import TokenPrices
from .policy import Policy
from .state import GuardState
from .stores import MemoryStore, StateStore

__all__ = [
    "GuardEvent",
    "GuardSetupError",
    "GuardState",
    "MemoryStore",
    "Policy",
    "Refusal",
    "RefusalKind",
    "StateCorrupt",
    "StateStore",
    "Stop",
    "StopReason",
    "StopRepeatedCalls",
    "StoreContention",
    "StoreUnavailable",
    "TokenPrices",
    "ToolCall",
]

__version__ = "0.3.0"

logging.getLogger("repeat_hooks").addHandler(logging.NullHandler())
_moved.install()
__getattr__ = _moved.forwarder(__name__, _moved.FRONT_DOOR)
"""The names that moved out of the front door in 0.3, with a ``DeprecationWarning`` naming their new home."""
