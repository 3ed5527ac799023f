"""What moved in 0.3, and where: the old spellings keep working for one release, with a ``DeprecationWarning``
that names the new one. ``forwarder`` answers a module's old names (the front door's, ``repeat_hooks/__init__``;
an adapter's, as ``repeat_hooks.kit.moved``); the finder installed here answers the old module paths
(``import repeat_hooks.redis``), each as a module forwarding to its new home."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings

TYPE_CHECKING = False  # not typing's: a hook call's client loads nothing it does not use (``kit.resident``)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

MODULES: dict[str, tuple[str, ...]] = {
    "repeat_hooks.guard": ("repeat_hooks.hook",),
    "repeat_hooks.store": ("repeat_hooks.stores",),
    "repeat_hooks.redis": ("repeat_hooks.stores.redis",),
    "repeat_hooks.setup_error": ("repeat_hooks.errors",),
    "repeat_hooks.store_errors": ("repeat_hooks.errors",),
    "repeat_hooks.stop_reason": ("repeat_hooks.decision",),
    "repeat_hooks.stop_rule": ("repeat_hooks.stop_rules",),
    "repeat_hooks.turn": ("repeat_hooks.state",),
    "repeat_hooks.whole": ("repeat_hooks.state",),
    "repeat_hooks.clock": ("repeat_hooks.kit.clock",),
    "repeat_hooks.cost": ("repeat_hooks.kit.usage",),
    "repeat_hooks.misuse": ("repeat_hooks.kit.setup",),
    "repeat_hooks.testing": ("repeat_hooks.kit.conformance",),
    "repeat_hooks.otel": ("repeat_hooks.observe.otel",),
    "repeat_hooks.recording": ("repeat_hooks.offline.recording", "repeat_hooks.offline.reading"),
    "repeat_hooks.replay": ("repeat_hooks.offline.replay",),
    "repeat_hooks.tune": ("repeat_hooks.offline.tune",),
    "repeat_hooks.report": ("repeat_hooks.offline.report",),
    "repeat_hooks.cli": ("repeat_hooks.offline.cli",),
}
"""Old module path -> where its names live now (looked up in order)."""

NAMES: dict[str, str] = {
    **dict.fromkeys(("batch_call_ids", "call_key", "canonical_arguments"), "repeat_hooks.call"),
    **dict.fromkeys(("VOLATILE", "error_text", "model_view", "outcome_digest"), "repeat_hooks.result"),
    **dict.fromkeys(("Turn", "load_state"), "repeat_hooks.state"),
    **dict.fromkeys(("STOP_RULES", "Feed", "HookPoint", "StopRule"), "repeat_hooks.stop_rules"),
    **dict.fromkeys(("Clock", "Stopwatch"), "repeat_hooks.kit"),
    **dict.fromkeys(("CostOf", "usage_tokens"), "repeat_hooks.kit"),
    **dict.fromkeys(("check_budgets", "check_feeds", "check_tool_names", "policy_from"), "repeat_hooks.kit"),
}
"""Old top-level name of ``repeat_hooks`` -> the module it is imported from now."""
FRONT_DOOR = {name: f"{home}:{name}" for name, home in NAMES.items()}
"""``NAMES`` as ``forwarder`` takes them."""


def forwarder(
    module: str, moved: Mapping[str, str | tuple[str, Callable[[], Any]]], *, gone: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the names ``module`` no longer has, each reached with a ``DeprecationWarning``
    naming its new spelling; any other name is an ``AttributeError``. ``moved`` maps each old name to its new home
    (``"package.module:name"``), or to ``(spelling, make)`` where no one name replaces it (``make()`` returns what
    the old name stood for); ``gone``: names with no replacement, each an ``AttributeError`` saying what to do
    instead. ``__getattr__ = forwarder(__name__, {...})`` in the module the names left."""

    def __getattr__(name: str) -> Any:
        home = moved.get(name)
        if gone and name in gone:
            raise AttributeError(f"{module}.{name} is gone: {gone[name]}")
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if isinstance(home, tuple):
            spelling, make = home
        else:
            path, _, attribute = home.partition(":")
            spelling = f"{path}.{attribute}"

            def make() -> Any:
                return getattr(importlib.import_module(path), attribute)

        warnings.warn(f"{module}.{name} is deprecated: use {spelling}", DeprecationWarning, stacklevel=2)
        return make()

    return __getattr__


class _Forwarding(types.ModuleType):
    """An old module path: each name is looked up in the modules that hold it now."""

    def __init__(self, name: str, homes: Sequence[str]) -> None:
        super().__init__(name, f"Deprecated: moved to {', '.join(homes)}.")
        self.__homes = tuple(homes)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for home in self.__homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (it moved to {self.__homes[0]})")


class _Finder:
    """Finds the old module paths of ``MODULES`` (nothing else): a meta path finder and its loader, by their methods
    (``importlib.abc``'s base classes would load ``importlib.resources``, 15 ms of every process's start)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by its methods

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        homes = MODULES[spec.name]
        warnings.warn(f"{spec.name} is deprecated: import from {' or '.join(homes)}", DeprecationWarning, stacklevel=2)
        return _Forwarding(spec.name, homes)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module forwards every name."""


def install() -> None:
    """Answer the old module paths (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
