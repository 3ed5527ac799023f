"""Where a conversation's state lives when it lives in the SDK's own persistence (an agent's state, a session's,
a graph's): a ``Slot`` to read it from and write it to, and the parsed states an adapter keeps not to validate
again the JSON it has just written.

With a ``StateStore`` the state is a key in the store; without one it is the SDK's: the adapter hands
``GuardCore.update`` a ``Slot`` instead of a key, and the same update runs (read, decide, write, then tell the
observers), with the same outage policy.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ..errors import StateCorrupt
from ..state import GuardState, load_state


class Slot(Protocol):
    """One conversation's state in the SDK's persistence, for one update: read it, then write it back."""

    def read(self) -> GuardState:
        """The state (a fresh ``GuardState`` if there is none yet), the caller's to change. Raises
        ``StateCorrupt`` when what is stored there is no guard state."""
        ...

    def write(self, state: GuardState) -> None:
        """Write ``state`` back where ``read`` found it (the SDK persists it with the conversation)."""
        ...


def load(raw: object, *, where: str) -> GuardState:
    """``load_state(raw)``, whose ``StateCorrupt`` says ``where`` the state was read (``"agent.state['x']"``)."""
    try:
        return load_state(raw)  # type: ignore[arg-type]  # anything an SDK kept: load_state says what is wrong
    except StateCorrupt as error:
        raise StateCorrupt(f"repeat-hooks: {where}: {error}") from error.__cause__


class ParsedStates:
    """The states last written, parsed, by the identity of the value written (``keep``): reading back the very
    value written skips parsing it. Each entry is used at most once (``take``), so a state changed and then not
    written is never read from here; the SDK's value stays the only source of truth. Bounded (oldest first).

    ``version``: what else must match, for an SDK that changes a value in place (Strands counts every change of
    an agent's state); ``None`` where values are replaced, never changed.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._entries: dict[int, tuple[object, object, GuardState]] = {}
        self._lock = threading.Lock()  # one guard may serve agents in several threads

    def take(self, raw: object, *, where: str, version: object = None) -> GuardState:
        """The state ``raw`` holds, for the caller to change and then ``keep`` once written."""
        with self._lock:
            entry = self._entries.pop(id(raw), None)
        if entry is not None and entry[0] is raw and entry[1] == version:
            return entry[2]
        return load(raw, where=where)

    def peek(self, raw: object, *, where: str, version: object = None) -> GuardState:
        """The state ``raw`` holds, to read only (a kept entry stays kept)."""
        entry = self._entries.get(id(raw))
        if entry is not None and entry[0] is raw and entry[1] == version:
            return entry[2]
        return load(raw, where=where)

    def keep(self, raw: object, state: GuardState, *, version: object = None) -> None:
        """``raw`` (just written, or read and left unchanged) is ``state``."""
        entries = self._entries
        with self._lock:
            entries.pop(id(raw), None)
            if len(entries) >= self.size:
                del entries[next(iter(entries))]
            entries[id(raw)] = (raw, version, state)

    def __len__(self) -> int:
        return len(self._entries)

    def forget(self, raw: Any) -> None:
        """Drop what is kept for ``raw``."""
        with self._lock:
            self._entries.pop(id(raw), None)
