"""Every ```python block of every README runs in the test suite, so a snippet that drifts from the code fails.

``OWNERS`` says which test module runs each README's blocks (for the root README, section by section: an
adapter's section needs that adapter installed). In that module::

    BLOCKS = Blocks.owned_by(__file__)          # the blocks OWNERS gives this module


    @BLOCKS.cover("Quick start")                # the test fails unless its body ran that block
    def test_the_quick_start_runs(capsys):
        namespace = BLOCKS.run("Quick start", given={"model": scripted})
        ...


    def test_every_block_here_runs():           # a block with no @cover (nor a listed reason) fails it
        BLOCKS.assert_covered()

``run`` executes blocks as a reader would paste them, in order, in one module's namespace (a block that
continues the one before it runs after it): ``given`` holds what the README's prose says comes from the
reader (``model``, ``track_parcel``), typically a scripted model at the SDK's model seam where the block
would need a key; ``replace`` swaps a literal (a live model name, a server URL) for the test's; a top-level
``await`` runs on a fresh event loop. Tracebacks point at README lines. ``tests/core/test_readme.py``
checks that every block of every README has an owner that runs it.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
import itertools
import sys
import textwrap
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
"""The repository."""

CORE = "tests/core/test_readme.py"
OWNERS: dict[str, str | dict[str, str]] = {
    "README.md": {
        "Quick start (core)": CORE,
        "Mistral Agents SDK (`repeat-hooks-mistral`)": "tests/adapters/mistral/test_readme.py",
        "OpenAI Agents SDK (`repeat-hooks-openai-agents`)": "tests/adapters/openai_agents/test_readme.py",
        "LangChain v1 (`repeat-hooks-langchain`)": "tests/adapters/langchain/test_readme.py",
        "pydantic-ai (`repeat-hooks-pydantic-ai`)": "tests/adapters/pydantic_ai/test_readme.py",
        "Google ADK (`repeat-hooks-google-adk`)": "tests/adapters/google_adk/test_readme.py",
        "Strands Agents (`repeat-hooks-strands`)": "tests/adapters/strands/test_readme.py",
        "Claude Agent SDK (`repeat-hooks-claude-agent-sdk`)": "tests/adapters/claude_agent_sdk/test_readme.py",
        "Microsoft Agent Framework (`repeat-hooks-agent-framework`)": "tests/adapters/agent_framework/test_readme.py",
        "LlamaIndex (`repeat-hooks-llama-index`)": "tests/adapters/llama_index/test_readme.py",
        "CrewAI (`repeat-hooks-crewai`)": "tests/adapters/crewai/test_readme.py",
        "Several processes on one host: `SQLiteStore`": CORE,
        "The adapters: one shape, one kit, one conformance kit": CORE,
        "Several processes: `RedisStore`": CORE,
    },
    "adapters/agent_framework/README.md": "tests/adapters/agent_framework/test_readme.py",
    "adapters/claude_agent_sdk/README.md": "tests/adapters/claude_agent_sdk/test_readme.py",
    "adapters/crewai/README.md": "tests/adapters/crewai/test_readme.py",
    "adapters/google_adk/README.md": "tests/adapters/google_adk/test_readme.py",
    "adapters/langchain/README.md": "tests/adapters/langchain/test_readme.py",
    "adapters/llama_index/README.md": "tests/adapters/llama_index/test_readme.py",
    "adapters/mistral/README.md": "tests/adapters/mistral/test_readme.py",
    "adapters/openai_agents/README.md": "tests/adapters/openai_agents/test_readme.py",
    "adapters/pydantic_ai/README.md": "tests/adapters/pydantic_ai/test_readme.py",
    "adapters/strands/README.md": "tests/adapters/strands/test_readme.py",
    "examples/deploy/README.md": "tests/adapters/mistral/test_readme.py",
}
"""README (from the repository root) -> the test module running its blocks, or, by section heading, each
section's."""

PYTHON = {"python", "py", "python3"}
"""Fence tags of a Python block."""
Test = TypeVar("Test", bound=Callable[..., Any])
_MODULES = itertools.count()


@dataclass(frozen=True)
class Block:
    """One ```python block of a README."""

    readme: str
    """The README's path from the repository root."""
    name: str
    """The heading it stands under, with ``[2]``, ``[3]``... after the first block under one heading."""
    heading: str
    line: int
    """The README line of its first line of code."""
    code: str

    def __str__(self) -> str:
        return f"{self.readme}:{self.line} ({self.name!r})"


def python_blocks(readme: str) -> list[Block]:
    """The ```python blocks of ``readme`` (a path from the repository root), in order; a heading is a line
    starting with ``#`` outside any fence."""
    blocks: list[Block] = []
    seen: dict[str, int] = {}
    heading, fence, first = "", "", 0
    code: list[str] = []
    for number, line in enumerate((ROOT / readme).read_text().splitlines(keepends=True), start=1):
        if fence:
            if line.strip() == "```":
                if fence in PYTHON:
                    seen[heading] = seen.get(heading, 0) + 1
                    name = heading if seen[heading] == 1 else f"{heading} [{seen[heading]}]"
                    blocks.append(Block(readme, name, heading, first, textwrap.dedent("".join(code))))
                fence = ""
            else:
                code.append(line)
        elif line.lstrip().startswith("```"):
            fence, code, first = line.strip()[3:].strip() or "text", [], number + 1
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    return blocks


def owned_blocks(owner: str) -> list[Block]:
    """The blocks ``OWNERS`` gives the test module ``owner`` (a path from the repository root)."""
    owned: list[Block] = []
    for readme, owners in OWNERS.items():
        for block in python_blocks(readme):
            if (owners if isinstance(owners, str) else owners.get(block.heading)) == owner:
                owned.append(block)
    return owned


@dataclass
class Blocks:
    """The README blocks one test module runs, and the check that it runs them all."""

    owner: str
    blocks: dict[str, Block]
    covered: dict[str, str] = field(default_factory=dict)
    """Block name -> the test that runs it."""
    listed: dict[str, str] = field(default_factory=dict)
    """Block name -> why no test runs it."""
    ran: set[str] = field(default_factory=set)

    @classmethod
    def owned_by(cls, test_file: str) -> Blocks:
        owner = Path(test_file).resolve().relative_to(ROOT).as_posix()
        blocks = {block.name: block for block in owned_blocks(owner)}
        if not blocks:
            raise LookupError(f"OWNERS in tests/readme_blocks.py gives {owner} no README block")
        return cls(owner, blocks)

    def block(self, name: str) -> Block:
        try:
            return self.blocks[name]
        except KeyError:
            raise LookupError(
                f"no python block {name!r} in {self.owner}'s READMEs; there are {list(self.blocks)}"
            ) from None

    def cover(self, *names: str) -> Callable[[Test], Test]:
        """Mark a test as running the blocks ``names``: it fails if its body did not run each of them."""
        for name in names:
            self.block(name)  # a name that drifted from the README fails at collection

        def mark(test: Test) -> Test:
            for name in names:
                self.covered[name] = test.__name__

            @functools.wraps(test)
            def checked(*args: Any, **kwargs: Any) -> Any:
                self.ran.clear()
                try:
                    result = test(*args, **kwargs)
                finally:
                    for name in [n for n in sys.modules if n.startswith("readme_block_")]:
                        del sys.modules[name]
                missing = [name for name in names if name not in self.ran]
                assert not missing, f"{test.__name__} never ran {[str(self.blocks[n]) for n in missing]}"
                return result

            return checked  # type: ignore[return-value]

        return mark

    def not_run(self, name: str, reason: str) -> None:
        """List a block no test runs, with the reason (``assert_covered`` accepts it)."""
        assert reason.strip(), "a listed block needs its reason"
        self.block(name)
        self.listed[name] = reason

    def assert_covered(self) -> None:
        """Every block this module owns is run by a ``@cover`` test or listed with a reason."""
        loose = [str(block) for name, block in self.blocks.items() if name not in self.covered | self.listed]
        assert not loose, f"README python blocks neither run by a test in {self.owner} nor listed: {loose}"

    def run(
        self,
        *names: str,
        given: Mapping[str, Any] | None = None,
        replace: Mapping[str, str] | None = None,
        namespace: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run the blocks ``names`` in order in one module (a fresh one, or the one an earlier ``run``
        returned as ``namespace``: the reader's session goes on); returns the module's namespace. Each
        ``replace`` key must occur in the blocks run."""
        if namespace is None:
            module = types.ModuleType(f"readme_block_{next(_MODULES)}")
            sys.modules[module.__name__] = module  # SDKs that find functions by their module (Mistral's tools)
        else:
            module = sys.modules[namespace["__name__"]]
        module.__dict__.update(given or {})
        codes: list[tuple[Block, str]] = []
        unused = dict(replace or {})
        for name in names:
            block, code = self.block(name), self.block(name).code
            for old, new in (replace or {}).items():
                if old in code:
                    code = code.replace(old, new)
                    unused.pop(old, None)
            codes.append((block, code))
        assert not unused, f"not in {names}: {list(unused)} (the README changed: update the test)"
        for block, code in codes:
            _execute(block, code, module.__dict__)
            self.ran.add(block.name)
        return module.__dict__


def _execute(block: Block, code: str, namespace: dict[str, Any]) -> None:
    source = "\n" * (block.line - 1) + code  # tracebacks name the README's own lines
    compiled = compile(source, str(ROOT / block.readme), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, namespace))
    else:
        exec(compiled, namespace)
