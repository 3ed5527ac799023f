"""Import paths for the Claude Code adapter's tests (helpers in ``cc_events.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # ``import cc_events``
