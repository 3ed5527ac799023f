"""``Beside``: what an adapter keeps beside an SDK object it does not own (a run's usage, an agent), by the
object's identity, for as long as the object lives: no module-level registry, nothing kept past the object."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class Beside(Generic[V]):
    """Values beside SDK objects, by identity (unhashable objects too: a dataclass, a pydantic model), each dropped
    when its object is collected. The objects must be weak-referable."""

    def __init__(self) -> None:
        self._values: dict[int, tuple[weakref.ref[object], V]] = {}
        self._lock = threading.Lock()

    def get(self, owner: object) -> V | None:
        """The value beside ``owner``, or ``None``."""
        entry = self._values.get(id(owner))
        return entry[1] if entry is not None and entry[0]() is owner else None

    def setdefault(self, owner: object, make: Callable[[], V]) -> V:
        """The value beside ``owner``, made (``make()``) and kept if there is none."""
        found = self.get(owner)
        if found is not None:
            return found
        value = make()
        key = id(owner)

        def forget(ref: weakref.ref[object]) -> None:
            with self._lock:
                entry = self._values.get(key)
                if entry is not None and entry[0] is ref:
                    del self._values[key]

        with self._lock:
            self._values[key] = (weakref.ref(owner, forget), value)
        return value

    def pop(self, owner: object) -> V | None:
        """Forget the value beside ``owner``; the value, or ``None``."""
        with self._lock:
            entry = self._values.get(id(owner))
            if entry is None or entry[0]() is not owner:
                return None
            del self._values[id(owner)]
        return entry[1]

    def __len__(self) -> int:
        return len(self._values)
