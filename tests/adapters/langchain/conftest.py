"""Fixtures for the LangChain adapter tests: a parcel carrier whose calls are counted, and the real
PostgreSQL server of ``tests/services.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

for _path in (str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)  # ``import services`` and ``import langchain_parcels`` from the test modules

from langchain_parcels import Carrier  # noqa: E402
from services import postgres_restartable, postgres_server  # noqa: E402

__all__ = ["carrier", "postgres_restartable", "postgres_server"]


@pytest.fixture
def carrier() -> Carrier:
    """A fresh carrier: ``carrier.tool`` is ``track_parcel``; ``carrier.calls`` lists the calls that reached it."""
    return Carrier()
