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

from __future__ import annotations

import importlib

from . import _moved

TYPE_CHECKING = False  # not typing's: a hook call's client loads nothing it does not use (``kit.resident``)
if TYPE_CHECKING:
    from typing import Any

    from .call import ToolCall
    from .decision import GuardEvent, Refusal, RefusalKind, Stop, StopReason
    from .errors import GuardSetupError, StateCorrupt, StoreContention, StoreUnavailable
    from .hook import StopRepeatedCalls
    from .kit.usage import TokenPrices
    from .policy import Policy
    from .state import GuardState
    from .stores import MemoryStore, StateStore

_HOMES = {
    "GuardEvent": "repeat_hooks.decision",
    "GuardSetupError": "repeat_hooks.errors",
    "GuardState": "repeat_hooks.state",
    "MemoryStore": "repeat_hooks.stores",
    "Policy": "repeat_hooks.policy",
    "Refusal": "repeat_hooks.decision",
    "RefusalKind": "repeat_hooks.decision",
    "StateCorrupt": "repeat_hooks.errors",
    "StateStore": "repeat_hooks.stores",
    "Stop": "repeat_hooks.decision",
    "StopReason": "repeat_hooks.decision",
    "StopRepeatedCalls": "repeat_hooks.hook",
    "StoreContention": "repeat_hooks.errors",
    "StoreUnavailable": "repeat_hooks.errors",
    "TokenPrices": "repeat_hooks.kit.usage",
    "ToolCall": "repeat_hooks.call",
}
"""Where each name of the front door lives: its module is loaded when the name is first asked for, so that a process
that needs none of them (a coding CLI's hook client, ``repeat-hooks --help``) loads no pydantic model."""

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

_moved.install()
_forward = _moved.forwarder(__name__, _moved.FRONT_DOOR)


def __getattr__(name: str) -> Any:
    """A front-door name, from its module the first time it is asked for; else the names that moved out of the front
    door in 0.3, with a ``DeprecationWarning`` naming their new home."""
    home = _HOMES.get(name)
    if home is None:
        return _forward(name)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
