"""What the guard says, and remembers, when its store fails and ``fail_closed = True``.

A turn the guard ends because the store failed cannot be written to that store. So the process that
ended it keeps the stop in memory (``OUTAGES``, the last 1024 sessions) until the session's next hook
call that reaches the store, and ``last_stop`` reads it from there: readable while the store is down.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Literal

from pydantic import BaseModel, ConfigDict

STORE_DOWN_REFUSAL = (
    "Refused: the loop guard could not read this turn's calls, so no tool may run now. "
    "Do not call tools again: answer with what you know."
)
"""What the model reads for a tool call refused because the store failed (``fail_closed = True``)."""
STORE_DOWN_STOP = "I stopped: the loop guard could not read this turn's calls. Try again later."
"""The message of a turn ended because the store failed (``fail_closed = True``)."""


class StoreDownStop(BaseModel):
    """A turn the guard ended because its store failed (``fail_closed = True``): what ``last_stop`` returns
    for it. Read like a ``Stop``: ``reason`` (``"store_unavailable"``) and ``message``."""

    model_config = ConfigDict(frozen=True)

    message: str = STORE_DOWN_STOP
    """The stop message (``STORE_DOWN_STOP``)."""
    reason: Literal["store_unavailable"] = "store_unavailable"
    """Always ``"store_unavailable"``."""
    turn_id: str | None = None
    """The turn it ended."""


class Outages:
    """The fail-closed stops of this process, by state key, not yet superseded by a working store call."""

    def __init__(self, max_sessions: int = 1024) -> None:
        self.max_sessions = max_sessions
        self._stops: OrderedDict[str, StoreDownStop] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, key: str, turn_id: str | None) -> None:
        """The turn ``turn_id`` of the session under ``key`` was ended because the store failed."""
        with self._lock:
            self._stops[key] = StoreDownStop(turn_id=turn_id)
            self._stops.move_to_end(key)
            if len(self._stops) > self.max_sessions:
                self._stops.popitem(last=False)

    def clear(self, key: str) -> None:
        """The store served the session again: its state says what happened from now on."""
        if self._stops:
            with self._lock:
                self._stops.pop(key, None)

    def stop(self, key: str, turn_id: str | None = None) -> StoreDownStop | None:
        """The fail-closed stop kept for ``key`` (for ``turn_id``, if given), or ``None``."""
        with self._lock:
            stop = self._stops.get(key)
        if stop is None or (turn_id is not None and stop.turn_id != turn_id):
            return None
        return stop


OUTAGES = Outages()
"""Every guard class's fail-closed stops in this process (keys hold the class's ``state_name``)."""
