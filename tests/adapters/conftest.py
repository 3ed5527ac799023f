"""Import paths for every adapter's tests: ``import support`` (the helpers several adapters' tests share,
``tests/adapters/support/``) and ``import services`` (``tests/services.py``: real servers on loopback)."""

from __future__ import annotations

import sys
from pathlib import Path

for _path in (str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])):
    if _path not in sys.path:
        sys.path.insert(0, _path)
