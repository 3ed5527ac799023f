"""The house: a pure policy with wings around it, a front door of a few names, no private name crossing a module,
and every spelling that moved in 0.3 still working for a release, with a warning naming the new one."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import repeat_hooks
from repeat_hooks import GuardState, Policy, ToolCall, _moved

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "src" / "repeat_hooks"
PACKAGES = [CORE, *sorted((ROOT / "adapters").glob("*/src/repeat_hooks_*"))]


def mutating() -> bool:
    """Under mutmut, whose trampoline adds a frame: a warning then names the trampoline's line, not the caller's."""
    return "MUTANT_UNDER_TEST" in os.environ


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_the_front_door_loads_a_names_module_when_the_name_is_first_asked_for() -> None:
    # A process that needs no model (a coding CLI's hook client, `repeat-hooks --help`) loads no pydantic.
    loaded = _loaded_after("import repeat_hooks")
    assert "repeat_hooks" in loaded and not {"pydantic", "repeat_hooks.policy", "repeat_hooks.state"} & loaded
    loaded = _loaded_after("import repeat_hooks; repeat_hooks.Policy")
    assert {"pydantic", "repeat_hooks.policy"} <= loaded and "repeat_hooks.hook" not in loaded


def test_importing_the_core_loads_neither_the_offline_tools_nor_opentelemetry() -> None:
    loaded = _loaded_after("from repeat_hooks import *")
    assert "repeat_hooks.policy" in loaded and "repeat_hooks.hook" in loaded  # the scan sees what is loaded
    assert not {name for name in loaded if name.startswith(("repeat_hooks.offline", "opentelemetry"))}
    assert "repeat_hooks.observe.otel" not in loaded and "repeat_hooks.stores.redis" not in loaded
    assert "repeat_hooks.kit.conformance" not in loaded
    assert "repeat_hooks.kit.core" not in loaded and "asyncio" not in loaded  # an adapter's machinery, not the hook's


def test_the_recorder_loads_nothing_of_the_replay() -> None:
    loaded = _loaded_after("from repeat_hooks.offline.recording import DigestRecorder")
    assert "repeat_hooks.offline.recording" in loaded
    assert not {"repeat_hooks.offline.replay", "repeat_hooks.offline.reading", "repeat_hooks.offline.tune"} & loaded


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``path`` (a module of a package under some ``src/``), relative
    modules resolved."""
    source = next(parent for parent in path.parents if parent.name == "src")
    package = path.relative_to(source).parts[:-1]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - (node.level - 1)])
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def test_the_policy_imports_no_observer_machinery() -> None:
    for module in ("policy", "counting", "state", "decision", "call", "result", "messages", "stop_rules"):
        imported = {name for name, _ in _imports(CORE / f"{module}.py")}
        assert not {name for name in imported if name.startswith("repeat_hooks.observe")}, module
        assert "repeat_hooks.observation" in imported or module != "policy"  # it makes the records, as data


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: path.name)
def test_no_module_imports_another_modules_private_name(package: Path) -> None:
    """A package may import its own private submodule (``from . import _moved``); no module reaches into another
    for one of its private names."""
    crossings = []
    for path in sorted(package.rglob("*.py")):
        own = ".".join(path.relative_to(package.parent).parts[:-1])
        for module, names in _imports(path):
            if module.split(".")[0].startswith("repeat_hooks") and module != own:
                private = [name for name in names if name.startswith("_") and not name.startswith("__")]
                crossings += [f"{path.relative_to(ROOT)}: {module}.{name}" for name in private]
    assert crossings == []


def test_the_front_door_holds_a_few_names() -> None:
    assert len(repeat_hooks.__all__) <= 16
    assert {"StopRepeatedCalls", "Policy", "ToolCall", "Refusal", "Stop", "GuardState", "StateStore"} <= set(
        repeat_hooks.__all__
    )
    for name in repeat_hooks.__all__:
        assert getattr(repeat_hooks, name) is not None


@pytest.mark.parametrize("name", sorted(_moved.NAMES))
def test_a_name_that_left_the_front_door_still_works_and_says_where_it_went(name: str) -> None:
    home = importlib.import_module(_moved.NAMES[name])
    with pytest.deprecated_call(match=rf"repeat_hooks\.{name} is deprecated: use {_moved.NAMES[name]}\.{name}"):
        moved = getattr(repeat_hooks, name)
    assert moved is getattr(home, name)


def test_a_name_nobody_ever_had_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        repeat_hooks.no_such_name  # noqa: B018


@pytest.mark.parametrize("old", sorted(_moved.MODULES))
def test_an_old_module_path_still_imports_and_says_where_it_went(old: str) -> None:
    sys.modules.pop(old, None)
    homes = _moved.MODULES[old]
    with pytest.deprecated_call(match=rf"{old} is deprecated: import from {homes[0]}"):
        module = importlib.import_module(old)
    home = importlib.import_module(homes[0])
    public = [name for name in vars(home) if not name.startswith("_")]
    assert public and all(getattr(module, name) is getattr(home, name) for name in public)
    with pytest.raises(AttributeError, match=f"it moved to {homes[0]}"):
        module.no_such_name  # noqa: B018


def test_the_old_recording_module_finds_the_reader_too() -> None:
    sys.modules.pop("repeat_hooks.recording", None)
    with pytest.deprecated_call():
        from repeat_hooks.recording import DigestRecorder, read_folder  # type: ignore[import-not-found]

    from repeat_hooks.offline.reading import read_folder as reader
    from repeat_hooks.offline.recording import DigestRecorder as recorder

    assert (DigestRecorder, read_folder) == (recorder, reader)


def test_the_renamed_verb_and_fields_still_work_with_a_warning() -> None:
    from repeat_hooks import GuardState, Policy, RefusalKind, ToolCall

    policy, state = Policy(count="progress"), GuardState()
    call = ToolCall("refund", {"order": 1}, call_id="c1")
    policy.decide_tool_call(state, call)
    with pytest.deprecated_call(match=r"^Policy\.withdraw_tool_call is deprecated: use Policy\.record_rejection$"):
        policy.withdraw_tool_call(state, call)
    assert state.deliveries[f"c1@{state.turn.number}.0"].settled
    with pytest.deprecated_call() as warned:
        policy.withdraw_tool_call(state, call, turn_id="t2")  # the turn it names, as record_rejection's
    assert state.turn.id == "t2"
    if not mutating():
        assert warned[0].filename == __file__  # the caller's line
    refusal = repeat_hooks.Refusal.model_validate({"message": "m", "reason": "repeated_call", "kind": "cycle"})
    assert refusal.reason is RefusalKind.CYCLE  # a refusal saved by 0.2


def test_a_refusals_reason_is_its_rule_and_never_equals_a_stop_reason() -> None:
    """0.3: a refusal's reason is the rule's ``RefusalKind``; it equals no ``StopReason`` (0.2's
    ``refusal.reason == StopReason.REPEATED_CALL`` is False now: the CHANGELOG says to compare with the rule), and
    equal values hash alike."""
    from repeat_hooks import RefusalKind, StopReason, StopRepeatedCalls, ToolCall

    guard = StopRepeatedCalls(max_calls=1)
    guard.pre_agent_turn()
    guard.pre_tool_call(ToolCall("track", {"id": 1}))
    refusal = guard.pre_tool_call(ToolCall("track", {"id": 1}))
    assert refusal is not None and refusal.reason is RefusalKind.REPEAT and refusal.reason == "repeat"
    assert all(kind != StopReason.REPEATED_CALL for kind in RefusalKind)
    assert {RefusalKind.REPEAT: 1}["repeat"] == 1 and hash(RefusalKind.REPEAT) == hash("repeat")


def test_each_hook_point_is_a_method_of_the_hook_and_the_other_way_round() -> None:
    from repeat_hooks import StopRepeatedCalls
    from repeat_hooks.stop_rules import HookPoint

    methods = {name for name in vars(StopRepeatedCalls) if name.startswith(("pre_", "post_"))}
    assert {point.value for point in HookPoint} == methods - {"pre_tool_calls"}  # a response's calls at once


def test_a_call_rejected_before_it_ran_counts_toward_its_repeats_through_the_hook() -> None:
    from repeat_hooks import RefusalKind, StopRepeatedCalls, ToolCall

    guard = StopRepeatedCalls()
    refund = ToolCall("refund", {"order": 7})
    for _ in range(2):  # asked, let through, rejected by a human: twice
        assert guard.pre_tool_call(refund) is None
        guard.post_tool_rejected(refund)
    refusal = guard.pre_tool_call(refund)
    assert refusal is not None and refusal.reason is RefusalKind.REJECTED
    assert "already rejected 2 times" in refusal.message


def test_a_forwarder_warns_from_the_callers_line_names_the_new_spelling_and_refuses_what_is_gone() -> None:
    from repeat_hooks.policy import Policy

    forward = _moved.forwarder(
        "pkg.old",
        {"a": "repeat_hooks.policy:Policy", "b": ("make_b()", lambda: 42)},
        gone={"c": "compare stop.reason instead"},
    )
    with pytest.warns(DeprecationWarning, match=r"^pkg\.old\.a is deprecated: use repeat_hooks\.policy\.Policy$") as a:
        assert forward("a") is Policy
    with pytest.warns(DeprecationWarning, match=r"^pkg\.old\.b is deprecated: use make_b\(\)$"):
        assert forward("b") == 42
    assert a[0].filename == __file__ or mutating()  # the line that used the old name
    with pytest.raises(AttributeError, match=r"^pkg\.old\.c is gone: compare stop\.reason instead$"):
        forward("c")
    with pytest.raises(AttributeError, match=r"^module 'pkg\.old' has no attribute 'd'$"):
        forward("d")


def test_an_old_module_path_warns_from_the_importing_line_and_says_where_it_went() -> None:
    sys.modules.pop("repeat_hooks.redis", None)
    with pytest.warns(DeprecationWarning, match=r"^repeat_hooks\.redis is deprecated: import from ") as seen:
        import repeat_hooks.redis as old  # type: ignore[import-not-found]
    assert seen[0].filename == __file__ or mutating()
    assert "Deprecated: moved to repeat_hooks.stores.redis" in (old.__doc__ or "")
    before = len(sys.meta_path)
    _moved.install()  # once per process: a second install adds no finder
    assert len(sys.meta_path) == before and any(isinstance(finder, _moved._Finder) for finder in sys.meta_path)


def test_the_kit_loads_each_name_from_its_module_when_first_asked() -> None:
    from repeat_hooks import kit
    from repeat_hooks.kit.batch import Batch

    vars(kit).pop("Batch", None)  # as in a fresh process
    assert kit.Batch is Batch and vars(kit)["Batch"] is Batch  # loaded, then kept
    with pytest.raises(AttributeError, match=r"^module 'repeat_hooks\.kit' has no attribute 'Bacth'$"):
        kit.Bacth  # noqa: B018
    assert {"GuardCore", "Batch", "request"} <= set(dir(kit))


def test_the_stores_wing_imports_its_embedded_and_shared_stores_when_first_asked() -> None:
    from repeat_hooks import stores
    from repeat_hooks.stores.redis import RedisStore
    from repeat_hooks.stores.sqlite import SQLiteStore

    for name, store in (("SQLiteStore", SQLiteStore), ("RedisStore", RedisStore)):
        vars(stores).pop(name, None)  # as in a fresh process
        assert getattr(stores, name) is store and vars(stores)[name] is store
    with pytest.raises(AttributeError, match=r"^module 'repeat_hooks\.stores' has no attribute 'SqliteStore'$"):
        stores.SqliteStore  # noqa: B018


def test_an_adapter_asks_whether_a_call_was_decided_and_under_which_key() -> None:
    policy, state = Policy(ignore_arguments={"trace"}, digest_key=b"k" * 32), GuardState()
    policy.start_turn(state)
    call = ToolCall("track", {"n": 1, "trace": "a"}, call_id="c1")
    assert not policy.decided(state, call)
    assert policy.decide_tool_call(state, call) is None
    assert policy.decided(state, call) and not policy.decided(state, ToolCall("track", {"n": 1}))  # no id: never
    assert not policy.decided(state, call, turn_id="another turn")
    policy.decide_model_call(state)  # the next response: that id is another call's now
    assert not policy.decided(state, call)
    same = policy.key_of(ToolCall("track", {"n": 1, "trace": "b"}))
    assert same == policy.key_of(call) != Policy(digest_key=b"j" * 32).key_of(call)  # settings and key applied
    assert len(same) == 32
