"""Fixtures for the deployment tests: real servers from ``tests/services.py``, started on free loopback ports."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # ``import services`` from here and from the test modules

from services import (  # noqa: E402
    hung_redis,
    postgres_restartable,
    postgres_server,
    redis_cluster,
    redis_restartable,
    redis_sentinel,
    redis_server,
    temporal_server,
)

__all__ = [
    "hung_redis",
    "postgres_restartable",
    "postgres_server",
    "redis_cluster",
    "redis_restartable",
    "redis_sentinel",
    "redis_server",
    "temporal_server",
]
