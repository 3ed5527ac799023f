"""The stdio MCP server of ``test_mcp.py``: the shared carrier (``tests/adapters/support/mcp_carrier.py``) with a
read-only lookup, a tool that changes things, one with no hint, one that answers the same text with a fresh
request id in ``_meta`` each time, and one that always fails. Every call that reaches it is appended to the
file named by ``$CARRIER_LOG``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

TOOLS = ("track_parcel", "reroute_parcel", "carrier_status", "parcel_events", "customs_status")

if __name__ == "__main__":
    sys.argv[1:] = TOOLS
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "support" / "mcp_carrier.py"), run_name="__main__")
