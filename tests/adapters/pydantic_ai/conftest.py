"""The ``carrier`` fixture; ``pai_parcels`` (next to this file) holds the shared helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # ``from pai_parcels import ...`` in the test modules

from pai_parcels import Carrier  # noqa: E402


@pytest.fixture
def carrier() -> Carrier:
    return Carrier()
