"""Fixtures and import paths for the Claude Agent SDK adapter's tests (helpers in ``cas_parcels.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

for _path in (str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)  # ``import services`` (as tests/deploy does) and ``import cas_parcels``

from services import redis_server  # type: ignore[import-not-found]  # noqa: E402

__all__ = ["redis_server"]
