"""Every adapter package has one shape, so that the eighth cannot drift: the same modules for the same roles, a
small ``__all__``, a guard built around the kit's ``GuardCore`` with the same common keywords, one ``stop_of``
shape, errors from the kit's bases, no module-level mutable state, and a runtime of at most 1,000 lines (900 before
issue 27's warnings, answers and tools the agent lacks, each an SDK's own translation).

``shape_problems`` says what is wrong with one package; the tests run it on every adapter, and on a package made
misshapen on purpose, which it must catch."""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.util
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import repeat_hooks
from repeat_hooks.kit import GuardCore, GuardStopped

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("__init__", "guard", "calls", "state", "testing")
"""The modules every adapter has: the exports, the SDK-facing guard, the SDK's calls and results, where the state
lives (and ``stop_of``), the scripted model and the conformance driver."""
COMMON = ("policy", "store", "cost", "clock", "is_failure", "check_tools", "on_stop", "fail")
"""The keywords every adapter's guard takes, with the same values everywhere (``repeat_hooks.kit.core``)."""
NEEDED = ("Policy", "Stop", "StopReason", "TokenPrices", "GuardSetupError", "RepeatGuardStopped", "stop_of")
MAX_NAMES = 14
MAX_LINES = 1_000


@dataclass(frozen=True)
class Shape:
    """What one adapter declares of itself: its guard, and where it differs from the rest (with the SDK fact)."""

    guard: str
    """The name users build the guard with (a class, or a function that guards an SDK object)."""
    settings_on_class: bool = False
    """The keywords are class variables of a subclass (Mistral: rc11 rebuilds hook objects from their class)."""
    async_stop_of: bool = False
    """``stop_of`` awaits a store: the SDK hands the caller nothing the stop could travel in."""
    extra: frozenset[str] = field(default_factory=frozenset)
    """Modules beyond ``ROLES``: each one's docstring says in its first line why it ``exists``."""
    venv: str | None = None
    """The venv of its own its SDK's tests run in (CrewAI pins openai 2.x: ``make test-crewai``), where its shape is
    checked; the shared venv, which cannot import it, skips it saying so."""
    command: bool = False
    """A coding CLI's hook command (Claude Code): the CLI runs one process per event, so there is no guard object a
    user constructs, nor keywords to give it; ``guard`` names the function ``repeat-hooks hook <cli>`` calls (its
    streams and environment keyword-only), the settings come from files (``repeat_hooks.kit.command``: ``Policy``'s
    fields and ``fail``), and the module has what ``repeat-hooks install`` needs (``CLI``, ``ENTRIES``,
    ``settings_file``). No cost is fed (no hook event carries usage), so ``TokenPrices`` is not exported."""


ADAPTERS: dict[str, Shape] = {
    "agent_framework": Shape("RepeatGuardMiddleware"),
    "claude_agent_sdk": Shape("RepeatGuardHooks", async_stop_of=True, extra=frozenset({"stream"})),
    "claude_code": Shape("hook", command=True, extra=frozenset({"transcript"})),
    "codex": Shape("hook", command=True),
    "crewai": Shape("RepeatGuard", venv="crewai"),
    "gemini_cli": Shape("hook", command=True),
    "google_adk": Shape("RepeatGuardPlugin"),
    "langchain": Shape("RepeatGuardMiddleware", extra=frozenset({"refusal"})),
    "llama_index": Shape("RepeatGuard"),
    "mistral": Shape("RepeatGuardHook", settings_on_class=True, async_stop_of=True, extra=frozenset({"settings"})),
    "openai_agents": Shape("guard_agent", extra=frozenset({"tracing"})),
    "pydantic_ai": Shape("RepeatGuard", extra=frozenset({"tools"})),
    "strands": Shape("RepeatGuardHooks"),
}
"""Every adapter under ``adapters/``; a new one adds its line here (``test_every_adapter_declares_its_shape``)."""


def runtime_lines(package: Path) -> int:
    """The lines of an adapter's modules, ``testing.py`` left out."""
    return sum(len(path.read_text().splitlines()) for path in package.glob("*.py") if path.stem != "testing")


def _mutable_globals(path: Path) -> list[str]:
    """Module-level names bound to a mutable container (a display or a constructor of one)."""
    mutable = {"dict", "list", "set", "OrderedDict", "defaultdict", "WeakKeyDictionary", "WeakValueDictionary"}
    found = []
    for node in ast.parse(path.read_text()).body:
        target: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id == "__all__":
            continue
        called = value.func if isinstance(value, ast.Call) else None
        name = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) else ""
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            name in mutable
        ):
            found.append(f"{path.name}: {target.id}")
    return found


def shape_problems(package: Path, shape: Shape) -> list[str]:
    """What is wrong with the adapter package at ``package`` (importable as its folder's name), given ``shape``."""
    problems: list[str] = []
    modules = {path.stem for path in package.glob("*.py")}
    missing = sorted(set(ROLES) - modules)
    if missing:
        problems.append(f"missing modules {missing}")
    for extra in sorted(modules - set(ROLES)):
        doc = ast.get_docstring(ast.parse((package / f"{extra}.py").read_text())) or ""
        if extra not in shape.extra or "exists" not in doc.split("\n", 1)[0]:
            problems.append(f"{extra}.py: an extra module must be declared and say in its first line why it exists")
    for path in sorted(package.glob("*.py")):
        if path.stem != "testing":  # its UNSUPPORTED table is the kit's convention, and no runtime state
            problems += [f"module-level mutable state: {name}" for name in _mutable_globals(path)]
    lines = runtime_lines(package)
    if lines > MAX_LINES:
        problems.append(f"runtime code is {lines} lines, more than {MAX_LINES}")
    if problems:
        return problems  # the rest imports the package
    module = importlib.import_module(package.name)
    names = list(getattr(module, "__all__", ()))
    if len(names) > MAX_NAMES:
        problems.append(f"__all__ holds {len(names)} names, more than {MAX_NAMES}")
    needed = [name for name in NEEDED if not (shape.command and name == "TokenPrices")]
    absent = [name for name in (*needed, shape.guard) if name not in names]
    if absent:
        problems.append(f"__all__ lacks {absent}")
    unbound = [name for name in names if not hasattr(module, name)]
    if unbound:
        problems.append(f"__all__ names {unbound}, which the package does not have")
    if problems:
        return problems
    problems += _guard_problems(module, shape)
    problems += _stop_of_problems(module.stop_of, shape)
    problems += _stop_of_reads(module)
    stopped, setup = module.RepeatGuardStopped, module.GuardSetupError
    if not (isinstance(stopped, type) and issubclass(stopped, GuardStopped)):
        problems.append("RepeatGuardStopped is not a repeat_hooks.kit.GuardStopped")
    if not (isinstance(setup, type) and issubclass(setup, repeat_hooks.GuardSetupError)):
        problems.append("GuardSetupError is not a repeat_hooks.GuardSetupError")
    return problems


def _guard_problems(module: Any, shape: Shape) -> list[str]:
    guard = getattr(module, shape.guard)
    if shape.command:
        from repeat_hooks.offline.hooks import CLIS

        parameters = inspect.signature(guard).parameters
        streams = ("stdin", "stdout", "stderr", "environ")
        if [name for name in parameters if parameters[name].kind is inspect.Parameter.KEYWORD_ONLY] != list(streams):
            return [f"{shape.guard} takes {streams} keyword-only, and nothing else"]
        installs = [name for name in ("CLI", "ENTRIES", "settings_file") if not hasattr(module, name)]
        if installs:
            return [f"a hook command's package lacks {installs}"]
        listed = CLIS.get(module.CLI, ("",))[0]
        return (
            [] if listed == module.__name__ else [f"repeat_hooks.offline.hooks.CLIS does not map {module.CLI!r} here"]
        )
    if shape.settings_on_class:
        hints = inspect.get_annotations(guard, eval_str=False) if isinstance(guard, type) else {}
        absent = [name for name in COMMON if name not in hints and not hasattr(guard, name)]
        if absent:
            return [f"{shape.guard} lacks the class settings {absent}"]
        core = getattr(guard, "core", None)
        return [] if isinstance(core, GuardCore) else [f"{shape.guard}.core is not a GuardCore"]
    parameters = inspect.signature(guard).parameters
    absent = [name for name in COMMON if name not in parameters]
    if absent:
        return [f"{shape.guard} does not take {absent}"]
    wrong = [name for name in COMMON[1:] if parameters[name].kind is not inspect.Parameter.KEYWORD_ONLY]
    if wrong:
        return [f"{shape.guard}: {wrong} must be keyword-only"]
    return []


def _stop_of_problems(stop_of: Any, shape: Shape) -> list[str]:
    problems = []
    positional = [
        parameter
        for parameter in inspect.signature(stop_of).parameters.values()
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) != 1 or positional[0].kind is not inspect.Parameter.POSITIONAL_ONLY:
        problems.append("stop_of takes one positional-only argument (what the SDK handed back); the rest keyword-only")
    if inspect.iscoroutinefunction(stop_of) != shape.async_stop_of:
        problems.append(f"stop_of is {'not ' if shape.async_stop_of else ''}async, against the adapter's shape")
    returned = inspect.signature(stop_of).return_annotation
    if "Stop | None" not in str(returned):
        problems.append(f"stop_of returns {returned}, not Stop | None")
    return problems


def _stop_of_reads(module: Any) -> list[str]:
    """``stop_of`` of the adapter's ``RepeatGuardStopped`` (what ``on_stop="raise"`` raises) is its stop, with no
    other argument; what it cannot read (``None``, a number) raises the adapter's ``GuardSetupError`` saying what it
    takes, the exception among it."""
    stop = repeat_hooks.Stop(message="Stopped.", reason=repeat_hooks.StopReason.MAX_STEPS)

    def read(given: Any) -> Any:
        found = module.stop_of(given)
        return asyncio.run(found) if inspect.iscoroutine(found) else found

    problems = []
    try:
        if read(module.RepeatGuardStopped(stop)) != stop:
            problems.append("stop_of(RepeatGuardStopped(stop)) is not the stop")
    except Exception as error:
        problems.append(f"stop_of(RepeatGuardStopped(stop)) raised {type(error).__name__}: {error}")
    for unreadable in (None, 42):
        said = ("stop_of takes", "RepeatGuardStopped", f"got {type(unreadable).__name__}")
        try:
            read(unreadable)
        except module.GuardSetupError as error:
            if not all(words in str(error) for words in said):
                problems.append(f"stop_of({unreadable!r}) says {str(error)!r}, not what it takes and what it got")
        except Exception as error:
            problems.append(f"stop_of({unreadable!r}) raised {type(error).__name__}, not the adapter's GuardSetupError")
        else:
            problems.append(f"stop_of({unreadable!r}) returned: it must raise GuardSetupError saying what it takes")
    return problems


def test_every_adapter_declares_its_shape() -> None:
    assert sorted(path.name for path in (ROOT / "adapters").iterdir() if (path / "pyproject.toml").exists()) == sorted(
        ADAPTERS
    )


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_the_adapter_has_the_shape(name: str) -> None:
    package = ROOT / "adapters" / name / "src" / f"repeat_hooks_{name}"
    if ADAPTERS[name].venv is not None and importlib.util.find_spec(package.name) is None:
        pytest.skip(f"{package.name} is tested in .venv-{ADAPTERS[name].venv} (make test-{ADAPTERS[name].venv})")
    assert shape_problems(package, ADAPTERS[name]) == []


def test_the_adapters_runtime_code_stays_small_in_all() -> None:
    total = sum(runtime_lines(ROOT / "adapters" / name / "src" / f"repeat_hooks_{name}") for name in ADAPTERS)
    # 4,997 at issue 25's close; issue 27's features added each SDK's own translation (5,749); issue 29's Claude Code
    # hook command 417 with its transcript reader (its process, settings, store and install are the kit's:
    # repeat_hooks.kit.command, .install); Gemini CLI's hook command 299 and Codex's 234 (each its events and answers);
    # issue 30's three SDKs, each about 600 asked (Agent Framework 594, LlamaIndex 599; CrewAI 679: attach and detach
    # on process-global hook registries, its own turn ids, the executor, a call's two hooks tied without a call id,
    # guarded copies for kickoff_for_each; a response's outcomes in order are kit.Batch.in_order); Claude Code's Stop
    # and its calls answered by the CLI itself (425)
    assert total <= 8_600


def test_a_misshapen_adapter_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "repeat_hooks_misshapen"
    package.mkdir()
    for role in ("calls", "state", "testing"):
        (package / f"{role}.py").write_text('"""A role."""\n')
    (package / "helpers.py").write_text('"""Helpers."""\n\nSEEN = {}\n')
    shape = Shape("Guard", extra=frozenset({"helpers"}))
    assert shape_problems(package, shape) == [
        "missing modules ['__init__', 'guard']",
        "helpers.py: an extra module must be declared and say in its first line why it exists",
        "module-level mutable state: helpers.py: SEEN",
    ]

    (package / "helpers.py").write_text('"""This module exists because the SDK lacks helpers."""\n')
    (package / "guard.py").write_text(
        textwrap.dedent(
            '''
            """The guard."""
            from repeat_hooks import GuardSetupError

            class RepeatGuardStopped(Exception):
                """Not the kit's."""

            class Guard:
                def __init__(self, policy=None, store=None, *, cost=None): ...

            def stop_of(result, turn_id=None) -> None: ...
            '''
        )
    )
    (package / "__init__.py").write_text(
        '"""A misshapen adapter."""\n'
        "from repeat_hooks import Policy, Stop, StopReason, TokenPrices\n"
        "from .guard import Guard, GuardSetupError, RepeatGuardStopped, stop_of\n"
        '__all__ = ["Guard", "GuardSetupError", "Policy", "RepeatGuardStopped", "Stop", "StopReason", "TokenPrices",'
        ' "stop_of"]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert shape_problems(package, shape) == [
        "Guard does not take ['clock', 'is_failure', 'check_tools', 'on_stop', 'fail']",
        "stop_of takes one positional-only argument (what the SDK handed back); the rest keyword-only",
        "stop_of returns None, not Stop | None",
        "stop_of(RepeatGuardStopped(stop)) is not the stop",
        "stop_of(None) returned: it must raise GuardSetupError saying what it takes",
        "stop_of(42) returned: it must raise GuardSetupError saying what it takes",
        "RepeatGuardStopped is not a repeat_hooks.kit.GuardStopped",
    ]
