"""What several adapters' tests share (``import support``; ``tests/adapters/conftest.py`` puts it on the path):

- ``support.examples``: run an ``examples/`` script offline, and check the seed-004 story it prints;
- ``support.mcp_carrier``: the parcel carrier as a real FastMCP server (stdio or streamable HTTP), run as a
  child process, each adapter's tests picking the tools they need;
- ``support.workers``: a worker process driven by JSON lines, for tests where two OS processes serve one
  conversation.
"""

from pathlib import Path

MCP_CARRIER = Path(__file__).resolve().with_name("mcp_carrier.py")
"""The carrier server's script: ``[sys.executable, str(MCP_CARRIER), *tools]`` starts it (see ``mcp_carrier``)."""
