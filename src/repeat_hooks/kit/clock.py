"""The clock adapters time model calls with, for ``max_model_seconds``. The policy itself never reads a clock:
an adapter measures a model call and hands the seconds to ``post_llm_call``; a replay hands recorded ones."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]
"""Seconds on a monotonic clock (``time.monotonic``, the default of every adapter). Under durable execution,
pass the engine's deterministic clock instead (a workflow's ``workflow.time``)."""


monotonic: Clock = time.monotonic
"""The default ``Clock``: ``time.monotonic`` itself."""


class Stopwatch:
    """Times one model call at a time: ``start()`` before it, ``seconds()`` after; ``None`` clock: always 0."""

    __slots__ = ("_clock", "_started")

    def __init__(self, clock: Clock | None = monotonic) -> None:
        self._clock = clock
        self._started: float | None = None

    def start(self) -> None:
        """Fires before a model call: remember when it started."""
        self._started = self._clock() if self._clock is not None else None

    def seconds(self) -> float:
        """Fires after a model call: seconds since ``start`` (0 without a clock or a start); then restarts."""
        if self._clock is None or self._started is None:
            return 0.0
        now = self._clock()
        seconds, self._started = max(now - self._started, 0.0), now
        return seconds
