"""The root README's core blocks run as written, and every README's every python block has a test running it.

The adapters' sections of the root README run in each adapter's ``test_readme.py`` (``OWNERS``): this module
runs on the core alone (``make test-pythons``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # ``import readme_blocks`` and ``import services``

from readme_blocks import OWNERS, ROOT, Blocks, python_blocks  # noqa: E402
from services import HungRedis, RedisServer, hung_redis, redis_server  # noqa: E402

from repeat_hooks import Policy, Refusal, StopRepeatedCalls, ToolCall  # noqa: E402

__all__ = ["hung_redis", "redis_server"]  # fixtures

BLOCKS = Blocks.owned_by(__file__)
ARGS = {"tracking_number": "FR-7731"}


def readmes() -> list[str]:
    """Every README.md of the repository (tracked, or new and not ignored), from its root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "README.md", "*/README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted({path for path in listed if (ROOT / path).exists()})


def test_every_python_block_of_every_readme_has_a_test_that_runs_it() -> None:
    """A README (or a root README section) with python blocks names the test module running them, and that
    module checks that it runs every one (``Blocks.assert_covered``, in ``test_every_block_here_runs``)."""
    with_blocks = {readme: python_blocks(readme) for readme in readmes()}
    with_blocks = {readme: blocks for readme, blocks in with_blocks.items() if blocks}
    assert "README.md" in with_blocks and "adapters/openai_agents/README.md" in with_blocks
    assert sorted(with_blocks) == sorted(OWNERS), "OWNERS in tests/readme_blocks.py must list exactly these"
    owners: set[str] = set()
    for readme, blocks in with_blocks.items():
        owned = OWNERS[readme]
        if isinstance(owned, dict):
            headings = {block.heading for block in blocks}
            assert sorted(headings) == sorted(owned), f"{readme}: OWNERS lists other sections than those with code"
            owners.update(owned.values())
        else:
            owners.add(owned)
    for owner in sorted(owners):
        tree = ast.parse((ROOT / owner).read_text())
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        check = functions.get("test_every_block_here_runs")
        assert check is not None and "BLOCKS.assert_covered()" in ast.unparse(check), owner
        assert "Blocks.owned_by(__file__)" in ast.unparse(tree), owner


def test_the_block_scanner_reads_headings_outside_code_only() -> None:
    blocks = python_blocks("README.md")
    assert [block.name for block in blocks][:1] == ["Quick start (core)"]
    first = blocks[0]
    assert (ROOT / "README.md").read_text().splitlines()[first.line - 1] == first.code.splitlines()[0]


@BLOCKS.cover("Quick start (core)")
def test_the_core_quick_start_runs_and_its_comments_hold(capsys: pytest.CaptureFixture[str]) -> None:
    tracked: list[str] = []

    def track_parcel(tracking_number: str) -> str:
        tracked.append(tracking_number)
        return f"{tracking_number}: in transit"

    namespace = BLOCKS.run("Quick start (core)", given={"track_parcel": track_parcel})

    assert tracked == ["FR-7731"] and namespace["result"] == "FR-7731: in transit"
    assert capsys.readouterr().out == ""  # no stop after one call
    guard, call = namespace["guard"], namespace["call"]
    assert isinstance(guard, StopRepeatedCalls) and guard.model_dump_json() == namespace["saved"]
    # "the 3rd same call with nothing changed between is refused", by the guard restored from the saved text
    second = ToolCall(call.name, call.arguments, call_id="c2")
    assert guard.pre_tool_call(second) is None
    guard.post_tool_call(second, ok=True, result=namespace["result"])
    refusal = guard.pre_tool_call(ToolCall(call.name, call.arguments, call_id="c3"))
    assert isinstance(refusal, Refusal) and "track_parcel" in refusal.message
    assert "FR-7731" not in namespace["saved"]  # digests, never argument values


@BLOCKS.cover("Several processes: `RedisStore`")
def test_the_redis_store_block_counts_across_stores(redis_server: RedisServer) -> None:
    """Each run of the block is a new ``RedisStore`` (another process's): the 3rd same call is refused."""
    given: dict[str, Any] = {
        "session_id": "customer-42",
        "policy": Policy(),
        "call": ToolCall("track_parcel", ARGS),
        "turn_id": "turn-1",
    }
    replace = {"redis://localhost:6379/0": redis_server.url}
    namespace = BLOCKS.run("Several processes: `RedisStore`", given=given, replace=replace)
    decisions = [namespace["refusal"]]
    for _ in range(2):
        BLOCKS.run("Several processes: `RedisStore`", replace=replace, namespace=namespace)
        decisions.append(namespace["refusal"])

    assert decisions[:2] == [None, None]
    assert isinstance(decisions[2], Refusal) and decisions[2].reason == "repeat"


@BLOCKS.cover("Several processes: `RedisStore` [2]")
def test_the_guard_core_block_fails_closed_when_redis_is_down(hung_redis: HungRedis) -> None:
    """The core verbs through ``GuardCore``: a Redis that never answers refuses the call (``fail="closed"``)."""
    from repeat_hooks.stores.redis import RedisStore

    given: dict[str, Any] = {
        "session_id": "customer-42",
        "call": ToolCall("track_parcel", ARGS),
        "turn_id": "turn-1",
        "store": RedisStore.from_url(hung_redis.url, timeout=0.2),
    }
    namespace = BLOCKS.run("Several processes: `RedisStore` [2]", given=given)
    refusal = namespace["refusal"]
    assert isinstance(refusal, Refusal) and refusal.reason == "store_unavailable"


@BLOCKS.cover("Several processes on one host: `SQLiteStore`")
def test_the_sqlite_store_block_counts_across_stores(tmp_path: Path) -> None:
    """Each run of the block opens the file anew (another process's store): the 3rd same call is refused."""
    given: dict[str, Any] = {
        "session_id": "customer-42",
        "policy": Policy(),
        "call": ToolCall("track_parcel", ARGS),
        "turn_id": "turn-1",
    }
    replace = {"/var/lib/myapp/repeat-hooks.db": str(tmp_path / "repeat-hooks.db")}
    namespace = BLOCKS.run("Several processes on one host: `SQLiteStore`", given=given, replace=replace)
    decisions = [namespace["refusal"]]
    for _ in range(2):
        BLOCKS.run("Several processes on one host: `SQLiteStore`", replace=replace, namespace=namespace)
        decisions.append(namespace["refusal"])
    assert decisions[:2] == [None, None]
    assert isinstance(decisions[2], Refusal) and decisions[2].reason == "repeat"


@BLOCKS.cover("The adapters: one shape, one kit, one conformance kit")
def test_the_request_block_names_the_conversation_and_turn_the_run_sees() -> None:
    from repeat_hooks.kit import current_request

    seen: list[tuple[str | None, str | None]] = []

    def run_agent(message: str) -> str:
        request = current_request()  # what every adapter's GuardCore reads inside the run
        seen.append((request.conversation_id, request.turn_id))
        return f"answered {message}"

    namespace = BLOCKS.run(
        "The adapters: one shape, one kit, one conformance kit",
        given={"run_agent": run_agent, "message": "hi", "request_id": "req-7"},
    )
    assert seen == [("conv-42", "req-7")] and namespace["result"] == "answered hi"
    assert current_request().turn_id is None  # outside the block, nothing is named


def test_every_block_here_runs() -> None:
    BLOCKS.assert_covered()
